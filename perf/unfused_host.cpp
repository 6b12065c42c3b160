// The unfused baseline on the host: three plain passes (see unfused.hpp),
// written as simple row loops over the shared element math. For a fair
// comparison it gets the compilation and the threads the host backend gets
// (see host/host_backend.cpp): loops compiled for x86-64-v4, v3 and the
// baseline, the best one picked at run time, -fno-trapping-math
// (value-preserving) so that GCC vectorises the encoders' selects, and each
// pass spread over the backend's threads (host_for_tokens).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <cstdint>
#include <exception>

#include "detail/lower.hpp"
#include "unfused.hpp"
#include "unfused_passes.hpp"
#if ROPEKV_ENABLE_KOKKOS
#include "host/threads.hpp"
#endif

namespace ropekv_perf {

namespace {

#if defined(__GNUC__) || defined(__clang__)
#define UNFUSED_INLINE __attribute__((always_inline)) inline
#else
#define UNFUSED_INLINE inline
#endif

using namespace unfused;
using ropekv::detail::store_value;
constexpr ropekv::DType kOut = ropekv::DType::kFloat8E4M3FN;

UNFUSED_INLINE void quantize_row(const std::uint16_t* __restrict__ x, std::uint8_t* __restrict__ y,
                                 std::int64_t n, ScaleDivisor s) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = store_value<kOut>(Bf16::decode(x[i]), s);
}

// Pass 1 for one head row: x (strided view row) -> y (scratch row), bf16.
template <ropekv::RopeStyle Style>
UNFUSED_INLINE void rope_row_style(std::int64_t half, const std::uint16_t* __restrict__ x,
                                   std::uint16_t* __restrict__ y, const float* __restrict__ cs) {
  for (std::int64_t k = 0; k < half; ++k) {
    const ropekv::detail::PairIndex ix = ropekv::detail::pair_index(Style, k, half);
    const ropekv::detail::RotatedPair o = ropekv::detail::rotate_pair(
        Bf16::decode(x[ix.first]), Bf16::decode(x[ix.second]), cs[k], cs[half + k]);
    y[ix.first] = Bf16::encode(o.y);
    y[ix.second] = Bf16::encode(o.yp);
  }
}
UNFUSED_INLINE void rope_row(const LaunchParams& p, const std::uint16_t* x, std::uint16_t* y,
                             const float* cs) {
  if (p.style == ropekv::RopeStyle::kNeox)
    rope_row_style<ropekv::RopeStyle::kNeox>(p.rotary_dim / 2, x, y, cs);
  else
    rope_row_style<ropekv::RopeStyle::kInterleaved>(p.rotary_dim / 2, x, y, cs);
}

// Pass `pass` (1: RoPE, 2: quantize q, 3: reshape_and_cache) over tokens
// [t0, t1). A pass is a separate kernel in a serving engine: each runs over
// the whole batch (on every thread) before the next starts.
UNFUSED_INLINE void run_pass(const LaunchParams& p, int pass, std::uint16_t* q_rot,
                             std::uint16_t* k_rot, std::int64_t t0, std::int64_t t1) {
  const std::int64_t r = p.rotary_dim, n = p.nope_dim, hq = p.num_q_heads, hk = p.num_kv_heads;
  if (pass == 1) {  // RoPE (bf16 in, bf16 out)
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t pos = p.positions[t];
      const float* cs = reinterpret_cast<const float*>(p.cos_sin) + pos * p.cos_row_stride;
      for (std::int64_t h = 0; h < hq; ++h)
        rope_row(p, in_row(p.q_rope, t, h), q_rot + (t * hq + h) * r, cs);
      for (std::int64_t h = 0; h < hk; ++h)
        rope_row(p, in_row(p.k_rope, t, h), k_rot + (t * hk + h) * r, cs);
    }
  } else if (pass == 2) {  // quantize q
    const ScaleDivisor qs = p.q_scale.divisor();
    for (std::int64_t t = t0; t < t1; ++t) {
      for (std::int64_t h = 0; h < hq; ++h) {
        quantize_row(q_rot + (t * hq + h) * r, out_row(p.q_rope_out, t, h), r, qs);
        if (n > 0) quantize_row(in_row(p.q_nope, t, h), out_row(p.q_nope_out, t, h), n, qs);
      }
    }
  } else {  // reshape_and_cache: k and v into the paged cache
    const ScaleDivisor ks = p.k_scale.divisor();
    const ScaleDivisor vs = p.v_scale.divisor();
    for (std::int64_t t = t0; t < t1; ++t) {
      const TokenPlan plan = ropekv::detail::plan_token(p, t);
      if (!plan.write) continue;
      for (std::int64_t h = 0; h < hk; ++h) {
        quantize_row(k_rot + (t * hk + h) * r, cache_row(p.k_cache_rope, plan, h), r, ks);
        if (n > 0) quantize_row(in_row(p.k_nope, t, h), cache_row(p.k_cache_nope, plan, h), n, ks);
        if (p.v_dim > 0)
          quantize_row(in_row(p.v, t, h), cache_row(p.v_cache, plan, h), p.v_dim, vs);
      }
    }
  }
}

using PassFn = void (*)(const LaunchParams&, int, std::uint16_t*, std::uint16_t*, std::int64_t,
                        std::int64_t);
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target("arch=x86-64-v4"), flatten)) void pass_v4(const LaunchParams& p, int pass,
                                                                std::uint16_t* q, std::uint16_t* k,
                                                                std::int64_t t0, std::int64_t t1) {
  run_pass(p, pass, q, k, t0, t1);
}
__attribute__((target("arch=x86-64-v3"), flatten)) void pass_v3(const LaunchParams& p, int pass,
                                                                std::uint16_t* q, std::uint16_t* k,
                                                                std::int64_t t0, std::int64_t t1) {
  run_pass(p, pass, q, k, t0, t1);
}
#endif
#if defined(__GNUC__) || defined(__clang__)
__attribute__((flatten))
#endif
void pass_base(const LaunchParams& p, int pass, std::uint16_t* q, std::uint16_t* k,
               std::int64_t t0, std::int64_t t1) {
  run_pass(p, pass, q, k, t0, t1);
}

PassFn pass_for_cpu() {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
  static const int level = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("x86-64-v4") ? 2 : __builtin_cpu_supports("x86-64-v3") ? 1 : 0;
  }();
  if (level == 2) return &pass_v4;
  if (level == 1) return &pass_v3;
#endif
  return &pass_base;
}

}  // namespace

ropekv::Result unfused_host(const ropekv::Arguments& args, void* q_rot, void* k_rot) {
  LaunchParams p;
  ropekv::Result res = ropekv::detail::lower(args, &p);
  if (!res.ok()) return res;
  if (!supported(p))
    return ropekv::detail::make_result(ropekv::Status::kErrorUnsupportedDType,
                                       "unfused baseline: bf16 in, fp32 cos/sin, e4m3fn out only");
  auto* q = static_cast<std::uint16_t*>(q_rot);
  auto* k = static_cast<std::uint16_t*>(k_rot);
  const PassFn fn = pass_for_cpu();
  for (int pass = 1; pass <= 3; ++pass) {
#if ROPEKV_ENABLE_KOKKOS
    // The host backend's threads, chunking and size threshold, pass by pass.
    try {
      ropekv::detail::host_for_tokens(
          p, [&](std::int64_t t0, std::int64_t t1) { fn(p, pass, q, k, t0, t1); });
    } catch (const std::exception& e) {
      return ropekv::detail::make_result(ropekv::Status::kErrorLaunchFailed, "unfused baseline: %s",
                                         e.what());
    }
#else
    fn(p, pass, q, k, 0, p.nnz);
#endif
  }
  return res;
}

}  // namespace ropekv_perf
