// Validation: every host-side rule, walking the argument table
// (argument_table.hpp), in the phases of Validator.
//
// Every rule returns a distinct Status with a message naming the argument and
// the rule. Rules run in a fixed order; the first failure is reported.
#include "detail/validate.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
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
Result rank_error(const char* name, int rank, int got) {
  return make_result(Status::kErrorInvalidRank, "%s must have rank %d, got %d", name, rank, got);
}

// Checks that `v` has `rank` dims, a supported dtype, non-negative extents
// and strides, a contiguous last dim, aligned non-null data.
Result check_view(const TensorView& v, const char* name, int rank) {
  if (v.rank != rank) return rank_error(name, rank, v.rank);
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

// One call's arguments against the rules: every rule (run), or those a
// prepared call's step re-checks (step_rules_hold).
class Validator {
 public:
  explicit Validator(const Arguments& a) : a_(a), on_(a) {}

  // Every rule.
  Result run() const;
  // The size rules a step may change (the token count, the page-table
  // lengths) and the scales' (step_rules_hold).
  bool step_rules_hold() const { return check_extents<true>().ok() && check_scales().ok(); }

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

}  // namespace

// ---- the phases
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
    // A negative rank is no view, not an absent one (rank 0).
    if (v.rank < 0) {
      r = rank_error(s.name, s.rank, v.rank);
      return false;
    }
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

Result validate_arguments(const Arguments& args) noexcept { return Validator(args).run(); }
bool step_rules_hold(const Arguments& args) noexcept { return Validator(args).step_rules_hold(); }

}  // namespace detail
}  // namespace ropekv
