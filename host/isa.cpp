// The host backend's instruction-set variants (isa.hpp). On x86-64 with
// GCC the row bodies (rows.hpp) are compiled three times, for x86-64-v4
// (AVX-512), x86-64-v3 (AVX2 + FMA) and the baseline, and the best one the
// CPU supports is picked at run time: the library stays portable (no
// -march), yet the explicit fmaf of the RoPE and the quantization step
// become vector FMAs instead of libm calls (and the division by the scale a
// vector divide). No result changes: the element math is the shared
// definition, compiled without contraction or fast-math.
#if defined(__GNUC__) && !defined(__clang__)
// Value-preserving: with the default -ftrapping-math GCC may not speculate
// float operations feeding a select (as in f16_to_f32), turns such selects
// into branches and vectorises nothing below AVX-512 (which has masked ops). No
// trap is ever enabled here, and no result depends on this flag (it allows
// neither contraction nor reassociation; division stays IEEE). Placed before
// the includes so that the shared inline math compiled in this file carries
// it too (GCC inlines only between functions of matching flags).
#pragma GCC optimize("no-trapping-math")
#endif

#include "host/isa.hpp"

#include <cstdlib>
#include <string>

#include "detail/dispatch.hpp"
#include "host/rows.hpp"

namespace ropekv {
namespace detail {
namespace host {
namespace {

// ---------------------------------------------------------------- instruction sets
// Each struct holds out-of-line row functions compiled for one instruction
// set; `flatten` inlines the row body and the whole element math into them.
#define ROPEKV_HOST_ROW_FNS(TARGET)                                                            \
  template <DType In, DType Out, DType Cos>                                                    \
  TARGET static void rope(const void* x, void* y, const void* cs, std::int64_t rotary_dim,     \
                          RopeStyle style, ScaleDivisor scale) {                               \
    rope_row<In, Out, Cos>(x, y, cs, rotary_dim, style, scale);                                \
  }                                                                                            \
  template <DType In, DType Out>                                                               \
  TARGET static void copy(const void* x, void* y, std::int64_t n, ScaleDivisor scale) {        \
    copy_row<In, Out>(x, y, n, scale);                                                         \
  }                                                                                            \
  template <DType In, DType Out, RopeStyle Style, int R>                                       \
  TARGET static std::int64_t tokens(const LaunchParams& p, const Divisors& d, std::int64_t t0, \
                                    std::int64_t t1) {                                         \
    return fast_range<In, Out, Style, R>(p, d, t0, t1);                                        \
  }

// kFastPath: whether the fast token path is instantiated for this set (not for
// the baseline of x86-64, where fmaf is a library call whatever the loop).
struct IsaBase {
  static constexpr bool kFastPath = !ROPEKV_HOST_MULTI_ISA;
  ROPEKV_HOST_ROW_FNS(ROPEKV_HOST_TARGET_BASE)
};
#if ROPEKV_HOST_MULTI_ISA
struct IsaAvx2 {  // x86-64-v3: AVX2, FMA, BMI2
  static constexpr bool kFastPath = true;
  ROPEKV_HOST_ROW_FNS(ROPEKV_HOST_TARGET_V3)
};
struct IsaAvx512 {  // x86-64-v4: AVX-512 F/BW/CD/DQ/VL
  static constexpr bool kFastPath = true;
  ROPEKV_HOST_ROW_FNS(ROPEKV_HOST_TARGET_V4)
};
#endif
#undef ROPEKV_HOST_ROW_FNS

// The cos/sin table is fp32 or the input dtype (validated).
template <class Isa>
RowFns select_rows(const LaunchParams& p) {
  RowFns fns{};
  dispatch<InputDTypes>(p.in.dtype, [&](auto in) {
    constexpr DType kIn = decltype(in)::value;
    auto pick_rope = [&](auto cos) {
      constexpr DType kCos = decltype(cos)::value;
      dispatch<OutputDTypes>(p.q_out.dtype, [&](auto out) {
        fns.q_rope = &Isa::template rope<kIn, decltype(out)::value, kCos>;
      });
      dispatch<OutputDTypes>(p.cache.dtype, [&](auto out) {
        fns.k_rope = &Isa::template rope<kIn, decltype(out)::value, kCos>;
      });
    };
    dispatch<DTypeList<kIn, DType::kFloat32>>(p.cos.dtype, pick_rope);
    dispatch<OutputDTypes>(p.q_out.dtype, [&](auto out) {
      fns.q_copy = &Isa::template copy<kIn, decltype(out)::value>;
    });
    dispatch<OutputDTypes>(p.cache.dtype, [&](auto out) {
      fns.kv_copy = &Isa::template copy<kIn, decltype(out)::value>;
    });
  });
  return fns;
}

// The fast path's cases: FP8 query output and caches of one format, bf16 or
// fp16 inputs, an fp32 cos/sin table, R of 64 or 128.
using FastInputs = DTypeList<DType::kBFloat16, DType::kFloat16>;
using FastRotaryDims = ValueList<int, 64, 128>;

// The fast range function for `p`, or null when `p` is not a fast-path case.
template <class Isa>
RangeFn select_range(const LaunchParams& p) {
  if constexpr (Isa::kFastPath) {
    const bool fp8_out = p.q_out.dtype == p.cache.dtype && dtype_info(p.cache.dtype).quantized;
    const bool half_in = p.in.dtype == DType::kBFloat16 || p.in.dtype == DType::kFloat16;
    if (!fp8_out || !half_in || p.cos.dtype != DType::kFloat32 ||
        (p.rotary_dim != 64 && p.rotary_dim != 128))
      return nullptr;
    return dispatch<FastRotaryDims>(int(p.rotary_dim), [&](auto r) {
      return dispatch<FastInputs>(p.in.dtype, [&](auto in) {
        return dispatch<Fp8DTypes>(p.cache.dtype, [&](auto out) -> RangeFn {
          constexpr DType kIn = decltype(in)::value, kOut = decltype(out)::value;
          constexpr int kR = decltype(r)::value;
          return p.style == RopeStyle::kNeox
                     ? &Isa::template tokens<kIn, kOut, RopeStyle::kNeox, kR>
                     : &Isa::template tokens<kIn, kOut, RopeStyle::kInterleaved, kR>;
        });
      });
    });
  } else {
    (void)p;
    return nullptr;
  }
}

template <class Isa>
Kernel select_kernel(const LaunchParams& p) {
  Kernel k;
  k.range = select_range<Isa>(p);
  if (k.range == nullptr) k.rows = select_rows<Isa>(p);
  return k;
}

#if ROPEKV_HOST_MULTI_ISA
// 2: x86-64-v4, 1: x86-64-v3, 0: the baseline.
int isa_level() {
  static const int level = [] {
    __builtin_cpu_init();
    int l = __builtin_cpu_supports("x86-64-v4") ? 2 : __builtin_cpu_supports("x86-64-v3") ? 1 : 0;
    // For tests and measurements: ROPEKV_HOST_ISA=avx2|baseline lowers the
    // level (it never raises it above what the CPU supports).
    if (const char* env = std::getenv("ROPEKV_HOST_ISA")) {
      const std::string want(env);
      if (want == "baseline")
        l = 0;
      else if (want == "avx2" && l > 1)
        l = 1;
    }
    return l;
  }();
  return level;
}
#endif

}  // namespace

Kernel select_kernel_for_cpu(const LaunchParams& p) {
#if ROPEKV_HOST_MULTI_ISA
  const int level = isa_level();
  if (level == 2) return select_kernel<IsaAvx512>(p);
  if (level == 1) return select_kernel<IsaAvx2>(p);
#endif
  return select_kernel<IsaBase>(p);
}

IsaVariant selected_isa() {
#if ROPEKV_HOST_MULTI_ISA
  const int level = isa_level();
  if (level == 2) return {"avx512", IsaAvx512::kFastPath};
  if (level == 1) return {"avx2", IsaAvx2::kFastPath};
#endif
  return {"baseline", IsaBase::kFastPath};
}

}  // namespace host
}  // namespace detail
}  // namespace ropekv
