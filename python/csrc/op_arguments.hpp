// The PyTorch op ropekv::rope_quantize_append: its schema, its arguments as
// the dispatcher passes them, and their translation into ropekv::Arguments,
// written once for the CPU, CUDA and Meta kernels.
#pragma once

#include <ATen/ATen.h>
#include <torch/version.h>

#include <string>

#include "ropekv/ropekv.hpp"

#if TORCH_VERSION_MAJOR >= 2
#include <optional>
#endif

// torch 2.1 added the float8 dtypes e4m3fn and e5m2, 2.2 e4m3fnuz.
#define ROPEKV_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace ropekv_torch {

#if TORCH_VERSION_MAJOR >= 2
using OptTensor = std::optional<at::Tensor>;
#else
using OptTensor = c10::optional<at::Tensor>;
#endif

// The schema. Written tensors carry an alias set with `!`; every other
// tensor is only read. A cache view and its sibling (the rotary and the
// non-rotary view of one NHD buffer) may share storage.
inline constexpr const char* kSchema =
    "rope_quantize_append(Tensor q_rope, Tensor? q_nope, Tensor k_rope, Tensor? k_nope, "
    "Tensor? v, Tensor cos_sin_cache, Tensor positions, Tensor(a!) q_rope_out, "
    "Tensor(b!)? q_nope_out, Tensor(c!) k_cache_rope, Tensor(d!)? k_cache_nope, "
    "Tensor(e!)? v_cache, Tensor? slot_mapping, Tensor? kv_indices, Tensor? kv_indptr, "
    "Tensor? batch_indices, Tensor? kv_positions, Tensor? q_scale, Tensor? k_scale, "
    "Tensor? v_scale, float q_scale_value, float k_scale_value, float v_scale_value, "
    "str scale_convention, str kind, str rope_style, str cache_dtype, str q_out_dtype, "
    "bool checked, Tensor(f!)? skipped_tokens, bool pdl, "
    "bool indices_ready_before_previous_kernel) -> ()";

// One call's arguments, as the schema names them.
struct OpArgs {
  const at::Tensor& q_rope;
  const OptTensor& q_nope;
  const at::Tensor& k_rope;
  const OptTensor& k_nope;
  const OptTensor& v;
  const at::Tensor& cos_sin_cache;
  const at::Tensor& positions;
  const at::Tensor& q_rope_out;
  const OptTensor& q_nope_out;
  const at::Tensor& k_cache_rope;
  const OptTensor& k_cache_nope;
  const OptTensor& v_cache;
  const OptTensor& slot_mapping;
  const OptTensor& kv_indices;
  const OptTensor& kv_indptr;
  const OptTensor& batch_indices;
  const OptTensor& kv_positions;
  const OptTensor& q_scale;
  const OptTensor& k_scale;
  const OptTensor& v_scale;
  double q_scale_value, k_scale_value, v_scale_value;
  const std::string& scale_convention;
  const std::string& kind;
  const std::string& rope_style;
  const std::string& cache_dtype;
  const std::string& q_out_dtype;
  bool checked;
  const OptTensor& skipped_tokens;
  bool pdl;
  bool indices_ready_before_previous_kernel;
};

// Where a kernel's tensors live and how it runs the call.
enum class Mode {
  kCpu,   // the host backend
  kCuda,  // the CUDA backend, on `stream`
  kMeta,  // validation only, on stand-in addresses: nothing is read or written
};

// Translates, validates and (but for kMeta) runs the call. Raises ValueError
// with the library's message for a bad argument, RuntimeError when the launch
// fails. Writes nothing when it raises.
void run_op(const OpArgs& a, Mode mode, void* stream);

// The kernel registered for each dispatch key: `Device::run(const OpArgs&)`
// picks the mode (and, for CUDA, the device and stream).
template <class Device>
void op_kernel(const at::Tensor& q_rope, const OptTensor& q_nope, const at::Tensor& k_rope,
               const OptTensor& k_nope, const OptTensor& v, const at::Tensor& cos_sin_cache,
               const at::Tensor& positions, const at::Tensor& q_rope_out,
               const OptTensor& q_nope_out, const at::Tensor& k_cache_rope,
               const OptTensor& k_cache_nope, const OptTensor& v_cache,
               const OptTensor& slot_mapping, const OptTensor& kv_indices,
               const OptTensor& kv_indptr, const OptTensor& batch_indices,
               const OptTensor& kv_positions, const OptTensor& q_scale, const OptTensor& k_scale,
               const OptTensor& v_scale, double q_scale_value, double k_scale_value,
               double v_scale_value, std::string scale_convention, std::string kind,
               std::string rope_style, std::string cache_dtype, std::string q_out_dtype,
               bool checked, const OptTensor& skipped_tokens, bool pdl,
               bool indices_ready_before_previous_kernel) {
  const OpArgs a{q_rope,
                 q_nope,
                 k_rope,
                 k_nope,
                 v,
                 cos_sin_cache,
                 positions,
                 q_rope_out,
                 q_nope_out,
                 k_cache_rope,
                 k_cache_nope,
                 v_cache,
                 slot_mapping,
                 kv_indices,
                 kv_indptr,
                 batch_indices,
                 kv_positions,
                 q_scale,
                 k_scale,
                 v_scale,
                 q_scale_value,
                 k_scale_value,
                 v_scale_value,
                 scale_convention,
                 kind,
                 rope_style,
                 cache_dtype,
                 q_out_dtype,
                 checked,
                 skipped_tokens,
                 pdl,
                 indices_ready_before_previous_kernel};
  Device::run(a);
}

}  // namespace ropekv_torch
