// ropekv: fused RoPE + FP8 quantization + paged KV-cache append.
//
// The one header a user includes. It names no vendor or Kokkos type: device
// streams travel as `void*`, tensors as non-owning strided views.
//
// The contract (shapes, math, addressing, errors) is docs/CONTRACT.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ropekv/config.hpp"

namespace ropekv {

// ---------------------------------------------------------------- dtypes
enum class DType : std::int32_t {
  kInvalid = 0,
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat8E4M3FN,    // OCP e4m3fn: NVIDIA, MI350+; max 448
  kFloat8E5M2,      // max 57344
  kFloat8E4M3FNUZ,  // AMD MI300/MI325 (gfx94x): bias 8, max 240, NaN 0x80
  kInt32,
  kInt64,
};
// What the library knows of each dtype: one row per DType, in enum order.
// to_string, size_of and every dtype rule (validation and its messages, the
// backends' dispatch lists) derive from this table.
struct DTypeInfo {
  DType dtype;
  const char* name;   // as to_string and the messages write it
  std::size_t bytes;  // per element
  bool input;         // a q/k/v input dtype (and of a cos/sin table besides fp32)
  bool output;        // a query output or cache dtype
  bool quantized;     // an FP8 format: the scales apply to it
  bool index;         // an index array or positions dtype
};
// clang-format off
inline constexpr DTypeInfo kDTypes[] = {
    // dtype                 name        bytes input  output quant  index
    {DType::kInvalid,        "invalid",  0,    false, false, false, false},
    {DType::kFloat32,        "fp32",     4,    true,  true,  false, false},
    {DType::kFloat16,        "fp16",     2,    true,  true,  false, false},
    {DType::kBFloat16,       "bf16",     2,    true,  true,  false, false},
    {DType::kFloat8E4M3FN,   "e4m3fn",   1,    false, true,  true,  false},
    {DType::kFloat8E5M2,     "e5m2",     1,    false, true,  true,  false},
    {DType::kFloat8E4M3FNUZ, "e4m3fnuz", 1,    false, true,  true,  false},
    {DType::kInt32,          "int32",    4,    false, false, false, true},
    {DType::kInt64,          "int64",    8,    false, false, false, true},
};
// clang-format on
inline constexpr std::size_t kNumDTypes = sizeof(kDTypes) / sizeof(kDTypes[0]);
// The row of `dtype`; the kInvalid row for a value outside the enum.
constexpr const DTypeInfo& dtype_info(DType dtype) noexcept {
  const auto i = static_cast<std::size_t>(static_cast<std::uint32_t>(dtype));
  return i < kNumDTypes ? kDTypes[i] : kDTypes[0];
}
constexpr const char* to_string(DType dtype) noexcept { return dtype_info(dtype).name; }
// Bytes per element, 0 for kInvalid.
constexpr std::size_t size_of(DType dtype) noexcept { return dtype_info(dtype).bytes; }

// ---------------------------------------------------------------- status
enum class Status : std::int32_t {
  kSuccess = 0,
  kErrorNullPointer,         // data required but null
  kErrorUnsupportedDType,    // dtype or dtype combination not supported
  kErrorInvalidRank,         // a view has the wrong rank
  kErrorShapeMismatch,       // extents disagree between inputs, outputs, caches
  kErrorInvalidRotaryDim,    // R odd or zero
  kErrorCosSinMismatch,      // cos/sin table width != R, or empty table
  kErrorNonContiguous,       // last dim not contiguous
  kErrorInvalidStride,       // negative stride
  kErrorMisaligned,          // pointer not aligned to its element size
  kErrorInvalidPageSize,     // page_size <= 0
  kErrorInvalidScale,        // host scale not positive and finite
  kErrorOverlap,             // an output overlaps itself, another output or an input
  kErrorInvalidArgument,     // an enum value out of range, MLA with a value, ...
  kErrorBackendNotCompiled,  // the requested backend is not in this build
  kErrorNoDevice,            // the backend is compiled but has no device
  kErrorLaunchFailed,        // the backend's launch reported an error
};
const char* to_string(Status status) noexcept;

// The outcome of every call: a status plus a message that names the argument
// and the rule, e.g. "k_cache_rope.stride[3] must be 1 (contiguous last dim), got 2".
//
// The message is a NUL-terminated string; the bytes after its NUL are not
// part of it (a success costs no 256-byte clear, and copies copy the string).
struct Result {
  Status status = Status::kSuccess;
  char message[256];

  Result() noexcept { message[0] = '\0'; }
  Result(const Result& other) noexcept { *this = other; }
  Result& operator=(const Result& other) noexcept {
    status = other.status;
    std::size_t n = 0;
    while (n + 1 < sizeof message && other.message[n] != '\0') {
      message[n] = other.message[n];
      ++n;
    }
    message[n] = '\0';
    return *this;
  }
  bool ok() const noexcept { return status == Status::kSuccess; }
};

// ---------------------------------------------------------------- views
// A non-owning strided view. Extents and strides are int64, strides in
// elements. A view with rank 0 is "absent" (used for an empty non-rotary part
// and for the value of MLA).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kInvalid;
  std::int32_t rank = 0;
  std::int64_t extent[4] = {0, 0, 0, 0};
  std::int64_t stride[4] = {0, 0, 0, 0};

  bool present() const noexcept { return rank > 0; }
  // Number of elements: the product of the extents; 0 for an absent view or
  // one with a zero extent; INT64_MAX when the product does not fit in 64
  // bits (never wraps); -1 for an invalid view (rank above 4, negative extent).
  std::int64_t numel() const noexcept;
};

// Row-major contiguous view of `rank` extents.
TensorView make_contiguous(void* data, DType dtype, std::int32_t rank,
                           const std::int64_t* extents) noexcept;
// Strided view: `rank` extents and strides (elements). The rank is kept as
// given: one outside 0-4 gets validation's rank error, not a truncated view.
TensorView make_strided(void* data, DType dtype, std::int32_t rank, const std::int64_t* extents,
                        const std::int64_t* strides) noexcept;
// 1-D contiguous view (index arrays, positions).
TensorView make_vector(void* data, DType dtype, std::int64_t n) noexcept;

// ---------------------------------------------------------------- the op
enum class AttentionKind : std::int32_t {
  kGqa = 0,  // GQA/MHA: query, key and value; K and V caches
  kMla = 1,  // DeepSeek MLA: Hk == 1, no value, no V cache
};
enum class RopeStyle : std::int32_t {
  kNeox = 0,         // pairs (i, i + R/2)
  kInterleaved = 1,  // pairs (2i, 2i + 1), GPT-J style
};
enum class Addressing : std::int32_t {
  kSlotMapping = 0,  // vLLM: slot[t]; page = slot / ps, entry = slot % ps; slot < 0 = padding
  kPageTable = 1,    // FlashInfer/SGLang: kv_indices, kv_indptr, batch_indices, kv_positions
};

// How a scale turns a value into the stored code (per scale: q, k and v may
// differ). Both are exact IEEE float32 operations on every backend, then the
// output format's conversion; `value / s` and `value * (1 / s)` differ in the
// last bit for most s, so pick the convention the scale was made for.
enum class ScaleConvention : std::int32_t {
  // stored = convert(value / scale): a dequantization scale (real ~= stored *
  // scale), as vLLM keeps them. The default.
  kDivide = 0,
  // stored = convert(value * scale): a quantization scale (FlashInfer,
  // TensorRT-LLM, vLLM's "scale inverted" kernels).
  kMultiply = 1,
};

// A per-tensor scale: a host float or a pointer to one float in the
// backend's memory (device memory for CUDA/HIP), read at run time, so that a
// captured graph sees updated scales; and its convention. Scales apply to FP8
// outputs only; for bf16/fp16/fp32 outputs they are ignored (not read), and
// the scale of an absent tensor (MLA's value) is neither read nor validated.
// A host scale must be positive and finite; a device scale is the caller's
// (any float gives the IEEE result of the convention).
struct Scale {
  float value = 1.0f;
  const float* device = nullptr;  // when set, `value` is ignored
  ScaleConvention convention = ScaleConvention::kDivide;

  // Dividing (dequantization) scales.
  static Scale host(float v) noexcept { return make(v, nullptr, ScaleConvention::kDivide); }
  static Scale on_device(const float* p) noexcept {
    return make(1.0f, p, ScaleConvention::kDivide);
  }
  // Multiplying (quantization) scales.
  static Scale host_multiplier(float m) noexcept {
    return make(m, nullptr, ScaleConvention::kMultiply);
  }
  static Scale on_device_multiplier(const float* p) noexcept {
    return make(1.0f, p, ScaleConvention::kMultiply);
  }

 private:
  static Scale make(float v, const float* p, ScaleConvention c) noexcept {
    Scale s;
    s.value = v;
    s.device = p;
    s.convention = c;
    return s;
  }
};

// Where each token's key and value go.
struct CacheIndex {
  Addressing form = Addressing::kSlotMapping;
  // kSlotMapping: [nnz] int32/int64. slot < 0 marks a padding token.
  TensorView slot_mapping;
  // kPageTable: page = kv_indices[kv_indptr[b] + kv_positions[t] / ps],
  // entry = kv_positions[t] % ps, b = batch_indices[t]; b < 0 = padding.
  TensorView kv_indices;     // [num_entries] int32/int64
  TensorView kv_indptr;      // [batch + 1] int32/int64
  TensorView batch_indices;  // [nnz] int32/int64
  TensorView kv_positions;   // [nnz] int32/int64 (often the same view as `positions`)
};

// Checked mode: the kernel verifies each token's indices (page in [0, P),
// position in [0, max_pos), page-table bounds), skips a bad token instead of
// writing out of bounds, and adds the number skipped to *skipped_tokens
// (memory of the backend: device memory for CUDA/HIP; may be null).
struct CheckedMode {
  bool enabled = false;
  unsigned long long* skipped_tokens = nullptr;
};

// All arguments of one call. Shapes:
//   q_rope [nnz, Hq, R], q_nope [nnz, Hq, N], k_rope [nnz, Hk, R],
//   k_nope [nnz, Hk, N], v [nnz, Hk, Dv] (GQA only); inputs bf16/fp16/fp32,
//   all of one dtype. q_rope_out / q_nope_out: same shapes as q_rope / q_nope.
//   k_cache_rope [P, ps, Hk, R], k_cache_nope [P, ps, Hk, N],
//   v_cache [P, ps, Hk, Dv] (GQA only); one cache dtype.
//   cos_sin_cache [max_pos, R], fp32 or the input dtype.
//   positions [nnz], int32/int64.
// N == 0 is written by leaving q_nope, k_nope, q_nope_out and k_cache_nope
// absent (rank 0) or with a zero last extent.
struct Arguments {
  AttentionKind kind = AttentionKind::kGqa;
  RopeStyle rope_style = RopeStyle::kNeox;

  TensorView q_rope, q_nope, k_rope, k_nope, v;
  TensorView q_rope_out, q_nope_out;
  TensorView k_cache_rope, k_cache_nope, v_cache;
  TensorView cos_sin_cache;
  TensorView positions;
  CacheIndex cache_index;

  Scale q_scale, k_scale, v_scale;
  CheckedMode checked;

  // cudaStream_t / hipStream_t; ignored by the host backend. Device backends
  // launch on the calling thread's current device, which they never change:
  // the stream must belong to it.
  void* stream = nullptr;
  // CUDA: launch with programmatic dependent launch (sm_90+), so the kernel's
  // launch and prologue overlap the previous kernel in the stream. The kernel
  // waits for the previous kernel's memory before it reads anything.
  bool programmatic_dependent_launch = false;
  // Opt-in, with programmatic_dependent_launch only (ignored without it). The
  // caller promises that the index arrays (slot_mapping or the page table),
  // positions, cos_sin_cache and the device scales hold their final values
  // before the kernel launched just before this call in the stream starts
  // running: they are written earlier in the step (vLLM and SGLang prepare
  // them when a step starts) and no kernel that may still run concurrently
  // with this call writes them. The kernel then reads them, and resolves each
  // token's cache slot, before it waits for the previous kernel; only the q, k
  // and v loads and every write come after the wait. q, k, v, the query output
  // and the caches may still be produced or read by the previous kernel.
  bool indices_ready_before_previous_kernel = false;
};

// ---------------------------------------------------------------- backends
enum class Backend : std::int32_t {
  kAuto = 0,  // the first available of CUDA, HIP, host (resolve_backend)
  kHost,      // Kokkos' host space (its own threads when that is serial); host memory
  kCuda,      // all pointers are CUDA device memory (or managed)
  kHip,       // all pointers are HIP device memory
};
const char* to_string(Backend backend) noexcept;
bool backend_compiled(Backend backend) noexcept;
// Compiled and, for device backends, a device is present. The device query is
// made once per process and remembered (a process's device set is fixed).
bool backend_available(Backend backend) noexcept;
// kAuto -> the backend it picks: the first available of CUDA, HIP, host, else
// the first compiled of them (whose run() then reports kErrorNoDevice); a
// concrete backend -> itself.
Backend resolve_backend(Backend backend) noexcept;

// Validate only (a can_implement): runs every host-side rule, launches
// nothing, needs no device. The backend must be compiled in; whether it has
// a device is not checked (validation runs on a build machine without a GPU).
Result validate(const Arguments& args, Backend backend = Backend::kAuto) noexcept;
// Validate, check that the backend has a device (kErrorNoDevice), then run
// (asynchronously on `stream` for devices). For bad arguments run() returns
// what validate() returns, device or not. Nothing is written when it fails;
// nnz == 0 is a successful no-op. Safe inside CUDA graph capture: no
// allocation, no synchronisation, no host read of device data.
Result run(const Arguments& args, Backend backend = Backend::kAuto) noexcept;

// ---------------------------------------------------------------- prepared calls
// A call site validated once and run every step, for engines that call
// with the same shapes, layouts and options every step, outside a graph
// (e.g. one object per layer). run(args) compares args with the prepared
// arguments: where they differ only in what a step changes (the views'
// `data`, the token count nnz, the page table's lengths, device scale and
// checked-mode counter pointers, the stream) it re-checks just the rules
// those fields enter and launches (arguments equal byte for byte to the last
// step that passed keep its verdict: nothing to re-check); on any other
// difference, or when a re-check fails, it runs ropekv::run(args, backend)
// and, when that succeeds, args become the prepared arguments. Its Result is always
// ropekv::run(args, backend)'s. run() without prepare() prepares on its first
// success. One object per calling thread (it is not synchronised).
//
//   ropekv::PreparedCall call(ropekv::Backend::kCuda);  // per layer
//   call.prepare(args);                                 // optional
//   for (each step) { set args' pointers and nnz; call.run(args); }
//
// Or, cheaper per step, only the fields a step changes (Step):
//
//   call.prepare(args);
//   ropekv::Step step = ropekv::step_of(args);
//   for (each step) { set step's pointers and nnz; call.run(step); }

// The fields of Arguments a prepared call's step may change, by the names
// Arguments gives them: each view's data, the token count (extent 0 of the
// per-token views), the page table's lengths, the device scale and
// checked-mode counter pointers, the stream. PreparedCall::run(const Step&)
// takes every other field from the prepared arguments. The data of a view
// the call does not use is ignored.
struct Step {
  void *q_rope = nullptr, *q_nope = nullptr, *k_rope = nullptr, *k_nope = nullptr, *v = nullptr;
  void *q_rope_out = nullptr, *q_nope_out = nullptr;
  void *k_cache_rope = nullptr, *k_cache_nope = nullptr, *v_cache = nullptr;
  void *cos_sin_cache = nullptr, *positions = nullptr;
  // Device scales (Scale::device) and checked mode's counter: null where the
  // prepared call has none (a host scale), set where it has one; a step that
  // changes which is validated in full.
  const float *q_scale = nullptr, *k_scale = nullptr, *v_scale = nullptr;
  unsigned long long* skipped_tokens = nullptr;
  // cache_index's arrays.
  void *slot_mapping = nullptr, *kv_indices = nullptr, *kv_indptr = nullptr;
  void *batch_indices = nullptr, *kv_positions = nullptr;
  std::int64_t nnz = 0;
  std::int64_t num_kv_indices = 0;  // extent 0 of cache_index.kv_indices
  std::int64_t kv_indptr_size = 0;  // extent 0 of cache_index.kv_indptr: batch + 1
  void* stream = nullptr;
};
// The step fields of args (what PreparedCall::run(step_of(args)) runs with).
Step step_of(const Arguments& args) noexcept;

namespace detail {
struct StepPlan;
}
class PreparedCall {
 public:
  explicit PreparedCall(Backend backend = Backend::kAuto) noexcept : backend_(backend) {}
  ~PreparedCall();
  PreparedCall(const PreparedCall&) = delete;
  PreparedCall& operator=(const PreparedCall&) = delete;
  PreparedCall(PreparedCall&& other) noexcept;
  PreparedCall& operator=(PreparedCall&& other) noexcept;

  // Validates args (as validate(args, backend)) and keeps them; on failure
  // the object keeps what it had. Allocates its plan the first time
  // (kErrorLaunchFailed if out of memory).
  Result prepare(const Arguments& args) noexcept;
  // Safe inside graph capture as ropekv::run() is; allocates only when an
  // unprepared object is first prepared by it.
  Result run(const Arguments& args) noexcept;
  // run(args) for args the prepared arguments with step's fields, without
  // reading or comparing the fields a step cannot change: the step's fields
  // pass the step's re-check and launch, or every rule runs on those args
  // (and, when they pass, they become the prepared arguments). Nothing
  // prepared: kErrorInvalidArgument, nothing run. Safe inside graph capture
  // as run(args) is; never allocates.
  Result run(const Step& step) noexcept;
  bool prepared() const noexcept { return plan_ != nullptr; }
  // True when the last run() took the step path (no full validation): an
  // engine can check that its call sites stay on it.
  bool last_run_was_step() const noexcept { return last_step_; }

 private:
  Result keep(const Arguments& validated) noexcept;
  detail::StepPlan* plan_ = nullptr;  // the prepared arguments and their shape
  Backend backend_ = Backend::kAuto;
  bool last_step_ = false;
};

// ---------------------------------------------------------------- layouts
// Views of the common layouts. `rotary_dim` R <= head_dim D; the rotary view
// is the first R elements of each head, the non-rotary view the remaining
// D - R (absent when D == R).

struct QkvViews {
  TensorView q_rope, q_nope, k_rope, k_nope, v;
};
// Views into one fused QKV projection output [nnz, (Hq + 2*Hk) * D], rows
// `token_stride` elements apart (0 = packed).
QkvViews fused_qkv_views(void* qkv, DType dtype, std::int64_t nnz, std::int64_t num_q_heads,
                         std::int64_t num_kv_heads, std::int64_t head_dim, std::int64_t rotary_dim,
                         std::int64_t token_stride = 0) noexcept;

struct HeadViews {
  TensorView rope, nope;
};
// Split a contiguous [nnz, H, D] tensor (e.g. the query output) into its
// rotary and non-rotary views.
HeadViews split_heads(void* data, DType dtype, std::int64_t nnz, std::int64_t num_heads,
                      std::int64_t head_dim, std::int64_t rotary_dim) noexcept;

struct KvCacheViews {
  TensorView k_rope, k_nope, v;
};
// NHD: separate K and V buffers, each [P, ps, Hk, D].
KvCacheViews nhd_kv_cache(void* k_cache, void* v_cache, DType dtype, std::int64_t num_pages,
                          std::int64_t page_size, std::int64_t num_kv_heads, std::int64_t head_dim,
                          std::int64_t rotary_dim) noexcept;
// HND: separate K and V buffers, each [P, Hk, ps, D].
KvCacheViews hnd_kv_cache(void* k_cache, void* v_cache, DType dtype, std::int64_t num_pages,
                          std::int64_t page_size, std::int64_t num_kv_heads, std::int64_t head_dim,
                          std::int64_t rotary_dim) noexcept;
// Stacked K/V in one buffer: kPageMajor = [P, 2, ps, Hk, D] (FlashInfer's
// paged layout, vLLM FlashInfer backend), kKvMajor = [2, P, ps, Hk, D]
// (vLLM's flash-attention backend).
enum class StackOrder : std::int32_t { kPageMajor = 0, kKvMajor = 1 };
KvCacheViews stacked_kv_cache(void* cache, StackOrder order, DType dtype, std::int64_t num_pages,
                              std::int64_t page_size, std::int64_t num_kv_heads,
                              std::int64_t head_dim, std::int64_t rotary_dim) noexcept;
// MLA, vLLM: one buffer [P, ps, latent + rope], each entry [latent | rope].
KvCacheViews mla_cache_single(void* cache, DType dtype, std::int64_t num_pages,
                              std::int64_t page_size, std::int64_t latent_dim,
                              std::int64_t rope_dim) noexcept;
// MLA, FlashInfer: separate ckv [P, ps, latent] and kpe [P, ps, rope] buffers.
KvCacheViews mla_cache_split(void* ckv, void* kpe, DType dtype, std::int64_t num_pages,
                             std::int64_t page_size, std::int64_t latent_dim,
                             std::int64_t rope_dim) noexcept;

// MLA (DeepSeek) query [nnz, H, nope + rope]: each head holds its non-rotary
// part FIRST, then its rotary part, as DeepSeek and vLLM lay it out (e.g. the
// decode query [ql_nope | q_pe], whose nope part, after absorption, has the
// latent dim: the op needs N == the key's latent dim). Rows `token_stride`
// elements apart (0 = packed, H * (nope + rope)). For the query input and the
// query output alike.
HeadViews mla_query_views(void* q, DType dtype, std::int64_t nnz, std::int64_t num_heads,
                          std::int64_t nope_dim, std::int64_t rope_dim,
                          std::int64_t token_stride = 0) noexcept;
// MLA key inputs: the latent kv_c (normed) [nnz, latent] and the rotary k_pe
// [nnz, rope], each with its own row stride in elements (0 = packed). Often
// both are views into one kv_a projection output [nnz, latent + rope]:
// k_latent = kv_a, k_rope = kv_a + latent, both strides latent + rope.
// Returns rope = [nnz, 1, rope] and nope = [nnz, 1, latent] (Hk = 1).
HeadViews mla_key_views(void* k_latent, void* k_rope, DType dtype, std::int64_t nnz,
                        std::int64_t latent_dim, std::int64_t rope_dim,
                        std::int64_t latent_token_stride = 0,
                        std::int64_t rope_token_stride = 0) noexcept;

// ---------------------------------------------------------------- addressing
// Slot mapping (vLLM): `nnz` slots, int32 or int64; slot < 0 marks padding.
CacheIndex slot_mapping_index(const void* slot_mapping, DType dtype, std::int64_t nnz) noexcept;
// Page table (FlashInfer/SGLang), each array int32 or int64 with its own dtype:
// kv_indices [num_kv_indices] (the pages of all sequences, back to back),
// kv_indptr [kv_indptr_length = batch + 1] (sequence b's pages are
// kv_indices[kv_indptr[b] .. kv_indptr[b + 1])), and per token
// batch_indices [nnz] (< 0 marks padding) and kv_positions [nnz] (the
// token's position in its sequence; often the RoPE positions).
CacheIndex page_table_index(const void* kv_indices, DType kv_indices_dtype,
                            std::int64_t num_kv_indices, const void* kv_indptr,
                            DType kv_indptr_dtype, std::int64_t kv_indptr_length,
                            const void* batch_indices, DType batch_indices_dtype,
                            const void* kv_positions, DType kv_positions_dtype,
                            std::int64_t nnz) noexcept;

// ---------------------------------------------------------------- assembly
// Copies helper views into the fields of `a` of the same names: the five
// inputs, the query output, the K (and V) cache.
void set_inputs(Arguments& a, const QkvViews& in) noexcept;
void set_query_output(Arguments& a, const HeadViews& q_out) noexcept;
void set_kv_cache(Arguments& a, const KvCacheViews& cache) noexcept;

}  // namespace ropekv
