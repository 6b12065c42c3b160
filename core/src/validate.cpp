// Validation: every host-side rule, walking the argument table
// (argument_table.hpp), and a prepared call's re-check of a step.
//
// Every rule returns a distinct Status with a message naming the argument and
// the rule. Rules run in a fixed order; the first failure is reported.
#include "detail/validate.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>

#include "detail/argument_table.hpp"
#include "detail/overlap.hpp"
#include "detail/result.hpp"

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

// ---- rules on one view, scale or size
// Checks that `v` has `rank` dims, a supported dtype, non-negative extents
// and strides, a contiguous last dim, aligned non-null data.
Result check_view(const TensorView& v, const char* name, int rank) {
  if (v.rank != rank)
    return make_result(Status::kErrorInvalidRank, "%s must have rank %d, got %d", name, rank,
                       v.rank);
  for (int k = 0; k < rank; ++k) {
    if (v.extent[k] < 0)
      return make_result(Status::kErrorShapeMismatch, "%s.extent[%d] must be >= 0, got %lld", name,
                         k, static_cast<long long>(v.extent[k]));
    if (v.stride[k] < 0)
      return make_result(Status::kErrorInvalidStride, "%s.stride[%d] must be >= 0, got %lld", name,
                         k, static_cast<long long>(v.stride[k]));
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

Result check_scale(const Scale& s, const char* name) {
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

// The own rule of a size (n: its value) and its message, for dim `d` of view
// `s` (which defines it).
constexpr bool size_ok(Size z, std::int64_t n) {
  return n > 0 && !(size_spec(z).even && n % 2 != 0);
}
Result size_error(const ViewSpec& s, int d, std::int64_t n) {
  const SizeSpec& z = size_spec(s.dim[d].size);
  return make_result(z.status, z.rule, s.name, d, static_cast<long long>(n));
}
// Dim `d` of view `s` (value n) is not its size (want).
Result equal_error(const ViewSpec& s, int d, std::int64_t n, std::int64_t want) {
  const Size size = s.dim[d].size;
  const SizeSpec& z = size_spec(size);
  if (z.named_source) {
    const Source& src = kSources.of[std::size_t(size)];
    return make_result(Status::kErrorShapeMismatch,
                       "%s.extent[%d] must equal %s = %s.extent[%d] (%lld), got %lld", s.name, d,
                       z.what, kViews[src.view].name, int(src.dim), static_cast<long long>(want),
                       static_cast<long long>(n));
  }
  return make_result(Status::kErrorShapeMismatch, "%s.extent[%d] must equal %s (%lld), got %lld",
                     s.name, d, z.what, static_cast<long long>(want), static_cast<long long>(n));
}

// ---- the phases
class Validator {
 public:
  explicit Validator(const Arguments& a) : a_(a), on_(a) {}

  // Every rule.
  Result run() const;
  // A prepared call's step: the rules that the fields a step may change enter.
  bool run_step(const StepPlan& plan) const;

 private:
  // The rule phases, in the order run() applies them. kStep: only the rules
  // on sizes a step may change (the token count, the page-table lengths).
  Result check_enums() const;
  Result check_views() const;
  Result check_dtypes() const;
  Result check_sizes(const std::int64_t* size) const;
  template <bool kStep>
  Result check_extents() const;
  Result check_scales() const;
  Result check_overlaps() const;

  const TensorView& view(ViewId id) const { return view_in(a_, kViews[id]); }

  const Arguments& a_;
  const Active on_;
};

Result Validator::run() const {
  ROPEKV_TRY(check_enums());
  ROPEKV_TRY(check_views());
  ROPEKV_TRY(check_dtypes());
  ROPEKV_TRY(check_extents<false>());
  ROPEKV_TRY(check_scales());
  return check_overlaps();
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

// Ranks, strides, contiguity, null data, alignment, per view in kViewsOrder.
Result Validator::check_views() const {
  Result r;
  walk<kViewsOrder.size>([&](auto i) {
    constexpr const ViewSpec& s = kViews[kViewsOrder.view[decltype(i)::value]];
    constexpr int d = kViewsOrder.dim[decltype(i)::value];
    const TensorView& v = view_in(a_, s);
    if (!on_(s.when)) {
      // MLA has no value: its views must be absent (explicit: one rule, one
      // message for both).
      if (s.when == When::kGqa && v.present()) {
        r = make_result(Status::kErrorInvalidArgument,
                        "v and v_cache must be absent (rank 0) for kind kMla");
        return false;
      }
      return true;
    }
    // A size checked before its view's own rules (page_size).
    if constexpr (d >= 0) {
      if (v.rank == s.rank && !size_ok(s.dim[d].size, v.extent[d])) {
        r = size_error(s, d, v.extent[d]);
        return false;
      }
    }
    const Result x = check_view(v, s.name, s.rank);
    if (!x.ok()) r = x;
    return x.ok();
  });
  return r;
}

// Per view in kDTypesOrder: a dtype class, or another view's dtype.
Result Validator::check_dtypes() const {
  Result r;
  walk<kDTypesOrder.size>([&](auto i) {
    constexpr const ViewSpec& s = kViews[kDTypesOrder.view[decltype(i)::value]];
    if (!on_(s.when)) return true;
    const DType d = view_in(a_, s).dtype;
    const char* names = nullptr;  // of the class it fails
    if constexpr (s.dtype == DTypeRule::kInput) {
      if (!is_input_dtype(d)) names = input_dtype_names();
    } else if constexpr (s.dtype == DTypeRule::kOutput) {
      if (!is_output_dtype(d)) names = output_dtype_names();
    } else if constexpr (s.dtype == DTypeRule::kIndex) {
      if (!is_index_dtype(d)) names = index_dtype_names();
    } else if constexpr (s.dtype == DTypeRule::kSame) {
      const DType want = view(s.same).dtype;
      if (d != want) {
        r = make_result(Status::kErrorUnsupportedDType, "%s.dtype must equal %s.dtype (%s), got %s",
                        s.name, kViews[s.same].name, to_string(want), to_string(d));
        return false;
      }
    } else if constexpr (s.dtype == DTypeRule::kFp32OrSame) {
      const DType want = view(s.same).dtype;
      if (d != DType::kFloat32 && d != want) {
        r = make_result(Status::kErrorUnsupportedDType,
                        "%s.dtype must be fp32 or the input dtype (%s), got %s", s.name,
                        to_string(want), to_string(d));
        return false;
      }
    }
    if (names == nullptr) return true;
    r = make_result(Status::kErrorUnsupportedDType, "%s.dtype must be %s, got %s", s.name, names,
                    to_string(d));
    return false;
  });
  return r;
}

// The sizes the other extents are compared to come first: R, the cos/sin
// table's width (its own status), max_pos, Hq, Hk (1 for MLA). Explicit:
// these interleave three views in an order of their own, not the table's.
Result Validator::check_sizes(const std::int64_t* size) const {
  auto own = [&](Size z) {
    const Source& src = kSources.of[std::size_t(z)];
    const std::int64_t n = size[std::size_t(z)];
    return size_ok(z, n) ? Result{} : size_error(kViews[src.view], src.dim, n);
  };
  static_assert(kViews[kCosSin].dim[1].check == Check::kEqualsFirst &&
                    kViews[kCosSin].dim[1].size == Size::kR,
                "cos_sin_cache's width is the rule checked with the sizes");
  const std::int64_t r = size[std::size_t(Size::kR)];
  ROPEKV_TRY(own(Size::kR));
  if (view(kCosSin).extent[1] != r)
    return make_result(Status::kErrorCosSinMismatch,
                       "%s.extent[1] must equal the rotary dim R (%lld), got %lld",
                       kViews[kCosSin].name, static_cast<long long>(r),
                       static_cast<long long>(view(kCosSin).extent[1]));
  ROPEKV_TRY(own(Size::kMaxPos));
  ROPEKV_TRY(own(Size::kHq));
  ROPEKV_TRY(own(Size::kHk));
  const Source& hk = kSources.of[std::size_t(Size::kHk)];
  if (!on_(When::kGqa) && size[std::size_t(Size::kHk)] != 1)
    return make_result(Status::kErrorShapeMismatch,
                       "%s.extent[%d] (Hk) must be 1 for kind kMla, got %lld", kViews[hk.view].name,
                       int(hk.dim), static_cast<long long>(size[std::size_t(Size::kHk)]));
  return Result{};
}

// Extents: the sizes, then the walk of kExtentRules (a step: kStepRules).
template <bool kStep>
Result Validator::check_extents() const {
  std::int64_t size[std::size_t(Size::kCount)] = {};
  walk<std::size_t(Size::kCount) - 1>([&](auto i) {
    constexpr Source src = kSources.of[decltype(i)::value + 1];
    size[decltype(i)::value + 1] = view_in(a_, kViews[src.view]).extent[src.dim];
    return true;
  });
  if constexpr (!kStep) ROPEKV_TRY(check_sizes(size));
  constexpr const RuleList& rules = kStep ? kStepRules : kExtentRules;
  Result r;
  walk<rules.size>([&](auto i) {
    constexpr RuleList::Rule rule = rules.rule[decltype(i)::value];
    constexpr const ViewSpec& s = kViews[rule.view];
    constexpr int d = rule.dim;
    constexpr Size z = s.dim[d].size;
    if (!on_(s.when)) return true;
    const std::int64_t n = view_in(a_, s).extent[d];
    if constexpr (s.dim[d].check == Check::kDefines) {
      if (size_ok(z, n)) return true;
      r = size_error(s, d, n);
    } else {
      if (n == size[std::size_t(z)]) return true;
      r = equal_error(s, d, n, size[std::size_t(z)]);
    }
    return false;
  });
  return r;
}

// Scales and the checked-mode counter.
Result Validator::check_scales() const {
  const Arguments& a = a_;
  ROPEKV_TRY(check_scale(a.q_scale, "q_scale"));
  ROPEKV_TRY(check_scale(a.k_scale, "k_scale"));
  if (on_(kViews[kVScale].when)) ROPEKV_TRY(check_scale(a.v_scale, "v_scale"));
  if (a.checked.skipped_tokens != nullptr &&
      reinterpret_cast<std::uintptr_t>(a.checked.skipped_tokens) % 8 != 0)
    return make_result(Status::kErrorMisaligned, "checked.skipped_tokens must be 8-byte aligned");
  if (reinterpret_cast<std::uintptr_t>(a.checked.skipped_tokens) > ~std::uintptr_t(0) - 8)
    return make_result(Status::kErrorInvalidArgument,
                       "checked.skipped_tokens must point within the address space");
  return Result{};
}

Result Validator::check_overlaps() const {
  const OverlapViews v(a_, on_);
  // Each view's byte span once: most pairs are told apart by their spans.
  Span spans[OverlapViews::kAll];
  for (std::size_t i = 0; i < OverlapViews::kAll; ++i) spans[i] = span_of(*v.view[i]);
  return overlap_rule(v, spans, OverlapViews::kOutputs);
}

static_assert(
    [] {
      for (const DTypeInfo& d : kDTypes)
        if ((d.bytes & (d.bytes - 1)) != 0) return false;
      return true;
    }(),
    "run_step tests alignment with a mask: element sizes must be powers of two");
// The byte length of a view's span with extent 0 = n > 0 (its other extents
// > 0, their part pv.rest_elems): false where it does not fit in int64.
bool span_bytes(const StepPlan::View& pv, std::int64_t n, std::int64_t stride0, std::int64_t* elems,
                std::int64_t* bytes) {
  return mul_fits(n - 1, stride0, elems) && add_fits(*elems, pv.rest_elems, elems) &&
         mul_fits(*elems, pv.es, bytes);
}
bool Validator::run_step(const StepPlan& plan) const {
  // Every view's data rules (null, alignment, span, end address) and span,
  // from the plan's shape and this step's data and extent 0.
  const OverlapViews v(a_, on_);
  Span spans[OverlapViews::kAll];
  for (std::size_t k = 0; k < plan.num_present; ++k) {
    const std::size_t i = plan.present[k];
    const TensorView& t = *v.view[i];
    const StepPlan::View& pv = plan.view[i];
    const std::int64_t n = t.extent[0];
    if (n < 0 || (pv.strided_vector && n > 1)) return false;
    if (n == 0 || !pv.others_nonzero) continue;
    const std::uintptr_t lo = reinterpret_cast<std::uintptr_t>(t.data);
    std::int64_t elems = 0, bytes = pv.prepared_bytes;
    if (n != pv.prepared_n || bytes < 0) {
      if (!pv.rest_fits || !span_bytes(pv, n, t.stride[0], &elems, &bytes)) return false;
    }
    if (t.data == nullptr || (lo & std::uintptr_t(pv.es - 1)) != 0 ||
        lo > std::numeric_limits<std::uintptr_t>::max() - std::uintptr_t(bytes))
      return false;
    spans[i].lo = lo;
    spans[i].hi = lo + std::uintptr_t(bytes);
  }
  if (!check_extents<true>().ok() || !check_scales().ok()) return false;
  // Outputs of a fixed shape keep the plan's verdict on overlapping
  // themselves; the per-token ones' holds up to the plan's token count.
  const bool self_ok = walk<OverlapViews::kOutputs>([&](auto i) {
    constexpr std::size_t k = decltype(i)::value;
    if constexpr (per_token(kViews[kOverlapOrder.view[k]])) {
      return v.view[k]->extent[0] <= plan.self_checked_tokens || self_disjoint(*v.view[k]);
    } else {
      return true;
    }
  });
  if (!self_ok) return false;
  // The overlap rule over the plan's pairs of present views (a view empty at
  // this step has the span [0, 0): disjoint from every span). First the
  // groups' union spans, in one pass without branches: where two meet, every
  // pair one by one.
  const auto disjoint = [&](std::size_t i, std::size_t j) {
    return provably_disjoint(*v.view[i], spans[i], *v.view[j], spans[j]);
  };
  if (plan.num_group_pairs > 0) {
    Span unions[OverlapViews::kAll];
    for (std::size_t g = 0; g < plan.num_groups; ++g) unions[g].lo = ~std::uintptr_t(0);
    for (std::size_t k = 0; k < plan.num_present; ++k) {
      const std::size_t i = plan.present[k];
      if (spans[i].hi == 0) continue;  // empty
      Span& u = unions[plan.group[i]];
      u.lo = spans[i].lo < u.lo ? spans[i].lo : u.lo;
      u.hi = spans[i].hi > u.hi ? spans[i].hi : u.hi;
    }
    bool any = false;
    for (std::size_t k = 0; k < plan.num_group_pairs; ++k)
      any |= spans_meet(unions[plan.group_pair[k][0]], unions[plan.group_pair[k][1]]);
    if (any) {
      for (std::size_t k = 0; k < plan.num_pairs; ++k)
        if (!disjoint(plan.pair[k][0], plan.pair[k][1])) return false;
      return true;
    }
  }
  // Within the groups: the interleaved pairs keep the plan's verdict where
  // they lie as they did.
  for (std::size_t k = 0; k < plan.num_interleaved; ++k) {
    const StepPlan::Interleaved& e = plan.interleaved[k];
    const TensorView &a = *v.view[e.i], &b = *v.view[e.j];
    const std::uintptr_t distance =
        reinterpret_cast<std::uintptr_t>(b.data) - reinterpret_cast<std::uintptr_t>(a.data);
    const bool as_planned = distance == e.distance && a.extent[0] == e.n_i && b.extent[0] == e.n_j;
    if (!as_planned && !disjoint(e.i, e.j)) return false;
  }
  bool any = false;
  for (std::size_t k = 0; k < plan.num_inner; ++k)
    any |= spans_meet(spans[plan.inner[k][0]], spans[plan.inner[k][1]]);
  if (!any) return true;
  for (std::size_t k = 0; k < plan.num_inner; ++k)
    if (!disjoint(plan.inner[k][0], plan.inner[k][1])) return false;
  return true;
}

// ---- prepared calls
// Equal dtype, rank, strides and extents; with `token_free`, extent 0 (a
// token count or a page-table length) may differ.
static_assert(sizeof(TensorView) == 80 && offsetof(TensorView, dtype) == 8 &&
                  offsetof(TensorView, rank) == 12 && offsetof(TensorView, extent) == 16 &&
                  offsetof(TensorView, stride) == 48,
              "TensorView's layout changed: update same_view");
inline bool same_view(const TensorView& a, const TensorView& b, bool token_free) {
  // dtype and rank, extents, strides: the 9 words after data (word 1:
  // extent 0), compared without branches.
  auto differ = [&](int k) {
    std::uint64_t x, y;
    std::memcpy(&x, reinterpret_cast<const char*>(&a.dtype) + 8 * k, 8);
    std::memcpy(&y, reinterpret_cast<const char*>(&b.dtype) + 8 * k, 8);
    return x ^ y;
  };
  std::uint64_t diff = differ(0) | (token_free ? 0 : differ(1));
  for (int k = 2; k < 9; ++k) diff |= differ(k);
  return diff == 0;
}
// Equal convention and, for a host scale, value; a device scale may move.
bool same_scale(const Scale& a, const Scale& b) {
  return a.convention == b.convention && (a.device == nullptr) == (b.device == nullptr) &&
         (a.device != nullptr || a.value == b.value);
}

// `a` and `b` differ at most in the fields a step may change: the views'
// data, extent 0 of the views whose dim 0 a step may change (per-token,
// page table), device scale and checked-mode counter pointers (not whether
// they are null), the stream.
bool same_except_step(const Arguments& a, const Arguments& b) {
  // Every field of Arguments is named here or in kViews; a new field must be added.
  static_assert(sizeof(void*) != 8 || sizeof(Arguments) == 1480,
                "Arguments changed: update same_except_step");
  if (a.kind != b.kind || a.rope_style != b.rope_style || a.cache_index.form != b.cache_index.form)
    return false;
  // With equal kind, form and ranks, the views a call uses are b's.
  const Active on(b);
  const bool views = walk<kNumViews>([&](auto i) {
    constexpr const ViewSpec& s = kViews[decltype(i)::value];
    if constexpr (is_scalar(s.role)) {
      return true;
    } else {
      // Of a view the call does not use, the rules read only its rank.
      if (!on(s.when)) return view_in(a, s).rank == view_in(b, s).rank;
      return same_view(view_in(a, s), view_in(b, s), size_spec(s.dim[0].size).per_step);
    }
  });
  return views && same_scale(a.q_scale, b.q_scale) && same_scale(a.k_scale, b.k_scale) &&
         same_scale(a.v_scale, b.v_scale) && a.checked.enabled == b.checked.enabled &&
         (a.checked.skipped_tokens == nullptr) == (b.checked.skipped_tokens == nullptr) &&
         a.programmatic_dependent_launch == b.programmatic_dependent_launch &&
         a.indices_ready_before_previous_kernel == b.indices_ready_before_previous_kernel;
}

}  // namespace

Result validate_arguments(const Arguments& args) noexcept { return Validator(args).run(); }

static_assert(
    sizeof(StepPlan::view) / sizeof(StepPlan::View) == OverlapViews::kAll &&
        sizeof(StepPlan::present) == OverlapViews::kAll &&
        sizeof(StepPlan::pair) / 2 >=
            OverlapViews::kOutputs * (2 * OverlapViews::kAll - OverlapViews::kOutputs - 1) / 2,
    "StepPlan::view, present: one entry per view of the overlap rule; pair: room for all pairs");

void plan_shape(StepPlan* plan, const Arguments& validated) noexcept {
  plan->self_checked_tokens = validated.q_rope.extent[0];
  const OverlapViews v(validated, Active(validated));
  plan->num_present = 0;
  plan->num_pairs = 0;
  for (std::size_t i = 0; i < OverlapViews::kAll; ++i) {
    const TensorView& t = *v.view[i];
    StepPlan::View& pv = plan->view[i];
    if (t.rank > 0) {
      for (std::size_t k = 0; k < plan->num_present; ++k)
        if (plan->present[k] < OverlapViews::kOutputs) {
          plan->pair[plan->num_pairs][0] = plan->present[k];
          plan->pair[plan->num_pairs][1] = std::uint8_t(i);
          ++plan->num_pairs;
        }
      plan->present[plan->num_present++] = std::uint8_t(i);
    }
    pv.es = std::int64_t(size_of(t.dtype));
    pv.strided_vector = t.rank == 1 && t.stride[0] != 1;
    pv.others_nonzero = t.rank > 0;
    pv.rest_elems = 1;
    pv.rest_fits = true;
    for (int k = 1; k < t.rank; ++k) {
      pv.others_nonzero = pv.others_nonzero && t.extent[k] > 0;
      std::int64_t term = 0;
      if (t.extent[k] > 0 && !(mul_fits(t.extent[k] - 1, t.stride[k], &term) &&
                               add_fits(pv.rest_elems, term, &pv.rest_elems)))
        pv.rest_fits = false;
    }
    pv.prepared_n = t.rank > 0 ? t.extent[0] : 0;
    pv.prepared_bytes = -1;
    std::int64_t elems = 0, bytes = 0;
    if (pv.prepared_n > 0 && pv.others_nonzero && pv.rest_fits &&
        span_bytes(pv, pv.prepared_n, t.stride[0], &elems, &bytes))
      pv.prepared_bytes = bytes;
  }
  // Groups: views joined while their spans meet (a view and its group's
  // first view share its number), then the pairs of groups one of which
  // holds an output, and the pairs within a group.
  Span spans[OverlapViews::kAll];
  for (std::size_t k = 0; k < plan->num_present; ++k) {
    const std::size_t i = plan->present[k];
    spans[i] = span_of(*v.view[i]);
    plan->group[i] = std::uint8_t(i);
  }
  const auto meet = [&](std::size_t i, std::size_t j) { return spans_meet(spans[i], spans[j]); };
  for (bool joined = true; joined;) {  // to a fixed point: at most 21 rounds of 21 x 21
    joined = false;
    for (std::size_t a = 0; a < plan->num_present; ++a)
      for (std::size_t b = a + 1; b < plan->num_present; ++b) {
        const std::size_t i = plan->present[a], j = plan->present[b];
        if (plan->group[i] == plan->group[j] || !meet(i, j)) continue;
        const std::uint8_t from = plan->group[j] > plan->group[i] ? plan->group[j] : plan->group[i];
        const std::uint8_t to = plan->group[j] > plan->group[i] ? plan->group[i] : plan->group[j];
        for (std::size_t c = 0; c < plan->num_present; ++c)
          if (plan->group[plan->present[c]] == from) plan->group[plan->present[c]] = to;
        joined = true;
      }
  }
  // Group numbers 0 .. num_groups - 1, in the order of their first views.
  std::uint8_t number[OverlapViews::kAll];
  bool has_output[OverlapViews::kAll] = {};
  plan->num_groups = 0;
  for (std::size_t k = 0; k < plan->num_present; ++k) {
    const std::size_t i = plan->present[k];
    if (plan->group[i] == i) number[i] = plan->num_groups++;
  }
  for (std::size_t k = 0; k < plan->num_present; ++k) {
    const std::size_t i = plan->present[k];
    plan->group[i] = number[plan->group[i]];
    if (i < OverlapViews::kOutputs) has_output[plan->group[i]] = true;
  }
  plan->num_group_pairs = 0;
  for (std::size_t g = 0; g < plan->num_groups; ++g)
    for (std::size_t h = g + 1; h < plan->num_groups; ++h)
      if (has_output[g] || has_output[h]) {
        plan->group_pair[plan->num_group_pairs][0] = std::uint8_t(g);
        plan->group_pair[plan->num_group_pairs][1] = std::uint8_t(h);
        ++plan->num_group_pairs;
      }
  // Where the unions cost about as much as the pairs they stand for (a
  // union per view, a test per pair of groups), one group: every pair inner.
  if (plan->num_present + plan->num_group_pairs >= plan->num_pairs) {
    for (std::size_t k = 0; k < plan->num_present; ++k) plan->group[plan->present[k]] = 0;
    plan->num_groups = 1;
    plan->num_group_pairs = 0;
  }
  plan->num_inner = 0;
  plan->num_interleaved = 0;
  for (std::size_t k = 0; k < plan->num_pairs; ++k) {
    const std::uint8_t i = plan->pair[k][0], j = plan->pair[k][1];
    if (plan->group[i] != plan->group[j]) continue;
    if (!meet(i, j) ||
        plan->num_interleaved == sizeof(plan->interleaved) / sizeof(plan->interleaved[0])) {
      plan->inner[plan->num_inner][0] = i;
      plan->inner[plan->num_inner][1] = j;
      ++plan->num_inner;
      continue;
    }
    StepPlan::Interleaved& e = plan->interleaved[plan->num_interleaved++];
    e.i = i;
    e.j = j;
    e.distance = reinterpret_cast<std::uintptr_t>(v.view[j]->data) -
                 reinterpret_cast<std::uintptr_t>(v.view[i]->data);
    e.n_i = v.view[i]->extent[0];
    e.n_j = v.view[j]->extent[0];
  }
}

bool validate_step(const StepPlan& plan, const Arguments& args) noexcept {
  // last_step: the lines the step's byte compare has just begun to read, and
  // those lower_step then writes (the same verdict as the prepared arguments:
  // a step keeps every field same_except_step compares).
  return same_except_step(args, plan.last_step) && Validator(args).run_step(plan);
}

}  // namespace detail
}  // namespace ropekv
