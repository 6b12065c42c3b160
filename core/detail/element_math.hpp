// The one definition of ropekv's element math, shared by every backend
// (host/Kokkos, CUDA, HIP): number conversions, the RoPE pair rotation and
// the quantization step (addressing is in params.hpp). Everything here is host+device and
// branch-free where it runs per element, so compilers vectorise it on the host.
//
// Bit-identity across backends rests on three rules:
//  * every float operation is written out explicitly (fmaf where the contract
//    says so), and the library is compiled without contraction or fast-math;
//  * conversions are done in software by integer arithmetic on the IEEE bits
//    (a hardware conversion may replace one only where it is proven equal,
//    see encode_fp8 below);
//  * NaN is encoded as one canonical positive NaN code per format, whatever
//    its sign or payload (x86 and GPUs disagree on the sign of a NaN that an
//    operation creates, e.g. inf * 0).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "ropekv/ropekv.hpp"

#if defined(__HIP__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>  // __host__ / __device__ for HIP translation units
#endif

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define ROPEKV_HD __host__ __device__ __forceinline__
#else
#define ROPEKV_HD inline
#endif

namespace ropekv {
namespace detail {

// ------------------------------------------------------------- float bits
ROPEKV_HD std::uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
ROPEKV_HD float f32_from_bits(std::uint32_t u) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
ROPEKV_HD std::uint32_t u32_min(std::uint32_t a, std::uint32_t b) { return a < b ? a : b; }
ROPEKV_HD std::uint32_t u32_max(std::uint32_t a, std::uint32_t b) { return a > b ? a : b; }

// ------------------------------------------------------------- decoding inputs (exact)
ROPEKV_HD float bf16_to_f32(std::uint16_t h) { return f32_from_bits(std::uint32_t(h) << 16); }

// IEEE binary16 -> binary32, exact. Finite values (normal and subnormal) are
// rebiased by one exact multiply by 2^112; inf/NaN keep their payload. On
// CUDA devices the conversion instruction (one instead of six): the same value
// for every code but a NaN's payload, which no output keeps (every encoder
// writes its canonical NaN); tests/test_cuda_fp8_hw.cu compares the two over
// every code.
ROPEKV_HD float f16_to_f32(std::uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const std::uint32_t sign = (std::uint32_t(h) & 0x8000u) << 16;
  const std::uint32_t em = std::uint32_t(h) & 0x7fffu;
  const float finite = f32_from_bits(em << 13) * f32_from_bits(0x77800000u);  // * 2^112
  const std::uint32_t special = 0x7f800000u | (em << 13);
  const std::uint32_t mag = em >= 0x7c00u ? special : f32_bits(finite);
  return f32_from_bits(sign | mag);
#endif
}

// ------------------------------------------------------------- encoding outputs
// Canonical NaN codes (positive, whatever the NaN's sign or payload).
constexpr std::uint32_t kNanF32 = 0x7fc00000u;
constexpr std::uint16_t kNanBF16 = 0x7fc0u;
constexpr std::uint16_t kNanF16 = 0x7e00u;
constexpr std::uint8_t kNanE4M3FN = 0x7fu;
constexpr std::uint8_t kNanE5M2 = 0x7fu;
constexpr std::uint8_t kNanE4M3FNUZ = 0x80u;

ROPEKV_HD std::uint32_t canonical_f32_bits(float f) {
  const std::uint32_t u = f32_bits(f);
  return (u & 0x7fffffffu) > 0x7f800000u ? kNanF32 : u;
}

// float -> bf16, round to nearest even; overflow rounds to inf as IEEE does.
ROPEKV_HD std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t u = f32_bits(f);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (u & 0x7fffffffu) > 0x7f800000u ? kNanBF16 : std::uint16_t(rounded);
}

// A small float format with M mantissa bits and bias B. Values of magnitude
// above `max_bits` (the float bits of the largest value the conversion may
// produce) are clamped to it before rounding; that is saturation for FP8
// (satfinite) and, with max_bits = the bits of 2^(emax+1), overflow to
// infinity for fp16.
//
// The rounding is one float addition: with e = the exponent of a, but no
// smaller than the format's smallest normal exponent emin, the power of two
// 2^(e + 23 - M) has an ulp of 2^(e - M), which is exactly the format's step
// at a's exponent (for subnormals, at emin). Let t be that power of two plus
// j = (e - emin) << M units in the last place: j is the code's exponent field
// (0 for subnormals) and, as t is still a multiple of its ulp, a + t rounded
// by the FPU (to nearest even) is t + k * 2^(e - M) where k is a rounded to
// the format's precision. a < 2^(e+1) and j + 2^(M+1) < 2^23, so the sum
// stays in t's binade and its 23 mantissa bits are j + k: the code. Normals
// carry their implicit bit in k (k >= 2^M adds one to the exponent field),
// subnormals have k < 2^M, and a round-up to the next binade (k = 2^(M+1))
// lands on the next exponent's code. Ties go to even codes: j is a multiple
// of 2^M, so the sum's parity is k's. No branch and no select: the same few
// instructions for every element, which the host compilers vectorise (and
// the result is one mask of the sum's bits, so a vectoriser narrowing to the
// code's width packs one vector, not several). Only the default rounding
// mode is assumed; flushing a float subnormal a to zero changes nothing (it
// is far below half the smallest step of every format here).
template <int M, int B, std::uint32_t MaxBits>
ROPEKV_HD std::uint32_t encode_small_float_magnitude(std::uint32_t abs_bits) {
  constexpr int kShift = 23 - M;
  constexpr std::uint32_t kMinNormalBits = std::uint32_t(127 + 1 - B) << 23;  // 2^emin
  const std::uint32_t a = u32_min(abs_bits, MaxBits);
  const std::uint32_t e = u32_max(a, kMinNormalBits) & 0x7f800000u;  // 2^max(exp(a), emin)
  const std::uint32_t t = e + (std::uint32_t(kShift) << 23)          // 2^(e + 23 - M)
                          + ((e - kMinNormalBits) >> kShift);        // + j ulps
  return f32_bits(f32_from_bits(a) + f32_from_bits(t)) & 0x7fffffu;
}

// A whole small-float code: sign bit at bit (Bits - 1), the magnitude from
// encode_small_float_magnitude, NaN -> the format's canonical code. Formats
// without negative zero (fnuz) drop the sign of a zero magnitude.
template <class Code, int Bits, int M, int B, std::uint32_t MaxBits, Code kNan, bool kNegZero>
ROPEKV_HD Code encode_small_float(float f) {
  const std::uint32_t u = f32_bits(f);
  const std::uint32_t abs_bits = u & 0x7fffffffu;
  const std::uint32_t mag = encode_small_float_magnitude<M, B, MaxBits>(abs_bits);
  const std::uint32_t sign = (u >> (32 - Bits)) & (1u << (Bits - 1));
  const std::uint32_t code = (kNegZero || mag != 0u ? sign : 0u) | mag;
  return abs_bits > 0x7f800000u ? kNan : Code(code);
}

// float -> IEEE fp16, round to nearest even, overflow to inf (max_bits = 2^16).
ROPEKV_HD std::uint16_t f32_to_f16(float f) {
  return encode_small_float<std::uint16_t, 16, 10, 15, 0x47800000u, kNanF16, true>(f);
}
// float -> e4m3fn: RNE, |x| > 448 (inf included) saturates to 448, NaN -> 0x7f.
ROPEKV_HD std::uint8_t f32_to_e4m3fn(float f) {
  return encode_small_float<std::uint8_t, 8, 3, 7, 0x43e00000u, kNanE4M3FN, true>(f);
}
// float -> e5m2: RNE, saturate to 57344, NaN -> 0x7f.
ROPEKV_HD std::uint8_t f32_to_e5m2(float f) {
  return encode_small_float<std::uint8_t, 8, 2, 15, 0x47600000u, kNanE5M2, true>(f);
}
// float -> e4m3fnuz: bias 8, RNE, saturate to 240, no negative zero, NaN -> 0x80.
ROPEKV_HD std::uint8_t f32_to_e4m3fnuz(float f) {
  return encode_small_float<std::uint8_t, 8, 3, 8, 0x43700000u, kNanE4M3FNUZ, false>(f);
}

// ------------------------------------------------------------- RoPE
// One rotation pair (x, xp) = (x[i], x[partner]) by (c, s), float32, in the
// contract's order (docs/CONTRACT.md) with explicit fused multiply-adds:
//   y  = fmaf(x,  c, -(xp * s))
//   yp = fmaf(xp, c,   x * s)
struct RotatedPair {
  float y, yp;
};
ROPEKV_HD RotatedPair rotate_pair(float x, float xp, float c, float s) {
  RotatedPair r;
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  r.y = ::fmaf(x, c, -(xp * s));
  r.yp = ::fmaf(xp, c, x * s);
#else
  r.y = std::fmaf(x, c, -(xp * s));
  r.yp = std::fmaf(xp, c, x * s);
#endif
  return r;
}

// Element indices of rotation pair p (0 <= p < R/2) within the rotary part;
// the pair's cos is table[p], its sin table[R/2 + p].
struct PairIndex {
  std::int64_t first, second;
};
ROPEKV_HD PairIndex pair_index(RopeStyle style, std::int64_t p, std::int64_t half) {
  PairIndex ix;
  ix.first = style == RopeStyle::kNeox ? p : 2 * p;
  ix.second = style == RopeStyle::kNeox ? p + half : 2 * p + 1;
  return ix;
}

// ------------------------------------------------------------- quantization
// The value stored for `v` with scale s is convert(q), where q is, per the
// scale's convention (ScaleConvention):
//  * dividing:    q = RN(v / s), IEEE float32 division;
//  * multiplying: q = RN(v * s), one IEEE float32 multiplication.
// apply_scale is the one definition of that step; it has two instruction
// sequences, chosen per compilation target:
//  * host: the divide (or multiply) instruction, IEEE by definition (SSE/AVX
//    divps is correctly rounded; no fast-math here). It is the cheapest form
//    on the host: the divider runs beside the other vector units, where the
//    sequence below costs five vector instructions;
//  * device (CUDA, HIP): apply_scale_markstein, without a divide instruction
//    for divisors in [2^-60, 2^60] (a GPU's IEEE division is a slow
//    multi-instruction sequence), and IEEE division (`/`, correctly rounded:
//    no fast-math, no approximate division) for every other divisor: zero,
//    subnormal, huge, infinite, NaN or negative device scales.
// The Markstein form: with the divisor's correctly rounded reciprocal
// y = RN(1/s) (once per call), q0 = RN(v*y) is a faithful approximation of
// v/s, and one Markstein correction with the negated remainder
//   r = RN(s*q0 - v) (exact, by fma),  q1 = RN(q0 - r*y) = fma(-r, y, q0)
// yields RN(v/s) exactly whenever no intermediate overflows or underflows
// (Markstein's theorem). The remainder is taken negated (s*q0 - v rather
// than v - s*q0) so that for v = +-0 it is +0 and q1 = q0 + (-0) keeps the
// sign of zero. For divisors in [2^-60, 2^60] the other special cases:
//  * q0 infinite (v infinite, or v/s overflows) or NaN: r is infinite or
//    NaN; clamping it to [-FLT_MAX, FLT_MAX] (fmin/fmax return the number
//    for a NaN operand) leaves q1 = q0, as the fma adds a finite product to
//    an infinite q0 exactly, and a finite r is never changed;
//  * |v| < 2^-100 (the remainder may underflow): the quotient is below
//    2^-40 and may be off by an ulp, which no FP8 format can see (their
//    smallest step is 2^-16 at most); likewise quotients from 2^127 on.
// A multiplying scale m runs the same instructions with y = m, s = 0 and the
// correction's factor +-0 (m's sign): r = RN(-v) and q1 = q0 + (-r * +-0) =
// q0, a zero of q0's sign added to zero q0 included (see make_divisor). So
// neither convention pays for the other, every FP8 code is the code of the
// IEEE quotient or product, and host and device store the same bits, for
// every scale and both conventions.
// Tests compare apply_scale_markstein with IEEE division and multiplication
// over every float32 input on the GPU and a dense sweep on the host
// (tests/test_scale_division.cpp, which also checks the host's apply_scale).
// Scales apply to FP8 outputs only.
enum : std::uint32_t { kScaleFast = 0, kScaleIeeeDivision = 1, kScaleMultiply = 2 };
struct ScaleDivisor {
  float divisor;  // dividing: the scale s; multiplying: 0
  float recip;    // q0's factor: dividing: RN(1 / s); multiplying: the scale m
  float correct;  // the correction's factor: dividing: RN(1 / s); multiplying: +-0 (m's sign)
  // kScaleFast: dividing by s in [2^-60, 2^60] (the Markstein form);
  // kScaleIeeeDivision: dividing by any other s, v / s itself; kScaleMultiply.
  std::uint32_t mode;
};
ROPEKV_HD bool needs_ieee(ScaleDivisor d) { return d.mode == kScaleIeeeDivision; }
// Divisors for which the Markstein form is proven exact: [2^-60, 2^60]
// (float bits 0x21800000 .. 0x5d800000; negative and NaN bits fall outside).
ROPEKV_HD bool markstein_exact(float divisor) {
  return f32_bits(divisor) - 0x21800000u <= 0x5d800000u - 0x21800000u;
}
ROPEKV_HD ScaleDivisor make_divisor(float scale, ScaleConvention convention) {
  ScaleDivisor d;
  if (convention == ScaleConvention::kMultiply) {
    d.divisor = 0.0f;
    d.recip = scale;
    d.correct = (f32_bits(scale) & 0x80000000u) != 0 ? -0.0f : 0.0f;
    d.mode = kScaleMultiply;
  } else {
    d.divisor = scale;
    d.recip = 1.0f / scale;  // IEEE division: correctly rounded
    d.correct = d.recip;
    d.mode = markstein_exact(scale) ? kScaleFast : kScaleIeeeDivision;
  }
  return d;
}
// The Markstein form alone: the device's quantization step for a divisor
// that does not need_ieee (kernels test that once per group of elements or
// per launch, not per element); callable on the host for tests.
ROPEKV_HD float apply_scale_fast(float v, ScaleDivisor d) {
  constexpr float kMax = 3.40282347e38f;  // FLT_MAX
  const float q0 = v * d.recip;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 860
  // The same clamp in one instruction: min(|r|, FLT_MAX) with r's sign (a
  // NaN r gives +-FLT_MAX, which leaves q1 = q0 as -FLT_MAX does).
  float r;
  asm("min.xorsign.abs.f32 %0, %1, %2;" : "=f"(r) : "f"(::fmaf(d.divisor, q0, -v)), "f"(kMax));
  return ::fmaf(-r, d.correct, q0);
#elif defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  const float r = ::fminf(::fmaxf(::fmaf(d.divisor, q0, -v), -kMax), kMax);
  return ::fmaf(-r, d.correct, q0);
#else
  const float r = std::fmin(std::fmax(std::fmaf(d.divisor, q0, -v), -kMax), kMax);
  return std::fmaf(-r, d.correct, q0);
#endif
}
// The device's quantization step (see above); callable on the host for tests.
ROPEKV_HD float apply_scale_markstein(float v, ScaleDivisor d) {
  return needs_ieee(d) ? v / d.divisor : apply_scale_fast(v, d);  // v / s: IEEE division
}
ROPEKV_HD float apply_scale(float v, ScaleDivisor d) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return apply_scale_markstein(v, d);
#else
  return d.mode == kScaleMultiply ? v * d.recip : v / d.divisor;
#endif
}

}  // namespace detail
}  // namespace ropekv

namespace ropekv {
namespace detail {

// ------------------------------------------------------------- formats
// Storage type and conversions of each element format, for templates that a
// runtime DType is dispatched to (see dispatch.hpp).
template <DType D>
struct Format;
template <>
struct Format<DType::kFloat32> {
  using storage = float;
  static ROPEKV_HD float decode(storage v) { return v; }
  static ROPEKV_HD storage encode(float v) { return f32_from_bits(canonical_f32_bits(v)); }
};
template <>
struct Format<DType::kBFloat16> {
  using storage = std::uint16_t;
  static ROPEKV_HD float decode(storage v) { return bf16_to_f32(v); }
  static ROPEKV_HD storage encode(float v) { return f32_to_bf16(v); }
};
template <>
struct Format<DType::kFloat16> {
  using storage = std::uint16_t;
  static ROPEKV_HD float decode(storage v) { return f16_to_f32(v); }
  static ROPEKV_HD storage encode(float v) { return f32_to_f16(v); }
};
template <>
struct Format<DType::kFloat8E4M3FN> {
  using storage = std::uint8_t;
  static ROPEKV_HD storage encode(float v) { return f32_to_e4m3fn(v); }
};
template <>
struct Format<DType::kFloat8E5M2> {
  using storage = std::uint8_t;
  static ROPEKV_HD storage encode(float v) { return f32_to_e5m2(v); }
};
template <>
struct Format<DType::kFloat8E4M3FNUZ> {
  using storage = std::uint8_t;
  static ROPEKV_HD storage encode(float v) { return f32_to_e4m3fnuz(v); }
};

// The table's quantized flag of D, as a constant device code may read
// (nvcc evaluates a constexpr variable; it may not call dtype_info there).
template <DType D>
inline constexpr bool kQuantized = dtype_info(D).quantized;

// The stored value of `v` in output format D with scale divisor `d`
// (applied to quantized formats only).
template <DType D>
ROPEKV_HD typename Format<D>::storage store_value(float v, ScaleDivisor d) {
  return kQuantized<D> ? Format<D>::encode(apply_scale(v, d)) : Format<D>::encode(v);
}

}  // namespace detail
}  // namespace ropekv
