// The overlap rule: its views (from the argument table), the rule, and its
// proofs that views share no element, from their byte spans and strides;
// the overflow-checked arithmetic the spans use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

#include "detail/argument_table.hpp"
#include "detail/result.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv {
namespace detail {

// ---- overflow-checked arithmetic on non-negative int64 values
constexpr std::int64_t kMax64 = std::numeric_limits<std::int64_t>::max();
// *out = a * b; false when it exceeds INT64_MAX.
inline bool mul_fits(std::int64_t a, std::int64_t b, std::int64_t* out) {
#if defined(__GNUC__) || defined(__clang__)
  return !__builtin_mul_overflow(a, b, out);  // one multiply and a flag test, no division
#else
  if (a != 0 && b > kMax64 / a) return false;
  *out = a * b;
  return true;
#endif
}
// *out = a + b; false when it exceeds INT64_MAX.
inline bool add_fits(std::int64_t a, std::int64_t b, std::int64_t* out) {
  if (b > kMax64 - a) return false;
  *out = a + b;
  return true;
}

// Bytes from a view's first element to the end of its last one: (sum of
// (extent - 1) * stride + 1) * element size, for a view with non-negative
// extents and strides and at least one element; false when it does not fit
// in 63 bits. Validation rejects such views, so every product, span and
// offset computed from a validated view fits in int64.
inline bool span_bytes(const TensorView& v, std::int64_t* out) {
  std::int64_t last = 0;
  for (int k = 0; k < v.rank; ++k) {
    std::int64_t term;
    if (!mul_fits(v.extent[k] - 1, v.stride[k], &term) || !add_fits(last, term, &last))
      return false;
  }
  return add_fits(last, 1, &last) && mul_fits(last, std::int64_t(size_of(v.dtype)), out);
}

// Byte span [lo, hi) of the elements a view covers (empty views: lo == hi).
// For validated views only (span and end address checked). No member
// initializers: a step's arrays of spans are filled, not zeroed first.
struct Span {
  std::uintptr_t lo, hi;
};
inline Span span_of(const TensorView& v) {
  Span s = {0, 0};
  std::int64_t bytes = 0;
  if (!v.present() || v.rank > 4 || v.numel() <= 0 || v.data == nullptr || !span_bytes(v, &bytes))
    return s;
  s.lo = reinterpret_cast<std::uintptr_t>(v.data);
  s.hi = s.lo + std::uintptr_t(bytes);
  return s;
}

// Two non-empty spans share a byte (no branch: the step's tests run it over
// every pair).
inline bool spans_meet(const Span& a, const Span& b) { return (a.hi > b.lo) & (b.hi > a.lo); }

// A view does not overlap itself: with dims sorted by stride, every stride is
// at least the span of the dims inside it. Dims of extent 1 are skipped;
// false (not provably disjoint) where the running span overflows.
bool self_disjoint(const TensorView& v);

// Sufficient test that two views share no element: their byte spans are
// disjoint, or for some period T (one of their outer strides) both are a
// union of translates by multiples of T of one segment each, and the two
// segments are disjoint modulo T. This proves NHD/HND rotary vs non-rotary
// views, stacked K/V caches and MLA [latent | rope] entries disjoint.
// sa, sb: span_of(a), span_of(b) (made once per view by the caller).
bool interleaved_disjoint(const TensorView& a, const Span& sa, const TensorView& b, const Span& sb);
inline bool provably_disjoint(const TensorView& a, const Span& sa, const TensorView& b,
                              const Span& sb) {
  if (sa.lo == sa.hi || sb.lo == sb.hi) return true;
  if (!spans_meet(sa, sb)) return true;
  return interleaved_disjoint(a, sa, b, sb);
}

// ---- the rule
// The one-element view of a scalar (scale pointer, skipped-token counter),
// empty where it takes no part in the call.
inline TensorView scalar_view(const Arguments& a, const Active& on, const ViewSpec& s) {
  TensorView v;
  const void* p = on(s.when) ? pointer_in(a, s) : nullptr;
  v.data = const_cast<void*>(p);
  v.dtype = s.dtype == DTypeRule::kFloat32 ? DType::kFloat32 : DType::kInt64;
  v.rank = p != nullptr ? 1 : 0;
  v.extent[0] = 1;
  v.stride[0] = 1;
  return v;
}

// The views the overlap rule compares, in kOverlapOrder: every written view
// (outputs, the checked-mode counter), then every read one; those that take
// no part in the call (the other addressing form's arrays, MLA's value
// scale) absent. Points into itself: not copyable.
struct OverlapViews {
  static constexpr std::size_t kAll = kOverlapOrder.size;
  static constexpr std::size_t kOutputs = kNumWritten;  // the first kOutputs

  OverlapViews(const Arguments& a, const Active& on)
      : OverlapViews(a, on, std::make_index_sequence<kNumScalars>{}) {}
  OverlapViews(const OverlapViews&) = delete;
  OverlapViews& operator=(const OverlapViews&) = delete;
  static const char* name(std::size_t i) { return kViews[kOverlapOrder.view[i]].name; }

  const TensorView* view[kAll];

 private:
  // The place in kScalarOrder of the scalar at overlap position k.
  static constexpr std::size_t scalar_slot(std::size_t k) {
    return position(kScalarOrder, kOverlapOrder.view[k]);
  }
  // Each scalar's view built in place (no 80-byte copy, no large memset).
  template <std::size_t... I>
  OverlapViews(const Arguments& a, const Active& on, std::index_sequence<I...>)
      : scalar_{scalar_view(a, on, kViews[kScalarOrder.view[I]])...} {
    walk<kAll>([&](auto i) {
      constexpr std::size_t k = decltype(i)::value;
      constexpr const ViewSpec& s = kViews[kOverlapOrder.view[k]];
      if constexpr (is_scalar(s.role)) {
        view[k] = &scalar_[scalar_slot(k)];
      } else {
        view[k] = on(s.when) ? &view_in(a, s) : &none_;
      }
      return true;
    });
  }
  TensorView scalar_[kNumScalars], none_;
};

// No output overlaps itself (the first `self_checked` outputs are checked),
// another output or an input. spans[i]: span_of(*v.view[i]).
inline Result overlap_rule(const OverlapViews& v, const Span* spans, std::size_t self_checked) {
  constexpr std::size_t kOut = OverlapViews::kOutputs;
  static_assert(OverlapViews::kAll <= 255, "live[] holds view positions in bytes");
  for (std::size_t i = 0; i < self_checked; ++i) {
    if (!self_disjoint(*v.view[i]))
      return make_result(Status::kErrorOverlap,
                         "%s must not overlap itself (distinct indices must address distinct "
                         "elements)",
                         OverlapViews::name(i));
  }
  // Only views with elements take part (an empty one overlaps nothing): a
  // call uses about a third of the views, and this loop is most of a
  // prepared step's cost. Pairs go in the same (i, j) order as over all views.
  std::uint8_t live[OverlapViews::kAll];
  std::size_t n = 0, n_out = 0;
  for (std::size_t i = 0; i < OverlapViews::kAll; ++i) {
    if (spans[i].lo == spans[i].hi) continue;
    live[n++] = std::uint8_t(i);
    if (i < kOut) n_out = n;
  }
  for (std::size_t a = 0; a < n_out; ++a) {
    const std::size_t i = live[a];  // an output: live[] ascends, outputs come first
    for (std::size_t b = a + 1; b < n; ++b) {
      const std::size_t j = live[b];
      if (!spans_meet(spans[i], spans[j]) ||
          interleaved_disjoint(*v.view[i], spans[i], *v.view[j], spans[j]))
        continue;
      if (j < kOut)
        return make_result(Status::kErrorOverlap, "%s and %s must not overlap",
                           OverlapViews::name(i), OverlapViews::name(j));
      return make_result(Status::kErrorOverlap, "output %s must not overlap input %s",
                         OverlapViews::name(i), OverlapViews::name(j));
    }
  }
  return Result{};
}

}  // namespace detail
}  // namespace ropekv
