// Validation: every host-side rule, and a prepared call's re-check of a step.
//
// Every rule returns a distinct Status with a message naming the argument and
// the rule. Rules run in a fixed order; the first failure is reported.
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <new>
#include <limits>
#include <utility>

#include "detail/overlap.hpp"
#include "detail/result.hpp"
#include "detail/validate.hpp"

namespace ropekv {
namespace detail {

namespace {

bool is_input_dtype(DType d) { return dtype_info(d).input; }
bool is_output_dtype(DType d) { return dtype_info(d).output; }
bool is_index_dtype(DType d) { return dtype_info(d).index; }

// "a, b or c": the names of the table's dtypes of one class, for messages.
class DTypeNames {
 public:
  explicit DTypeNames(bool DTypeInfo::*member) {
    std::size_t n = 0, k = 0;
    for (const DTypeInfo& d : kDTypes) n += (d.*member) ? 1 : 0;
    for (const DTypeInfo& d : kDTypes) {
      if (!(d.*member)) continue;
      if (k > 0) append(k + 1 == n ? " or " : ", ");
      append(d.name);
      ++k;
    }
  }
  const char* c_str() const { return text_; }

 private:
  void append(const char* s) {
    while (*s != '\0' && len_ + 1 < sizeof(text_)) text_[len_++] = *s++;
    text_[len_] = '\0';
  }
  char text_[96] = {};
  std::size_t len_ = 0;
};
const char* input_dtype_names() {
  static const DTypeNames names(&DTypeInfo::input);
  return names.c_str();
}
const char* output_dtype_names() {
  static const DTypeNames names(&DTypeInfo::output);
  return names.c_str();
}
const char* index_dtype_names() {
  static const DTypeNames names(&DTypeInfo::index);
  return names.c_str();
}

// A named view under validation.
struct Named {
  const TensorView* view;
  const char* name;
};

class Validator {
 public:
  explicit Validator(const Arguments& a) : a_(a) {}

  // Every rule.
  Result run();
  // A prepared call's step (validate_step): the rules that the fields a step
  // may change enter.
  bool run_step(const StepPlan& plan);

 private:
  // The rule phases, in the order run() applies them. `step`: only the rules
  // on a step's fields (views' data, the token count, the page-table
  // lengths, device scale and counter pointers).
  Result check_enums() const;
  Result check_views() const;
  Result check_dtypes() const;
  Result check_extents(bool step) const;
  Result check_scales() const;

  // Checks that `v` has `rank` dims, a supported dtype, non-negative extents
  // and strides, a contiguous last dim, aligned non-null data.
  Result check_view(const TensorView& v, const char* name, int rank) const;
  Result check_extent(const TensorView& v, const char* name, int dim, std::int64_t want,
                      const char* what) const;
  Result check_scale(const Scale& s, const char* name) const;
  Result check_overlaps() const;

  const Arguments& a_;
};

Result Validator::check_view(const TensorView& v, const char* name, int rank) const {
  if (v.rank != rank)
    return make_result(Status::kErrorInvalidRank, "%s must have rank %d, got %d", name, rank,
                       v.rank);
  for (int k = 0; k < rank; ++k) {
    if (v.extent[k] < 0)
      return make_result(Status::kErrorShapeMismatch, "%s.extent[%d] must be >= 0, got %lld",
                         name, k, static_cast<long long>(v.extent[k]));
    if (v.stride[k] < 0)
      return make_result(Status::kErrorInvalidStride, "%s.stride[%d] must be >= 0, got %lld",
                         name, k, static_cast<long long>(v.stride[k]));
  }
  if (v.extent[rank - 1] > 1 && v.stride[rank - 1] != 1)
    return make_result(Status::kErrorNonContiguous,
                       "%s.stride[%d] must be 1 (contiguous last dim), got %lld", name, rank - 1,
                       static_cast<long long>(v.stride[rank - 1]));
  if (v.numel() > 0) {
    if (v.data == nullptr)
      return make_result(Status::kErrorNullPointer, "%s.data must not be null", name);
    const std::size_t es = size_of(v.dtype);
    if (es == 0)
      return make_result(Status::kErrorUnsupportedDType, "%s.dtype must be set, got %s", name,
                         to_string(v.dtype));
    if (reinterpret_cast<std::uintptr_t>(v.data) % es != 0)
      return make_result(Status::kErrorMisaligned,
                         "%s.data must be aligned to its element size (%zu bytes)", name, es);
    std::int64_t bytes = 0;
    if (!span_bytes(v, &bytes))
      return make_result(Status::kErrorInvalidStride,
                         "%s must span less than 2^63 bytes (extents x strides x element size "
                         "overflow)",
                         name);
    if (reinterpret_cast<std::uintptr_t>(v.data) >
        std::numeric_limits<std::uintptr_t>::max() - std::uintptr_t(bytes))
      return make_result(Status::kErrorInvalidStride,
                         "%s must end within the address space (data + %lld bytes wraps)", name,
                         static_cast<long long>(bytes));
  }
  return Result{};
}

Result Validator::check_extent(const TensorView& v, const char* name, int dim, std::int64_t want,
                               const char* what) const {
  if (v.extent[dim] != want)
    return make_result(Status::kErrorShapeMismatch, "%s.extent[%d] must equal %s (%lld), got %lld",
                       name, dim, what, static_cast<long long>(want),
                       static_cast<long long>(v.extent[dim]));
  return Result{};
}

Result Validator::check_scale(const Scale& s, const char* name) const {
  if (s.convention != ScaleConvention::kDivide && s.convention != ScaleConvention::kMultiply)
    return make_result(Status::kErrorInvalidArgument,
                       "%s.convention must be kDivide or kMultiply, got %d", name,
                       static_cast<int>(s.convention));
  if (s.device != nullptr) {
    if (reinterpret_cast<std::uintptr_t>(s.device) % alignof(float) != 0)
      return make_result(Status::kErrorMisaligned, "%s.device must be 4-byte aligned", name);
    if (reinterpret_cast<std::uintptr_t>(s.device) > ~std::uintptr_t(0) - sizeof(float))
      return make_result(Status::kErrorInvalidArgument,
                         "%s.device must point within the address space", name);
    return Result{};
  }
  // Any positive finite scale: the quantization step is exact IEEE arithmetic
  // for every scale (core/detail/element_math.hpp, apply_scale).
  if (!(std::isfinite(s.value) && s.value > 0.f))
    return make_result(Status::kErrorInvalidScale, "%s must be positive and finite, got %g", name,
                       static_cast<double>(s.value));
  return Result{};
}

// A one-element view of a scalar (scale pointer, skipped-token counter).
TensorView scalar_view(const void* p, DType dtype) {
  TensorView v;
  v.data = const_cast<void*>(p);
  v.dtype = dtype;
  v.rank = p != nullptr ? 1 : 0;
  v.extent[0] = 1;
  v.stride[0] = 1;
  return v;
}

// The views the overlap rule compares: every written view (outputs; the
// checked-mode counter too) and every read one (inputs; only the active
// addressing form's index arrays). MLA's value scale is neither read nor
// validated. `Named` entries point into the object: not copyable.
struct OverlapViews {
  static constexpr std::size_t kOutputs = 6, kInputs = 15;
  static constexpr std::size_t kTokenOutputs = 2;  // q_rope_out, q_nope_out (first)
  static constexpr std::size_t kAll = kOutputs + kInputs;
  TensorView skipped, qs, ks, vs, none;
  Named view[kAll];  // outputs, then inputs

  explicit OverlapViews(const Arguments& a)
      : skipped(scalar_view(a.checked.skipped_tokens, DType::kInt64)),
        qs(scalar_view(a.q_scale.device, DType::kFloat32)),
        ks(scalar_view(a.k_scale.device, DType::kFloat32)),
        vs(a.kind == AttentionKind::kMla ? TensorView{}
                                         : scalar_view(a.v_scale.device, DType::kFloat32)) {
    const CacheIndex& ci = a.cache_index;
    const bool slots = ci.form == Addressing::kSlotMapping;
    const Named all[kAll] = {{&a.q_rope_out, "q_rope_out"},
                             {&a.q_nope_out, "q_nope_out"},
                             {&a.k_cache_rope, "k_cache_rope"},
                             {&a.k_cache_nope, "k_cache_nope"},
                             {&a.v_cache, "v_cache"},
                             {&skipped, "checked.skipped_tokens"},
                             {&a.q_rope, "q_rope"},
                             {&a.q_nope, "q_nope"},
                             {&a.k_rope, "k_rope"},
                             {&a.k_nope, "k_nope"},
                             {&a.v, "v"},
                             {&a.cos_sin_cache, "cos_sin_cache"},
                             {&a.positions, "positions"},
                             {&qs, "q_scale.device"},
                             {&ks, "k_scale.device"},
                             {&vs, "v_scale.device"},
                             {slots ? &ci.slot_mapping : &none, "cache_index.slot_mapping"},
                             {slots ? &none : &ci.kv_indices, "cache_index.kv_indices"},
                             {slots ? &none : &ci.kv_indptr, "cache_index.kv_indptr"},
                             {slots ? &none : &ci.batch_indices, "cache_index.batch_indices"},
                             {slots ? &none : &ci.kv_positions, "cache_index.kv_positions"}};
    for (std::size_t i = 0; i < kAll; ++i) view[i] = all[i];
  }
  OverlapViews(const OverlapViews&) = delete;
  OverlapViews& operator=(const OverlapViews&) = delete;
};

// No output overlaps itself (the first `self_checked` outputs are checked),
// another output or an input. spans[i]: span_of(*v.view[i]).
Result overlap_rule(const OverlapViews& v, const Span* spans, std::size_t self_checked) {
  constexpr std::size_t kOut = OverlapViews::kOutputs;
  for (std::size_t i = 0; i < self_checked; ++i) {
    if (!self_disjoint(*v.view[i].view))
      return make_result(Status::kErrorOverlap,
                         "%s must not overlap itself (distinct indices must address distinct "
                         "elements)",
                         v.view[i].name);
  }
  for (std::size_t i = 0; i < kOut; ++i) {
    for (std::size_t j = i + 1; j < OverlapViews::kAll; ++j) {
      if (provably_disjoint(*v.view[i].view, spans[i], *v.view[j].view, spans[j])) continue;
      if (j < kOut)
        return make_result(Status::kErrorOverlap, "%s and %s must not overlap", v.view[i].name,
                           v.view[j].name);
      return make_result(Status::kErrorOverlap, "output %s must not overlap input %s",
                         v.view[i].name, v.view[j].name);
    }
  }
  return Result{};
}

Result Validator::check_overlaps() const {
  const OverlapViews v(a_);
  // Each view's byte span once: most pairs are told apart by their spans.
  Span spans[OverlapViews::kAll];
  for (std::size_t i = 0; i < OverlapViews::kAll; ++i) spans[i] = span_of(*v.view[i].view);
  return overlap_rule(v, spans, OverlapViews::kOutputs);
}

Result Validator::run() {
  ROPEKV_TRY(check_enums());
  ROPEKV_TRY(check_views());
  ROPEKV_TRY(check_dtypes());
  ROPEKV_TRY(check_extents(false));
  ROPEKV_TRY(check_scales());
  return check_overlaps();
}

bool Validator::run_step(const StepPlan& plan) {
  // Every view's data rules (null, alignment, span, end address) and span,
  // from the plan's shape and this step's data and extent 0.
  const OverlapViews v(a_);
  Span spans[OverlapViews::kAll];
  for (std::size_t i = 0; i < OverlapViews::kAll; ++i) {
    const TensorView& t = *v.view[i].view;
    const StepPlan::View& pv = plan.view[i];
    if (t.rank == 0) continue;
    const std::int64_t n = t.extent[0];
    if (n < 0 || (pv.strided_vector && n > 1)) return false;
    if (n == 0 || !pv.others_nonzero) continue;
    const std::uintptr_t lo = reinterpret_cast<std::uintptr_t>(t.data);
    std::int64_t elems = 0, bytes = 0;
    if (t.data == nullptr || lo % std::uintptr_t(pv.es) != 0 ||
        !mul_fits(n - 1, t.stride[0], &elems) || !add_fits(elems, pv.rest_elems, &elems) ||
        !mul_fits(elems, pv.es, &bytes) ||
        lo > std::numeric_limits<std::uintptr_t>::max() - std::uintptr_t(bytes))
      return false;
    spans[i].lo = lo;
    spans[i].hi = lo + std::uintptr_t(bytes);
  }
  if (!check_extents(true).ok() || !check_scales().ok()) return false;
  // Outputs of a fixed shape keep the plan's verdict on overlapping
  // themselves; the query outputs' holds up to the plan's token count.
  for (std::size_t i = 0; i < OverlapViews::kTokenOutputs; ++i)
    if (v.view[i].view->extent[0] > plan.self_checked_tokens && !self_disjoint(*v.view[i].view))
      return false;
  return overlap_rule(v, spans, 0).ok();
}

Result Validator::check_enums() const {
  const Arguments& a = a_;
  const CacheIndex& ci = a.cache_index;
  if (a.kind != AttentionKind::kGqa && a.kind != AttentionKind::kMla)
    return make_result(Status::kErrorInvalidArgument, "kind must be kGqa or kMla, got %d",
                       static_cast<int>(a.kind));
  if (a.rope_style != RopeStyle::kNeox && a.rope_style != RopeStyle::kInterleaved)
    return make_result(Status::kErrorInvalidArgument,
                       "rope_style must be kNeox or kInterleaved, got %d",
                       static_cast<int>(a.rope_style));
  if (ci.form != Addressing::kSlotMapping && ci.form != Addressing::kPageTable)
    return make_result(Status::kErrorInvalidArgument,
                       "cache_index.form must be kSlotMapping or kPageTable, got %d",
                       static_cast<int>(ci.form));
  return Result{};
}

// Ranks, strides, contiguity, null data, alignment.
Result Validator::check_views() const {
  const Arguments& a = a_;
  const CacheIndex& ci = a.cache_index;
  const bool mla = a.kind == AttentionKind::kMla;
  ROPEKV_TRY(check_view(a.q_rope, "q_rope", 3));
  ROPEKV_TRY(check_view(a.k_rope, "k_rope", 3));
  ROPEKV_TRY(check_view(a.q_rope_out, "q_rope_out", 3));
  if (a.k_cache_rope.rank == 4 && a.k_cache_rope.extent[1] <= 0)
    return make_result(Status::kErrorInvalidPageSize,
                       "page_size (k_cache_rope.extent[1]) must be > 0, got %lld",
                       static_cast<long long>(a.k_cache_rope.extent[1]));
  ROPEKV_TRY(check_view(a.k_cache_rope, "k_cache_rope", 4));
  ROPEKV_TRY(check_view(a.cos_sin_cache, "cos_sin_cache", 2));
  ROPEKV_TRY(check_view(a.positions, "positions", 1));
  if (has_nope(a)) {
    ROPEKV_TRY(check_view(a.q_nope, "q_nope", 3));
    ROPEKV_TRY(check_view(a.k_nope, "k_nope", 3));
    ROPEKV_TRY(check_view(a.q_nope_out, "q_nope_out", 3));
    ROPEKV_TRY(check_view(a.k_cache_nope, "k_cache_nope", 4));
  }
  if (mla) {
    if (a.v.present() || a.v_cache.present())
      return make_result(Status::kErrorInvalidArgument,
                         "v and v_cache must be absent (rank 0) for kind kMla");
  } else {
    ROPEKV_TRY(check_view(a.v, "v", 3));
    ROPEKV_TRY(check_view(a.v_cache, "v_cache", 4));
  }
  if (ci.form == Addressing::kSlotMapping) {
    ROPEKV_TRY(check_view(ci.slot_mapping, "cache_index.slot_mapping", 1));
  } else {
    ROPEKV_TRY(check_view(ci.kv_indices, "cache_index.kv_indices", 1));
    ROPEKV_TRY(check_view(ci.kv_indptr, "cache_index.kv_indptr", 1));
    ROPEKV_TRY(check_view(ci.batch_indices, "cache_index.batch_indices", 1));
    ROPEKV_TRY(check_view(ci.kv_positions, "cache_index.kv_positions", 1));
  }
  return Result{};
}

Result Validator::check_dtypes() const {
  const Arguments& a = a_;
  const CacheIndex& ci = a.cache_index;
  const DType in = a.q_rope.dtype;
  if (!is_input_dtype(in))
    return make_result(Status::kErrorUnsupportedDType, "q_rope.dtype must be %s, got %s",
                       input_dtype_names(), to_string(in));
  const Named same_in[] = {{&a.k_rope, "k_rope"}, {&a.q_nope, "q_nope"}, {&a.k_nope, "k_nope"},
                           {&a.v, "v"}};
  for (const Named& n : same_in) {
    if (n.view->present() && n.view->dtype != in)
      return make_result(Status::kErrorUnsupportedDType,
                         "%s.dtype must equal q_rope.dtype (%s), got %s", n.name, to_string(in),
                         to_string(n.view->dtype));
  }
  const DType qo = a.q_rope_out.dtype;
  if (!is_output_dtype(qo))
    return make_result(Status::kErrorUnsupportedDType, "q_rope_out.dtype must be %s, got %s",
                       output_dtype_names(), to_string(qo));
  if (a.q_nope_out.present() && a.q_nope_out.dtype != qo)
    return make_result(Status::kErrorUnsupportedDType,
                       "q_nope_out.dtype must equal q_rope_out.dtype (%s), got %s", to_string(qo),
                       to_string(a.q_nope_out.dtype));
  const DType cd = a.k_cache_rope.dtype;
  if (!is_output_dtype(cd))
    return make_result(Status::kErrorUnsupportedDType, "k_cache_rope.dtype must be %s, got %s",
                       output_dtype_names(), to_string(cd));
  const Named same_cache[] = {{&a.k_cache_nope, "k_cache_nope"}, {&a.v_cache, "v_cache"}};
  for (const Named& n : same_cache) {
    if (n.view->present() && n.view->dtype != cd)
      return make_result(Status::kErrorUnsupportedDType,
                         "%s.dtype must equal k_cache_rope.dtype (%s), got %s", n.name,
                         to_string(cd), to_string(n.view->dtype));
  }
  const DType cs = a.cos_sin_cache.dtype;
  if (cs != DType::kFloat32 && cs != in)
    return make_result(Status::kErrorUnsupportedDType,
                       "cos_sin_cache.dtype must be fp32 or the input dtype (%s), got %s",
                       to_string(in), to_string(cs));
  const bool slots = ci.form == Addressing::kSlotMapping;
  const TensorView none;
  const Named index_views[] = {
      {&a.positions, "positions"},
      {slots ? &ci.slot_mapping : &none, "cache_index.slot_mapping"},
      {slots ? &none : &ci.kv_indices, "cache_index.kv_indices"},
      {slots ? &none : &ci.kv_indptr, "cache_index.kv_indptr"},
      {slots ? &none : &ci.batch_indices, "cache_index.batch_indices"},
      {slots ? &none : &ci.kv_positions, "cache_index.kv_positions"}};
  for (const Named& n : index_views) {
    if (n.view->present() && !is_index_dtype(n.view->dtype))
      return make_result(Status::kErrorUnsupportedDType, "%s.dtype must be %s, got %s", n.name,
                         index_dtype_names(), to_string(n.view->dtype));
  }
  return Result{};
}

// Extents. The rules on the token count (extent 0 of the per-token views
// equals nnz) and the page table's lengths are the ones a step re-checks.
Result Validator::check_extents(bool step) const {
  const Arguments& a = a_;
  const CacheIndex& ci = a.cache_index;
  const bool mla = a.kind == AttentionKind::kMla;
  const std::int64_t nnz = a.q_rope.extent[0];
  const std::int64_t hq = a.q_rope.extent[1];
  const std::int64_t rdim = a.q_rope.extent[2];
  const std::int64_t hk = a.k_rope.extent[1];
  if (!step) {
    if (rdim <= 0 || rdim % 2 != 0)
      return make_result(Status::kErrorInvalidRotaryDim,
                         "rotary dim R (q_rope.extent[2]) must be even and > 0, got %lld",
                         static_cast<long long>(rdim));
    if (a.cos_sin_cache.extent[1] != rdim)
      return make_result(Status::kErrorCosSinMismatch,
                         "cos_sin_cache.extent[1] must equal the rotary dim R (%lld), got %lld",
                         static_cast<long long>(rdim),
                         static_cast<long long>(a.cos_sin_cache.extent[1]));
    if (a.cos_sin_cache.extent[0] <= 0)
      return make_result(Status::kErrorCosSinMismatch,
                         "cos_sin_cache.extent[0] (max_pos) must be > 0, got %lld",
                         static_cast<long long>(a.cos_sin_cache.extent[0]));
    if (hq <= 0)
      return make_result(Status::kErrorShapeMismatch,
                         "q_rope.extent[1] (Hq) must be > 0, got %lld", static_cast<long long>(hq));
    if (hk <= 0)
      return make_result(Status::kErrorShapeMismatch,
                         "k_rope.extent[1] (Hk) must be > 0, got %lld", static_cast<long long>(hk));
    if (mla && hk != 1)
      return make_result(Status::kErrorShapeMismatch,
                         "k_rope.extent[1] (Hk) must be 1 for kind kMla, got %lld",
                         static_cast<long long>(hk));
  }
  // A rule on an extent other than the token count: skipped by a step.
#define ROPEKV_SHAPE(expr) \
  if (!step) ROPEKV_TRY(expr)
  ROPEKV_TRY(check_extent(a.k_rope, "k_rope", 0, nnz, "nnz"));
  ROPEKV_SHAPE(check_extent(a.k_rope, "k_rope", 2, rdim, "R"));
  ROPEKV_TRY(check_extent(a.q_rope_out, "q_rope_out", 0, nnz, "nnz"));
  ROPEKV_SHAPE(check_extent(a.q_rope_out, "q_rope_out", 1, hq, "Hq"));
  ROPEKV_SHAPE(check_extent(a.q_rope_out, "q_rope_out", 2, rdim, "R"));
  ROPEKV_TRY(check_extent(a.positions, "positions", 0, nnz, "nnz"));
  const std::int64_t num_pages = a.k_cache_rope.extent[0];
  const std::int64_t page_size = a.k_cache_rope.extent[1];
  if (!step) {
    if (page_size <= 0)
      return make_result(Status::kErrorInvalidPageSize,
                         "page_size (k_cache_rope.extent[1]) must be > 0, got %lld",
                         static_cast<long long>(page_size));
    if (num_pages <= 0)
      return make_result(Status::kErrorShapeMismatch,
                         "num_pages (k_cache_rope.extent[0]) must be > 0, got %lld",
                         static_cast<long long>(num_pages));
  }
  ROPEKV_SHAPE(check_extent(a.k_cache_rope, "k_cache_rope", 2, hk, "Hk"));
  ROPEKV_SHAPE(check_extent(a.k_cache_rope, "k_cache_rope", 3, rdim, "R"));
  if (has_nope(a)) {
    const std::int64_t ndim = a.q_nope.extent[2];
    ROPEKV_TRY(check_extent(a.q_nope, "q_nope", 0, nnz, "nnz"));
    ROPEKV_SHAPE(check_extent(a.q_nope, "q_nope", 1, hq, "Hq"));
    ROPEKV_TRY(check_extent(a.k_nope, "k_nope", 0, nnz, "nnz"));
    ROPEKV_SHAPE(check_extent(a.k_nope, "k_nope", 1, hk, "Hk"));
    ROPEKV_SHAPE(check_extent(a.k_nope, "k_nope", 2, ndim, "N = q_nope.extent[2]"));
    ROPEKV_TRY(check_extent(a.q_nope_out, "q_nope_out", 0, nnz, "nnz"));
    ROPEKV_SHAPE(check_extent(a.q_nope_out, "q_nope_out", 1, hq, "Hq"));
    ROPEKV_SHAPE(check_extent(a.q_nope_out, "q_nope_out", 2, ndim, "N = q_nope.extent[2]"));
    ROPEKV_SHAPE(check_extent(a.k_cache_nope, "k_cache_nope", 0, num_pages, "num_pages"));
    ROPEKV_SHAPE(check_extent(a.k_cache_nope, "k_cache_nope", 1, page_size, "page_size"));
    ROPEKV_SHAPE(check_extent(a.k_cache_nope, "k_cache_nope", 2, hk, "Hk"));
    ROPEKV_SHAPE(check_extent(a.k_cache_nope, "k_cache_nope", 3, ndim, "N = q_nope.extent[2]"));
  }
  if (!mla) {
    const std::int64_t vdim = a.v.extent[2];
    ROPEKV_TRY(check_extent(a.v, "v", 0, nnz, "nnz"));
    ROPEKV_SHAPE(check_extent(a.v, "v", 1, hk, "Hk"));
    if (!step && vdim <= 0)
      return make_result(Status::kErrorShapeMismatch, "v.extent[2] (Dv) must be > 0, got %lld",
                         static_cast<long long>(vdim));
    ROPEKV_SHAPE(check_extent(a.v_cache, "v_cache", 0, num_pages, "num_pages"));
    ROPEKV_SHAPE(check_extent(a.v_cache, "v_cache", 1, page_size, "page_size"));
    ROPEKV_SHAPE(check_extent(a.v_cache, "v_cache", 2, hk, "Hk"));
    ROPEKV_SHAPE(check_extent(a.v_cache, "v_cache", 3, vdim, "Dv = v.extent[2]"));
  }
#undef ROPEKV_SHAPE
  if (ci.form == Addressing::kSlotMapping) {
    ROPEKV_TRY(check_extent(ci.slot_mapping, "cache_index.slot_mapping", 0, nnz, "nnz"));
  } else {
    ROPEKV_TRY(check_extent(ci.batch_indices, "cache_index.batch_indices", 0, nnz, "nnz"));
    ROPEKV_TRY(check_extent(ci.kv_positions, "cache_index.kv_positions", 0, nnz, "nnz"));
    if (ci.kv_indptr.extent[0] < 1)
      return make_result(Status::kErrorShapeMismatch,
                         "cache_index.kv_indptr.extent[0] must be batch + 1 >= 1, got %lld",
                         static_cast<long long>(ci.kv_indptr.extent[0]));
  }
  return Result{};
}

// Scales and the checked-mode counter.
Result Validator::check_scales() const {
  const Arguments& a = a_;
  ROPEKV_TRY(check_scale(a.q_scale, "q_scale"));
  ROPEKV_TRY(check_scale(a.k_scale, "k_scale"));
  if (a.kind != AttentionKind::kMla) ROPEKV_TRY(check_scale(a.v_scale, "v_scale"));
  if (a.checked.skipped_tokens != nullptr &&
      reinterpret_cast<std::uintptr_t>(a.checked.skipped_tokens) % 8 != 0)
    return make_result(Status::kErrorMisaligned, "checked.skipped_tokens must be 8-byte aligned");
  if (reinterpret_cast<std::uintptr_t>(a.checked.skipped_tokens) > ~std::uintptr_t(0) - 8)
    return make_result(Status::kErrorInvalidArgument,
                       "checked.skipped_tokens must point within the address space");
  return Result{};
}

}  // namespace

Result validate_arguments(const Arguments& args) noexcept {
  Validator v(args);
  return v.run();
}

namespace {

// Equal dtype, rank, strides and extents; with `token_free`, extent 0 (a
// token count or a page-table length) may differ.
static_assert(sizeof(TensorView) == 80 && offsetof(TensorView, extent) == 16 &&
                  offsetof(TensorView, stride) == 48,
              "TensorView's layout changed: update same_view");
bool same_view(const TensorView& a, const TensorView& b, bool token_free) {
  // extent[1..3] and stride[0..3]: 56 contiguous bytes.
  return a.dtype == b.dtype && a.rank == b.rank && (token_free || a.extent[0] == b.extent[0]) &&
         std::memcmp(&a.extent[1], &b.extent[1], 7 * sizeof(std::int64_t)) == 0;
}
// Equal convention and, for a host scale, value; a device scale may move.
bool same_scale(const Scale& a, const Scale& b) {
  return a.convention == b.convention && (a.device == nullptr) == (b.device == nullptr) &&
         (a.device != nullptr || a.value == b.value);
}

// `a` and `b` differ at most in the fields a step may change: the views'
// data, extent 0 of the per-token views and of the page table's arrays,
// device scale and checked-mode counter pointers (not whether they are
// null), the stream.
bool same_except_step(const Arguments& a, const Arguments& b) {
  // Every field of Arguments is named below; a new field must be added here.
  static_assert(sizeof(void*) != 8 || sizeof(Arguments) == 1480,
                "Arguments changed: update same_except_step");
  const CacheIndex &ca = a.cache_index, &cb = b.cache_index;
  return a.kind == b.kind && a.rope_style == b.rope_style && ca.form == cb.form &&
         same_view(a.q_rope, b.q_rope, true) && same_view(a.q_nope, b.q_nope, true) &&
         same_view(a.k_rope, b.k_rope, true) && same_view(a.k_nope, b.k_nope, true) &&
         same_view(a.v, b.v, true) && same_view(a.q_rope_out, b.q_rope_out, true) &&
         same_view(a.q_nope_out, b.q_nope_out, true) &&
         same_view(a.k_cache_rope, b.k_cache_rope, false) &&
         same_view(a.k_cache_nope, b.k_cache_nope, false) &&
         same_view(a.v_cache, b.v_cache, false) &&
         same_view(a.cos_sin_cache, b.cos_sin_cache, false) &&
         same_view(a.positions, b.positions, true) &&
         same_view(ca.slot_mapping, cb.slot_mapping, true) &&
         same_view(ca.kv_indices, cb.kv_indices, true) &&
         same_view(ca.kv_indptr, cb.kv_indptr, true) &&
         same_view(ca.batch_indices, cb.batch_indices, true) &&
         same_view(ca.kv_positions, cb.kv_positions, true) && same_scale(a.q_scale, b.q_scale) &&
         same_scale(a.k_scale, b.k_scale) && same_scale(a.v_scale, b.v_scale) &&
         a.checked.enabled == b.checked.enabled &&
         (a.checked.skipped_tokens == nullptr) == (b.checked.skipped_tokens == nullptr) &&
         a.programmatic_dependent_launch == b.programmatic_dependent_launch &&
         a.indices_ready_before_previous_kernel == b.indices_ready_before_previous_kernel;
}

}  // namespace

static_assert(sizeof(StepPlan::view) / sizeof(StepPlan::View) == OverlapViews::kAll,
              "StepPlan::view: one entry per view of the overlap rule");

StepPlan* new_step_plan() noexcept { return new (std::nothrow) StepPlan; }

void fill_step_plan(StepPlan* plan, const Arguments& validated) noexcept {
  plan->prepared = validated;
  plan->self_checked_tokens = validated.q_rope.extent[0];
  const OverlapViews v(plan->prepared);
  for (std::size_t i = 0; i < OverlapViews::kAll; ++i) {
    const TensorView& t = *v.view[i].view;
    StepPlan::View& pv = plan->view[i];
    pv.es = std::int64_t(size_of(t.dtype));
    pv.strided_vector = t.rank == 1 && t.stride[0] != 1;
    pv.others_nonzero = t.rank > 0;
    pv.rest_elems = 1;  // fits: the validated view's span does
    for (int k = 1; k < t.rank; ++k) {
      pv.others_nonzero = pv.others_nonzero && t.extent[k] > 0;
      if (t.extent[k] > 0) pv.rest_elems += (t.extent[k] - 1) * t.stride[k];
    }
  }
}

void delete_step_plan(StepPlan* plan) noexcept { delete plan; }

bool validate_step(const StepPlan& plan, const Arguments& args) noexcept {
  if (!same_except_step(args, plan.prepared)) return false;
  Validator v(args);
  return v.run_step(plan);
}

}  // namespace detail
}  // namespace ropekv
