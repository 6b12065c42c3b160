// The overlap rule's proofs that views share no element, from their byte
// spans and strides, and the overflow-checked arithmetic the spans use.
#pragma once

#include <cstdint>
#include <limits>

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
// For validated views only (span and end address checked).
struct Span {
  std::uintptr_t lo = 0, hi = 0;
};
inline Span span_of(const TensorView& v) {
  Span s;
  std::int64_t bytes = 0;
  if (!v.present() || v.rank > 4 || v.numel() <= 0 || v.data == nullptr || !span_bytes(v, &bytes))
    return s;
  s.lo = reinterpret_cast<std::uintptr_t>(v.data);
  s.hi = s.lo + std::uintptr_t(bytes);
  return s;
}

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
  if (sa.hi <= sb.lo || sb.hi <= sa.lo) return true;
  return interleaved_disjoint(a, sa, b, sb);
}

}  // namespace detail
}  // namespace ropekv
