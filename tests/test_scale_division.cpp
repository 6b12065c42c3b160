// The quantization step (core/detail/element_math.hpp, apply_scale) is IEEE
// division by the scale. On the device it is evaluated without a divide
// instruction (apply_scale_markstein: reciprocal + one Markstein correction);
// for scales in [2^-60, 2^60] that form must equal IEEE division: bit for bit
// away from underflow/overflow, and in every FP8 code everywhere. This host
// test sweeps every 251st float32 bit pattern (plus all specials) for each
// scale; the CUDA test binary sweeps all 2^32 patterns on the GPU (where
// apply_scale is the Markstein form). On the host apply_scale is the divide
// instruction itself, which the same sweep checks bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "detail/element_math.hpp"
#include "scale_division_cases.hpp"

namespace {

namespace rd = ropekv::detail;

struct Tally {
  std::uint64_t checked = 0, float_diff = 0, fp8_diff = 0, host_diff = 0;
};

void check_one(float x, float s, const rd::ScaleDivisor& d, Tally& t) {
  ++t.checked;
  const float want = x / s;  // IEEE division (no fast-math in this project)
  const float got = rd::apply_scale_markstein(x, d);
  // The host's apply_scale: IEEE division, every bit (NaN: any NaN).
  const float host = rd::apply_scale(x, d);
  if (rd::f32_bits(host) != rd::f32_bits(want) && !(host != host && want != want)) ++t.host_diff;
  const std::uint32_t wb = rd::f32_bits(want), gb = rd::f32_bits(got);
  const bool both_nan = want != want && got != got;
  if (wb != gb && !both_nan) {
    // Allowed only where an intermediate underflows or overflows: inputs or
    // quotients below 2^-100 and quotients from 2^127 on, where no FP8
    // format can tell the difference (zero / saturation).
    const float ax = std::fabs(x), aq = std::fabs(want);
    if (!(ax < 0x1p-100f || aq < 0x1p-100f || aq >= 0x1p127f)) ++t.float_diff;
  }
  if (rd::f32_to_e4m3fn(want) != rd::f32_to_e4m3fn(got) ||
      rd::f32_to_e5m2(want) != rd::f32_to_e5m2(got) ||
      rd::f32_to_e4m3fnuz(want) != rd::f32_to_e4m3fnuz(got))
    ++t.fp8_diff;
}

TEST(ScaleDivision, MatchesIeeeDivisionStridedSweep) {
  Tally total;
  for (int i = 0; i < ropekv_test::kNumDivisionScales; ++i) {
    const float s = ropekv_test::division_scale(i);
    const rd::ScaleDivisor d = rd::make_divisor(s);
    Tally t;
    for (std::uint64_t u = 0; u <= 0xffffffffull; u += 251)
      check_one(ropekv_test::bits_to_float(std::uint32_t(u)), s, d, t);
    for (std::uint32_t special : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                  0xffc00000u, 0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000001u})
      check_one(ropekv_test::bits_to_float(special), s, d, t);
    EXPECT_EQ(t.float_diff, 0u) << "scale " << s;
    EXPECT_EQ(t.fp8_diff, 0u) << "scale " << s;
    EXPECT_EQ(t.host_diff, 0u) << "scale " << s;
    total.checked += t.checked;
    total.float_diff += t.float_diff;
    total.fp8_diff += t.fp8_diff;
    total.host_diff += t.host_diff;
  }
  std::printf("[ division ] %llu quotients checked against IEEE division: Markstein form "
              "%llu float differences above 2^-100, %llu FP8 code differences; host "
              "apply_scale %llu differences\n",
              static_cast<unsigned long long>(total.checked),
              static_cast<unsigned long long>(total.float_diff),
              static_cast<unsigned long long>(total.fp8_diff),
              static_cast<unsigned long long>(total.host_diff));
}

TEST(ScaleDivision, SignedZeroAndInfinity) {
  const rd::ScaleDivisor d = rd::make_divisor(0.1f);
  for (auto f : {&rd::apply_scale, &rd::apply_scale_markstein}) {
    EXPECT_EQ(rd::f32_bits(f(-0.0f, d)), 0x80000000u);
    EXPECT_EQ(rd::f32_bits(f(0.0f, d)), 0x00000000u);
    EXPECT_EQ(f(INFINITY, d), INFINITY);
    EXPECT_EQ(f(-INFINITY, d), -INFINITY);
    EXPECT_TRUE(std::isnan(f(NAN, d)));
    EXPECT_EQ(f(3.0e38f, d), INFINITY);  // overflow rounds to inf
  }
}

}  // namespace
