// The quantization step (core/detail/element_math.hpp, apply_scale) is, per
// scale convention, IEEE division by the scale or one IEEE multiplication by
// it. On the device it is evaluated by apply_scale_markstein: for divisors in
// [2^-60, 2^60] without a divide instruction (reciprocal + one Markstein
// correction), which must equal IEEE division bit for bit away from
// underflow/overflow and in every FP8 code everywhere; for every other
// divisor by IEEE division itself. This host test sweeps every 251st float32
// bit pattern (plus all specials) for each scale of scale_division_cases.hpp
// in both conventions, checking the device form and the host's apply_scale
// (the divide instruction) against IEEE arithmetic computed here; the CUDA
// test binaries sweep all 2^32 patterns on the GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "detail/element_math.hpp"
#include "scale_division_cases.hpp"

namespace {

namespace rd = ropekv::detail;
using ropekv::ScaleConvention;

struct Tally {
  std::uint64_t checked = 0, float_diff = 0, fp8_diff = 0, host_diff = 0;
  void add(const Tally& t) {
    checked += t.checked;
    float_diff += t.float_diff;
    fp8_diff += t.fp8_diff;
    host_diff += t.host_diff;
  }
};

bool same_float(float a, float b) {
  return rd::f32_bits(a) == rd::f32_bits(b) || (a != a && b != b);
}

bool in_markstein_range(float s) { return s >= 0x1p-60f && s <= 0x1p60f; }

void check_one(float x, float s, ScaleConvention c, const rd::ScaleDivisor& d, Tally& t) {
  ++t.checked;
  // IEEE arithmetic (no fast-math, no contraction in this project).
  const float want = c == ScaleConvention::kMultiply ? x * s : x / s;
  const float got = rd::apply_scale_markstein(x, d);
  const float host = rd::apply_scale(x, d);
  if (!same_float(host, want)) ++t.host_diff;
  if (!same_float(got, want)) {
    // Allowed only in the Markstein form (dividing by a scale in [2^-60,
    // 2^60]) where an intermediate underflows or overflows: inputs or
    // quotients below 2^-100 and quotients from 2^127 on, where no FP8 format
    // can tell the difference (zero / saturation). Everything else (the
    // multiplying convention, divisors outside the range) is IEEE exactly.
    const float ax = std::fabs(x), aq = std::fabs(want);
    const bool edge = ax < 0x1p-100f || aq < 0x1p-100f || aq >= 0x1p127f;
    if (!(c == ScaleConvention::kDivide && in_markstein_range(s) && edge)) ++t.float_diff;
  }
  if (rd::f32_to_e4m3fn(want) != rd::f32_to_e4m3fn(got) ||
      rd::f32_to_e5m2(want) != rd::f32_to_e5m2(got) ||
      rd::f32_to_e4m3fnuz(want) != rd::f32_to_e4m3fnuz(got))
    ++t.fp8_diff;
}

Tally sweep(float s, ScaleConvention c) {
  const rd::ScaleDivisor d = rd::make_divisor(s, c);
  Tally t;
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 251)
    check_one(ropekv_test::bits_to_float(std::uint32_t(u)), s, c, d, t);
  for (std::uint32_t special : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                0xffc00000u, 0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000001u})
    check_one(ropekv_test::bits_to_float(special), s, c, d, t);
  return t;
}

void sweep_all(ScaleConvention c, const char* what) {
  Tally total;
  for (int i = 0; i < ropekv_test::kNumDivisionScales; ++i) {
    const float s = ropekv_test::division_scale(i);
    const Tally t = sweep(s, c);
    EXPECT_EQ(t.float_diff, 0u) << what << " scale " << s;
    EXPECT_EQ(t.fp8_diff, 0u) << what << " scale " << s;
    EXPECT_EQ(t.host_diff, 0u) << what << " scale " << s;
    total.add(t);
  }
  std::printf(
      "[ scale ] %s, %d scales: %llu values checked against IEEE arithmetic: device form "
      "%llu float differences outside the allowed edges, %llu FP8 code differences; "
      "host apply_scale %llu differences\n",
      what, ropekv_test::kNumDivisionScales, static_cast<unsigned long long>(total.checked),
      static_cast<unsigned long long>(total.float_diff),
      static_cast<unsigned long long>(total.fp8_diff),
      static_cast<unsigned long long>(total.host_diff));
}

TEST(ScaleDivision, MatchesIeeeDivisionStridedSweep) {
  sweep_all(ScaleConvention::kDivide, "dividing");
}

TEST(ScaleMultiplication, MatchesIeeeMultiplicationStridedSweep) {
  sweep_all(ScaleConvention::kMultiply, "multiplying");
}

// A device scale is any float: zero, negative, infinite and NaN scales give
// IEEE's answers in the device form too (the host validates host scales).
TEST(ScaleDivision, AnyDeviceScaleIsIeee) {
  for (ScaleConvention c : {ScaleConvention::kDivide, ScaleConvention::kMultiply}) {
    for (float s : {0.0f, -0.0f, -3.0f, -0x1p-140f, INFINITY, -INFINITY, NAN}) {
      const rd::ScaleDivisor d = rd::make_divisor(s, c);
      for (float x : {0.0f, -0.0f, 1.5f, -7.0f, 0x1p-140f, 3.0e38f, INFINITY, -INFINITY, NAN}) {
        const float want = c == ScaleConvention::kMultiply ? x * s : x / s;
        EXPECT_TRUE(same_float(rd::apply_scale_markstein(x, d), want))
            << "x " << x << (c == ScaleConvention::kMultiply ? " * " : " / ") << s;
        EXPECT_TRUE(same_float(rd::apply_scale(x, d), want))
            << "host: x " << x << (c == ScaleConvention::kMultiply ? " * " : " / ") << s;
      }
    }
  }
}

// The two conventions are different operations: dividing by s and
// multiplying by RN(1/s) differ for most s, so neither is emulated
// by the other. Count how often over a sweep, for a typical scale.
TEST(ScaleDivision, ConventionsAreDistinct) {
  const float s = 0.0234375f * 1.1f;  // a scale whose reciprocal is not exact
  const rd::ScaleDivisor div = rd::make_divisor(s, ScaleConvention::kDivide);
  const rd::ScaleDivisor mul = rd::make_divisor(1.0f / s, ScaleConvention::kMultiply);
  std::uint64_t differ = 0, n = 0;
  for (std::uint32_t u = 0x3f800000u; u < 0x40000000u; u += 97, ++n)  // [1, 2)
    differ += rd::f32_bits(rd::apply_scale(ropekv_test::bits_to_float(u), div)) !=
              rd::f32_bits(rd::apply_scale(ropekv_test::bits_to_float(u), mul));
  EXPECT_GT(differ, n / 10) << differ << " of " << n;
}

TEST(ScaleDivision, SignedZeroAndInfinity) {
  for (ScaleConvention c : {ScaleConvention::kDivide, ScaleConvention::kMultiply}) {
    const rd::ScaleDivisor d = rd::make_divisor(c == ScaleConvention::kDivide ? 0.1f : 10.0f, c);
    for (auto f : {&rd::apply_scale, &rd::apply_scale_markstein}) {
      EXPECT_EQ(rd::f32_bits(f(-0.0f, d)), 0x80000000u);
      EXPECT_EQ(rd::f32_bits(f(0.0f, d)), 0x00000000u);
      EXPECT_EQ(f(INFINITY, d), INFINITY);
      EXPECT_EQ(f(-INFINITY, d), -INFINITY);
      EXPECT_TRUE(std::isnan(f(NAN, d)));
      EXPECT_EQ(f(3.0e38f, d), INFINITY);  // overflow rounds to inf
    }
  }
}

}  // namespace
