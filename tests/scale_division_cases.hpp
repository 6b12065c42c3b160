// Scales for the quantization-step tests (host strided sweep, device
// exhaustive sweep): typical FP8 calibration scales, powers of two, the ends
// of the range where the device's reciprocal-based division is proven exact
// ([2^-60, 2^60]), scales whose mantissa is all ones or has a single bit (the
// hard cases of reciprocal-based division), and scales outside that range
// (subnormal, tiny, huge, the extremes of float), which take IEEE division.
// The same list serves both conventions: a divisor s and a multiplier s.
#pragma once

#include <cstdint>
#include <cstring>

namespace ropekv_test {

inline float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

constexpr int kNumDivisionScales = 24;
inline float division_scale(int i) {
  const float fixed[kNumDivisionScales] = {
      1.0f, 0.5f, 3.0f, 0.1f, 0.0234375f, 1.0f / 448.0f, 7.3e-3f, 1.337f, 448.0f, 0x1p-60f, 0x1p60f,
      bits_to_float(0x3fffffffu),  // 1.99999988
      bits_to_float(0x3f800001u),  // 1 + 2^-23
      bits_to_float(0x3f7fffffu),  // 1 - 2^-24
      bits_to_float(0x3ef0a3d7u),  // 0.47
      bits_to_float(0x3c23d70au),  // 0.01
      // Outside [2^-60, 2^60]:
      0x1.16c2p-133f,              // subnormal (issue 11's case)
      bits_to_float(0x00000001u),  // the smallest subnormal, 2^-149
      0x1.fffffep-61f,             // just below 2^-60
      0x1.000002p+60f,             // just above 2^60
      0x1.8p-100f, 0x1.4p+100f,
      bits_to_float(0x00800000u),   // the smallest normal, 2^-126
      bits_to_float(0x7f7fffffu)};  // the largest float
  return fixed[i];
}

}  // namespace ropekv_test
