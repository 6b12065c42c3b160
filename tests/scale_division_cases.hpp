// Scales for the division tests (host strided sweep, device exhaustive
// sweep): typical FP8 calibration scales, powers of two, extremes, and
// scales whose mantissa is all ones or has a single bit (the hard cases of
// reciprocal-based division).
#pragma once

#include <cstdint>
#include <cstring>

namespace ropekv_test {

inline float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

constexpr int kNumDivisionScales = 16;
inline float division_scale(int i) {
  const float fixed[kNumDivisionScales] = {
      1.0f, 0.5f, 3.0f, 0.1f, 0.0234375f, 1.0f / 448.0f, 7.3e-3f, 1.337f, 448.0f, 0x1p-60f, 0x1p60f,
      bits_to_float(0x3fffffffu),  // 1.99999988
      bits_to_float(0x3f800001u),  // 1 + 2^-23
      bits_to_float(0x3f7fffffu),  // 1 - 2^-24
      bits_to_float(0x3ef0a3d7u),  // 0.47
      bits_to_float(0x3c23d70au)}; // 0.01
  return fixed[i];
}

}  // namespace ropekv_test
