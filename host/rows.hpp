// The host backend's row bodies, written once and compiled per instruction
// set (isa.cpp): one head row's rotary part, its pass-through part, and the
// fast path's whole token for the common case. Branch-free per element, so
// the loops vectorise; every element goes through the shared element math.
#pragma once

#include <cstdint>
#include <type_traits>

#include "detail/element_math.hpp"
#include "detail/params.hpp"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ROPEKV_HOST_MULTI_ISA 1
#define ROPEKV_HOST_TARGET_V4 __attribute__((target("arch=x86-64-v4"), flatten))
#define ROPEKV_HOST_TARGET_V3 __attribute__((target("arch=x86-64-v3"), flatten))
#else
#define ROPEKV_HOST_MULTI_ISA 0
#endif
#if defined(__GNUC__) || defined(__clang__)
#define ROPEKV_HOST_INLINE __attribute__((always_inline)) inline
#define ROPEKV_HOST_TARGET_BASE __attribute__((flatten))
#define ROPEKV_RESTRICT __restrict__
#else
#define ROPEKV_HOST_INLINE inline
#define ROPEKV_HOST_TARGET_BASE
#define ROPEKV_RESTRICT
#endif

namespace ropekv {
namespace detail {
namespace host {

// v as rotate_row stores it: the float itself (kRaw) or encoded in Out.
template <DType Out, bool kRaw>
ROPEKV_HOST_INLINE auto row_value(float v, ScaleDivisor scale) {
  if constexpr (kRaw) {
    (void)scale;
    return v;
  } else {
    return store_value<Out>(v, scale);
  }
}

// The pairs of one head row's rotary part into y: encoded in Out or, for
// rope_row's two-step form, as floats (kRaw).
template <DType In, DType Out, DType Cos, int kR, bool kRaw>
ROPEKV_HOST_INLINE void rotate_row(const void* xv, void* yv, const void* csv,
                                   std::int64_t rotary_dim, RopeStyle style, ScaleDivisor scale) {
  using T = std::conditional_t<kRaw, float, typename Format<Out>::storage>;
  using I = typename Format<In>::storage;
  using C = typename Format<Cos>::storage;
  const I* ROPEKV_RESTRICT x = static_cast<const I*>(xv);
  T* ROPEKV_RESTRICT y = static_cast<T*>(yv);
  // A compile-time trip count with an int index vectorises best.
  using Index = std::conditional_t<(kR > 0), int, std::int64_t>;
  const Index half = kR > 0 ? Index(kR / 2) : Index(rotary_dim / 2);
  const C* ROPEKV_RESTRICT c = static_cast<const C*>(csv);  // cos, then sin at + half
  const C* ROPEKV_RESTRICT s = c + half;
  if (style == RopeStyle::kNeox) {
    // x1 / y1 name the second half-row: every stream is unit-stride.
    const I* ROPEKV_RESTRICT x1 = x + half;
    T* ROPEKV_RESTRICT y1 = y + half;
    for (Index p = 0; p < half; ++p) {
      const RotatedPair r = rotate_pair(Format<In>::decode(x[p]), Format<In>::decode(x1[p]),
                                        Format<Cos>::decode(c[p]), Format<Cos>::decode(s[p]));
      y[p] = row_value<Out, kRaw>(r.y, scale);
      y1[p] = row_value<Out, kRaw>(r.yp, scale);
    }
  } else {
    for (Index p = 0; p < half; ++p) {
      const RotatedPair r =
          rotate_pair(Format<In>::decode(x[2 * p]), Format<In>::decode(x[2 * p + 1]),
                      Format<Cos>::decode(c[p]), Format<Cos>::decode(s[p]));
      y[2 * p] = row_value<Out, kRaw>(r.y, scale);
      y[2 * p + 1] = row_value<Out, kRaw>(r.yp, scale);
    }
  }
}

// kN: the length when known at compile time (the fast path's value rows
// when Dv == R, the usual case), else 0 and n is used.
template <DType In, DType Out, int kN = 0>
ROPEKV_HOST_INLINE void copy_row(const void* xv, void* yv, std::int64_t n, ScaleDivisor scale) {
  using I = typename Format<In>::storage;
  using O = typename Format<Out>::storage;
  const I* ROPEKV_RESTRICT x = static_cast<const I*>(xv);
  O* ROPEKV_RESTRICT y = static_cast<O*>(yv);
  if constexpr (kN > 0) {
    for (int i = 0; i < kN; ++i) y[i] = store_value<Out>(Format<In>::decode(x[i]), scale);
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = store_value<Out>(Format<In>::decode(x[i]), scale);
  }
}

// Written once; each instruction set below gets its own inlined copy. kR is
// the rotary dim when known at compile time (the fast path), else 0.
template <DType In, DType Out, DType Cos, int kR = 0>
ROPEKV_HOST_INLINE void rope_row(const void* xv, void* yv, const void* csv, std::int64_t rotary_dim,
                                 RopeStyle style, ScaleDivisor scale) {
  if constexpr (kR == 64) {
    // Rotated into floats, then encoded in one contiguous loop: the fast
    // path's 64-element rows 1.3-2x faster on an AVX-512 host; the 128-element
    // rows keep the one loop (perf/RESULTS.md).
    float f[kR];
    rotate_row<In, Out, Cos, kR, true>(xv, f, csv, kR, style, scale);
    copy_row<DType::kFloat32, Out, kR>(f, yv, kR, scale);
  } else {
    rotate_row<In, Out, Cos, kR, false>(xv, yv, csv, rotary_dim, style, scale);
  }
}

// ---------------------------------------------------------------- fast token path
// The common case in one inlined body per token: FP8 output for q and cache
// alike, fp32 cos/sin table, a rotary dim known at compile time (64 or 128),
// one RoPE style. The cos/sin row is loaded once for all heads of the token,
// and every row loop has a constant trip count.
// Token t with its plan and the plan of token t + 1 (`next`, not written
// when t is the last token), both resolved once by fast_range. Tokens that
// checked mode skips are counted by the caller (see host_launch).
template <DType In, DType Out, RopeStyle Style, int R>
ROPEKV_HOST_INLINE void fast_token(const LaunchParams& p, const Divisors& d, std::int64_t t,
                                   const TokenPlan& plan, const TokenPlan& next) {
  using I = typename Format<In>::storage;
  using O = typename Format<Out>::storage;
  if (!plan.write) return;
#if defined(__GNUC__) || defined(__clang__)
  // Decode batches scatter tokens over random pages: ask for the next
  // token's cache lines now (with intent to write) so that their misses
  // overlap this token's work.
  if (next.write) {
    const std::int64_t kbytes = R * std::int64_t(sizeof(O)),
                       vbytes = p.v_dim * std::int64_t(sizeof(O));
    for (std::int64_t h = 0; h < p.num_kv_heads; ++h) {
      const char* kr = p.k_cache_rope.row(next.page, next.entry, h, sizeof(O));
      for (std::int64_t o = 0; o < kbytes; o += 64) __builtin_prefetch(kr + o, 1);
      if (vbytes > 0) {
        const char* vr = p.v_cache.row(next.page, next.entry, h, sizeof(O));
        for (std::int64_t o = 0; o < vbytes; o += 64) __builtin_prefetch(vr + o, 1);
      }
    }
  }
#else
  (void)next;
#endif
  const float* cs = reinterpret_cast<const float*>(p.cos_sin) + plan.pos * p.cos_row_stride;
  const std::int64_t n = p.nope_dim;
  // Each head's rotary then non-rotary part: the order of a [rope | nope]
  // head in memory, which the hardware prefetchers follow.
  constexpr std::int64_t kIn = sizeof(I), kOut = sizeof(O);
  for (std::int64_t h = 0; h < p.num_q_heads; ++h) {
    rope_row<In, Out, DType::kFloat32, R>(p.q_rope.row(t, h, kIn), p.q_rope_out.row(t, h, kOut), cs,
                                          R, Style, d.q);
    if (n > 0) copy_row<In, Out>(p.q_nope.row(t, h, kIn), p.q_nope_out.row(t, h, kOut), n, d.q);
  }
  for (std::int64_t h = 0; h < p.num_kv_heads; ++h) {
    rope_row<In, Out, DType::kFloat32, R>(p.k_rope.row(t, h, kIn),
                                          p.k_cache_rope.row(plan.page, plan.entry, h, kOut), cs, R,
                                          Style, d.k);
    if (n > 0)
      copy_row<In, Out>(p.k_nope.row(t, h, kIn), p.k_cache_nope.row(plan.page, plan.entry, h, kOut),
                        n, d.k);
  }
  if (p.v_dim > 0) {
    for (std::int64_t h = 0; h < p.num_kv_heads; ++h) {
      char* out = p.v_cache.row(plan.page, plan.entry, h, kOut);
      if (p.v_dim == R)
        copy_row<In, Out, R>(p.v.row(t, h, kIn), out, R, d.v);
      else
        copy_row<In, Out>(p.v.row(t, h, kIn), out, p.v_dim, d.v);
    }
  }
}

// Tokens [t0, t1) of the fast path: each token's plan is resolved once and
// handed to the token before it too (for its prefetch). Returns the number
// of tokens checked mode skipped.
template <DType In, DType Out, RopeStyle Style, int R>
ROPEKV_HOST_INLINE std::int64_t fast_range(const LaunchParams& p, const Divisors& d,
                                           std::int64_t t0, std::int64_t t1) {
  if (t0 >= t1) return 0;
  std::int64_t bad = 0;
  TokenPlan plan = plan_token(p, t0);
  for (std::int64_t t = t0; t < t1; ++t) {
    const TokenPlan next = t + 1 < p.nnz ? plan_token(p, t + 1) : TokenPlan{};
    fast_token<In, Out, Style, R>(p, d, t, plan, next);
    bad += plan.bad ? 1 : 0;
    plan = next;
  }
  return bad;
}

}  // namespace host
}  // namespace detail
}  // namespace ropekv
