// The overlap rule's disjointness proofs (detail/overlap.hpp).
#include "detail/overlap.hpp"

#include <cstdint>
#include <utility>

namespace ropekv {
namespace detail {

namespace {

// Extent of the region covered by the dims of `v` whose stride is below
// `period` (in bytes, > 0), plus the contiguous last dim; -1 when a dim with
// a stride >= period is not a multiple of it. Dims of extent 1 (whose
// stride is never applied) are skipped.
std::int64_t inner_span_bytes(const TensorView& v, std::int64_t period) {
  const std::int64_t es = std::int64_t(size_of(v.dtype));
  std::int64_t span = v.extent[v.rank - 1] * es;
  for (int k = 0; k < v.rank - 1; ++k) {
    if (v.extent[k] <= 1) continue;
    const std::int64_t sb = v.stride[k] * es;  // <= the view's span: fits
    if (sb >= period) {
      if (sb % period != 0) return -1;
    } else {
      span += (v.extent[k] - 1) * sb;
    }
  }
  return span;
}

// Two views over one index space (same dtype, rank, outer extents, and
// strides where the extent is above 1) whose rows sit side by side: b's row
// starts d >= len(a) elements after a's. They are disjoint when the view of
// the combined rows (a's base, last extent d + len(b)) does not overlap
// itself: a padded page or token stride of any size, e.g. rotary /
// non-rotary parts of one head.
bool side_by_side(const TensorView& a, const TensorView& b) {
  if (a.dtype != b.dtype || a.rank != b.rank || a.rank < 2) return false;
  const int last = a.rank - 1;
  for (int k = 0; k < last; ++k)
    if (a.extent[k] != b.extent[k] || (a.extent[k] > 1 && a.stride[k] != b.stride[k])) return false;
  const std::uintptr_t pa = reinterpret_cast<std::uintptr_t>(a.data),
                       pb = reinterpret_cast<std::uintptr_t>(b.data);
  const std::uintptr_t bytes = pb >= pa ? pb - pa : pa - pb;
  const std::uintptr_t es = size_of(a.dtype);
  if (bytes % es != 0 || bytes / es > std::uintptr_t(kMax64)) return false;
  const TensorView& lo = pb >= pa ? a : b;
  const TensorView& hi = pb >= pa ? b : a;
  const std::int64_t gap = std::int64_t(bytes / es);
  TensorView both = lo;
  if (gap < lo.extent[last] || !add_fits(gap, hi.extent[last], &both.extent[last])) return false;
  both.stride[last] = 1;
  return self_disjoint(both);
}

}  // namespace

bool self_disjoint(const TensorView& v) {
  if (!v.present() || v.numel() <= 1) return true;
  int order[4] = {0, 1, 2, 3};
  for (int i = 1; i < v.rank; ++i)  // insertion sort of at most 4 dims by stride
    for (int j = i; j > 0 && v.stride[order[j]] < v.stride[order[j - 1]]; --j)
      std::swap(order[j], order[j - 1]);
  std::int64_t span = 1;  // elements covered by the dims so far
  for (int i = 0; i < v.rank; ++i) {
    const int k = order[i];
    if (v.extent[k] <= 1) continue;
    std::int64_t reach;
    if (v.stride[k] < span || !mul_fits(v.stride[k], v.extent[k] - 1, &reach) ||
        !add_fits(reach, span, &span))
      return false;
  }
  return true;
}

// The rest of provably_disjoint, for views whose spans overlap.
bool interleaved_disjoint(const TensorView& a, const Span& sa, const TensorView& b,
                          const Span& sb) {
  if (side_by_side(a, b)) return true;
  const TensorView* views[2] = {&a, &b};
  for (const TensorView* src : views) {
    for (int k = 0; k < src->rank - 1; ++k) {
      if (src->extent[k] <= 1 || src->stride[k] <= 0) continue;
      const std::int64_t period = src->stride[k] * std::int64_t(size_of(src->dtype));
      const std::int64_t ia = inner_span_bytes(a, period);
      const std::int64_t ib = inner_span_bytes(b, period);
      if (ia < 0 || ib < 0 || ia > period - ib) continue;
      // b's segment start modulo T, from the unsigned distance of the bases.
      const std::uintptr_t t = std::uintptr_t(period);
      const std::uintptr_t d = sb.lo >= sa.lo ? (sb.lo - sa.lo) % t : (t - (sa.lo - sb.lo) % t) % t;
      if (d >= std::uintptr_t(ia) && d + std::uintptr_t(ib) <= t) return true;
    }
  }
  return false;
}

}  // namespace detail
}  // namespace ropekv
