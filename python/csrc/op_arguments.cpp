// Tensors -> ropekv::Arguments, and the call, for every kernel of the op.
#include "op_arguments.hpp"

#include <cstdint>
#include <vector>

namespace ropekv_torch {
namespace {

using ropekv::DType;
using ropekv::TensorView;

// A tensor's element type; kInvalid for a dtype ropekv does not take.
// uint8 is decided by the op's dtype strings (fp8_code).
DType dtype_of(at::ScalarType s) {
  switch (s) {
    case at::ScalarType::Float: return DType::kFloat32;
    case at::ScalarType::Half: return DType::kFloat16;
    case at::ScalarType::BFloat16: return DType::kBFloat16;
    case at::ScalarType::Int: return DType::kInt32;
    case at::ScalarType::Long: return DType::kInt64;
#if ROPEKV_TORCH_AT_LEAST(2, 1)
    case at::ScalarType::Float8_e4m3fn: return DType::kFloat8E4M3FN;
    case at::ScalarType::Float8_e5m2: return DType::kFloat8E5M2;
#endif
#if ROPEKV_TORCH_AT_LEAST(2, 2)
    case at::ScalarType::Float8_e4m3fnuz: return DType::kFloat8E4M3FNUZ;
#endif
    default: return DType::kInvalid;
  }
}

// A dtype string of the op (cache_dtype, q_out_dtype): "auto" (the tensor's
// own dtype) or an FP8 format by vLLM's names.
DType named_fp8(const std::string& name, const char* arg) {
  if (name == "auto") return DType::kInvalid;
  if (name == "fp8" || name == "fp8_e4m3" || name == "fp8_e4m3fn") return DType::kFloat8E4M3FN;
  if (name == "fp8_e5m2") return DType::kFloat8E5M2;
  if (name == "fp8_e4m3fnuz") return DType::kFloat8E4M3FNUZ;
  TORCH_CHECK_VALUE(false, "ropekv: ", arg,
                    " must be 'auto', 'fp8' (= 'fp8_e4m3'), 'fp8_e4m3', 'fp8_e5m2' or "
                    "'fp8_e4m3fnuz', got '",
                    name, "'");
  return DType::kInvalid;
}

// Addresses the library is given: each tensor's data, or for the Meta
// kernel a stand-in that keeps what validation needs (alignment, and which
// views share a buffer): one distinct base per storage, 2^44 bytes apart,
// plus the view's offset.
class Addresses {
 public:
  explicit Addresses(bool stand_in) : stand_in_(stand_in) {}

  void* of(const at::Tensor& t) {
    if (!stand_in_) return t.data_ptr();
    const void* key = t.unsafeGetTensorImpl();
    try {
      if (t.has_storage()) key = t.storage().unsafeGetStorageImpl();
    } catch (const c10::Error&) {
      // A tensor whose storage may not be read: a buffer of its own.
    }
    std::size_t i = 0;
    while (i < keys_.size() && keys_[i] != key) ++i;
    if (i == keys_.size()) keys_.push_back(key);
    const std::uintptr_t base = std::uintptr_t(i + 1) << 44;
    return reinterpret_cast<void*>(base + std::uintptr_t(t.storage_offset()) *
                                              std::uintptr_t(t.element_size()));
  }

 private:
  bool stand_in_;
  std::vector<const void*> keys_;
};

class Translator {
 public:
  Translator(const OpArgs& a, Mode mode) : a_(a), mode_(mode), addr_(mode == Mode::kMeta) {}

  ropekv::Arguments arguments();

 private:
  // `t` as a view; `fp8` gives the meaning of a uint8 tensor (kInvalid: none).
  TensorView view(const at::Tensor& t, const char* name, DType fp8 = DType::kInvalid);
  TensorView view(const OptTensor& t, const char* name, DType fp8 = DType::kInvalid) {
    return t.has_value() ? view(*t, name, fp8) : TensorView{};
  }
  ropekv::Scale scale(const OptTensor& t, double value, const char* name,
                      ropekv::ScaleConvention convention);
  void check_device(const at::Tensor& t, const char* name) const;

  const OpArgs& a_;
  Mode mode_;
  Addresses addr_;
};

void Translator::check_device(const at::Tensor& t, const char* name) const {
  TORCH_CHECK_VALUE(t.device() == a_.q_rope.device(), "ropekv: ", name, " is on ", t.device(),
                    ", but q_rope is on ", a_.q_rope.device(), " (every tensor on one device)");
}

TensorView Translator::view(const at::Tensor& t, const char* name, DType fp8) {
  check_device(t, name);
  TORCH_CHECK_VALUE(t.dim() >= 1 && t.dim() <= 4, "ropekv: ", name,
                    " must have 1 to 4 dims (its rank is checked next), got ", t.dim());
  DType d = dtype_of(t.scalar_type());
  if (t.scalar_type() == at::ScalarType::Byte) {
    TORCH_CHECK_VALUE(fp8 != DType::kInvalid, "ropekv: ", name,
                      " is a uint8 tensor; name its FP8 format with ",
                      (std::string(name).rfind("q_", 0) == 0 ? "q_out_dtype" : "cache_dtype"),
                      " ('fp8_e4m3', 'fp8_e5m2' or 'fp8_e4m3fnuz')");
    d = fp8;
  } else if (fp8 != DType::kInvalid) {
    TORCH_CHECK_VALUE(d == fp8, "ropekv: ", name, " has dtype ", t.scalar_type(),
                      ", but its dtype string names ", ropekv::to_string(fp8));
  }
  TORCH_CHECK_VALUE(d != DType::kInvalid, "ropekv: ", name, " has dtype ", t.scalar_type(),
                    ", which ropekv does not take");
  TensorView v;
  v.data = addr_.of(t);
  v.dtype = d;
  v.rank = static_cast<std::int32_t>(t.dim());
  for (int k = 0; k < v.rank; ++k) {
    v.extent[k] = t.size(k);
    v.stride[k] = t.stride(k);
  }
  return v;
}

ropekv::Scale Translator::scale(const OptTensor& t, double value, const char* name,
                                ropekv::ScaleConvention convention) {
  const bool multiply = convention == ropekv::ScaleConvention::kMultiply;
  if (!t.has_value()) {
    const float f = static_cast<float>(value);
    return multiply ? ropekv::Scale::host_multiplier(f) : ropekv::Scale::host(f);
  }
  check_device(*t, name);
  TORCH_CHECK_VALUE(t->scalar_type() == at::ScalarType::Float && t->numel() == 1, "ropekv: ", name,
                    " must be a float32 tensor of one element, got ", t->scalar_type(), " with ",
                    t->numel(), " elements");
  const float* p = static_cast<const float*>(addr_.of(*t));
  return multiply ? ropekv::Scale::on_device_multiplier(p) : ropekv::Scale::on_device(p);
}

ropekv::Arguments Translator::arguments() {
  const OpArgs& o = a_;
  ropekv::Arguments a;
  if (o.kind == "gqa")
    a.kind = ropekv::AttentionKind::kGqa;
  else if (o.kind == "mla")
    a.kind = ropekv::AttentionKind::kMla;
  else
    TORCH_CHECK_VALUE(false, "ropekv: kind must be 'gqa' or 'mla', got '", o.kind, "'");
  if (o.rope_style == "neox")
    a.rope_style = ropekv::RopeStyle::kNeox;
  else if (o.rope_style == "interleaved")
    a.rope_style = ropekv::RopeStyle::kInterleaved;
  else
    TORCH_CHECK_VALUE(false, "ropekv: rope_style must be 'neox' or 'interleaved', got '",
                      o.rope_style, "'");
  ropekv::ScaleConvention convention = ropekv::ScaleConvention::kDivide;
  if (o.scale_convention == "multiply")
    convention = ropekv::ScaleConvention::kMultiply;
  else
    TORCH_CHECK_VALUE(o.scale_convention == "divide",
                      "ropekv: scale_convention must be 'divide' or 'multiply', got '",
                      o.scale_convention, "'");

  const DType cache_fp8 = named_fp8(o.cache_dtype, "cache_dtype");
  const DType q_fp8 = named_fp8(o.q_out_dtype, "q_out_dtype");
  a.q_rope = view(o.q_rope, "q_rope");
  a.q_nope = view(o.q_nope, "q_nope");
  a.k_rope = view(o.k_rope, "k_rope");
  a.k_nope = view(o.k_nope, "k_nope");
  a.v = view(o.v, "v");
  a.q_rope_out = view(o.q_rope_out, "q_rope_out", q_fp8);
  a.q_nope_out = view(o.q_nope_out, "q_nope_out", q_fp8);
  a.k_cache_rope = view(o.k_cache_rope, "k_cache_rope", cache_fp8);
  a.k_cache_nope = view(o.k_cache_nope, "k_cache_nope", cache_fp8);
  a.v_cache = view(o.v_cache, "v_cache", cache_fp8);
  a.cos_sin_cache = view(o.cos_sin_cache, "cos_sin_cache");
  a.positions = view(o.positions, "positions");

  const bool page_table = o.kv_indices.has_value() || o.kv_indptr.has_value() ||
                          o.batch_indices.has_value() || o.kv_positions.has_value();
  TORCH_CHECK_VALUE(o.slot_mapping.has_value() != page_table,
                    "ropekv: give either slot_mapping or the page table (kv_indices, kv_indptr, "
                    "batch_indices, kv_positions), ",
                    page_table ? "not both" : "one of them");
  if (page_table) {
    TORCH_CHECK_VALUE(o.kv_indices.has_value() && o.kv_indptr.has_value() &&
                          o.batch_indices.has_value() && o.kv_positions.has_value(),
                      "ropekv: a page table needs all of kv_indices, kv_indptr, batch_indices "
                      "and kv_positions");
    a.cache_index.form = ropekv::Addressing::kPageTable;
    a.cache_index.kv_indices = view(o.kv_indices, "kv_indices");
    a.cache_index.kv_indptr = view(o.kv_indptr, "kv_indptr");
    a.cache_index.batch_indices = view(o.batch_indices, "batch_indices");
    a.cache_index.kv_positions = view(o.kv_positions, "kv_positions");
  } else {
    a.cache_index.form = ropekv::Addressing::kSlotMapping;
    a.cache_index.slot_mapping = view(o.slot_mapping, "slot_mapping");
  }

  a.q_scale = scale(o.q_scale, o.q_scale_value, "q_scale", convention);
  a.k_scale = scale(o.k_scale, o.k_scale_value, "k_scale", convention);
  a.v_scale = scale(o.v_scale, o.v_scale_value, "v_scale", convention);

  a.checked.enabled = o.checked;
  if (o.skipped_tokens.has_value()) {
    const at::Tensor& s = *o.skipped_tokens;
    check_device(s, "skipped_tokens");
    TORCH_CHECK_VALUE(s.scalar_type() == at::ScalarType::Long && s.numel() == 1,
                      "ropekv: skipped_tokens must be an int64 tensor of one element, got ",
                      s.scalar_type(), " with ", s.numel(), " elements");
    a.checked.skipped_tokens = static_cast<unsigned long long*>(addr_.of(s));
  }
  a.programmatic_dependent_launch = o.pdl;
  a.indices_ready_before_previous_kernel = o.indices_ready_before_previous_kernel;
  return a;
}

// True when a size, stride or offset of one of the op's tensors is symbolic
// (torch.compile with dynamic shapes): the values validation needs are then
// unknown while tracing, and the kernel that runs checks them.
bool symbolic(const OpArgs& a) {
#if ROPEKV_TORCH_AT_LEAST(2, 1)
  auto sym = [](const at::Tensor& t) {
    for (const c10::SymInt& s : t.sym_sizes())
      if (!s.maybe_as_int()) return true;
    for (const c10::SymInt& s : t.sym_strides())
      if (!s.maybe_as_int()) return true;
    return !t.sym_storage_offset().maybe_as_int().has_value();
  };
  auto opt = [&](const OptTensor& t) { return t.has_value() && sym(*t); };
  return sym(a.q_rope) || opt(a.q_nope) || sym(a.k_rope) || opt(a.k_nope) || opt(a.v) ||
         sym(a.cos_sin_cache) || sym(a.positions) || sym(a.q_rope_out) || opt(a.q_nope_out) ||
         sym(a.k_cache_rope) || opt(a.k_cache_nope) || opt(a.v_cache) || opt(a.slot_mapping) ||
         opt(a.kv_indices) || opt(a.kv_indptr) || opt(a.batch_indices) || opt(a.kv_positions);
#else
  (void)a;
  return false;  // torch 1.x traces no symbolic shapes
#endif
}

}  // namespace

void run_op(const OpArgs& o, Mode mode, void* stream) {
  if (mode == Mode::kMeta && symbolic(o)) return;
  Translator tr(o, mode);
  ropekv::Arguments a = tr.arguments();
  a.stream = stream;
  ropekv::Result r;
  switch (mode) {
    case Mode::kCpu: r = ropekv::run(a, ropekv::Backend::kHost); break;
    case Mode::kCuda: r = ropekv::run(a, ropekv::Backend::kCuda); break;
    // The first compiled backend's rules (they are the same for every backend).
    case Mode::kMeta: r = ropekv::validate(a, ropekv::Backend::kAuto); break;
  }
  TORCH_CHECK(r.status != ropekv::Status::kErrorLaunchFailed, "ropekv: ", r.message);
  TORCH_CHECK_VALUE(r.ok(), "ropekv: ", ropekv::to_string(r.status), ": ", r.message);
}

}  // namespace ropekv_torch
