// The library's software conversions (core/detail/element_math.hpp) against
// the oracle's nearest-code search (tests/oracle.cpp), for every float32 in a
// dense neighbourhood of every code value and of every rounding midpoint,
// around the saturation/overflow thresholds, through the subnormals, and for
// zeros, infinities and NaNs of both signs with several payloads; plus a
// strided sweep over all 2^32 patterns. The Oracle.* tests pin the oracle
// itself to hand-computed facts of each format, so that the two definitions
// cannot agree on a shared mistake.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "detail/element_math.hpp"
#include "oracle.hpp"

namespace {

namespace rd = ropekv::detail;
namespace orc = ropekv_oracle;
using ropekv::DType;

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

using Encoder = std::function<std::uint32_t(float)>;

Encoder library_encoder(DType dtype) {
  switch (dtype) {
    case DType::kFloat8E4M3FN: return [](float f) { return std::uint32_t(rd::f32_to_e4m3fn(f)); };
    case DType::kFloat8E5M2: return [](float f) { return std::uint32_t(rd::f32_to_e5m2(f)); };
    case DType::kFloat8E4M3FNUZ:
      return [](float f) { return std::uint32_t(rd::f32_to_e4m3fnuz(f)); };
    case DType::kBFloat16: return [](float f) { return std::uint32_t(rd::f32_to_bf16(f)); };
    case DType::kFloat16: return [](float f) { return std::uint32_t(rd::f32_to_f16(f)); };
    default: break;
  }
  return nullptr;
}

// Compares the library with the oracle on float inputs; keeps the first few
// disagreements for the failure message.
class Sweep {
 public:
  explicit Sweep(DType dtype) : dtype_(dtype), lib_(library_encoder(dtype)) {}

  void check(float f) {
    ++checked_;
    const std::uint32_t got = lib_(f);
    const std::uint32_t want = orc::encode(dtype_, double(f));
    if (got != want) {
      if (mismatches_ < 10) {
        char b[160];
        std::snprintf(b, sizeof(b), "\n  input %.9g (bits 0x%08x): library 0x%x, oracle 0x%x",
                      double(f), to_bits(f), got, want);
        first_ += b;
      }
      ++mismatches_;
    }
  }
  // Both signs of every float within `ulps` (in bit patterns) of |point|,
  // never wrapping below zero or past infinity into the NaNs.
  void around(float point, int ulps) {
    const std::int64_t m = to_bits(point) & 0x7fffffffu;
    for (std::int64_t k = -ulps; k <= ulps; ++k) {
      const std::int64_t b = m + k;
      if (b < 0 || b > 0x7f800000) continue;
      check(from_bits(std::uint32_t(b)));
      check(from_bits(std::uint32_t(b) | 0x80000000u));
    }
  }
  void expect_clean() const {
    EXPECT_GT(checked_, 0u);
    EXPECT_EQ(mismatches_, 0u) << ropekv::to_string(dtype_) << ": " << mismatches_ << " of "
                               << checked_ << " inputs differ from the oracle:" << first_;
    std::printf("[ %s ] %llu float32 inputs, library == oracle on all but %llu\n",
                ropekv::to_string(dtype_), static_cast<unsigned long long>(checked_),
                static_cast<unsigned long long>(mismatches_));
  }

 private:
  DType dtype_;
  Encoder lib_;
  std::uint64_t checked_ = 0, mismatches_ = 0;
  std::string first_;
};

// NaNs of both signs, quiet and signalling, several payloads.
const std::uint32_t kNanBits[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                                  0x7fffffffu, 0xffffffffu, 0x7fa00000u, 0xffa00000u,
                                  0x7fc00001u, 0xff812345u, 0x7fbfffffu, 0xffd55555u};

// Values where saturation, overflow and underflow happen, and the float
// specials; swept with every FP8 and 16-bit format.
void sweep_specials(Sweep& s, int ulps) {
  s.around(0.0f, ulps);                               // +-0 and the smallest subnormals
  s.around(std::numeric_limits<float>::min(), ulps);  // float's smallest normal
  s.around(std::numeric_limits<float>::denorm_min() * 4096.0f, ulps);
  s.around(std::numeric_limits<float>::max(), ulps);  // and +-inf
  s.around(std::numeric_limits<float>::infinity(), ulps);
  for (float p : {1e10f, 1e20f, 1e30f, 131072.0f, 65504.0f, 65520.0f, 65536.0f, 57344.0f, 61440.0f,
                  114688.0f, 448.0f, 464.0f, 480.0f, 896.0f, 240.0f, 248.0f, 256.0f, 480.0f})
    s.around(p, ulps);
  // The float subnormals, every 4099th pattern.
  for (std::uint32_t b = 1; b < 0x00800000u; b += 4099) {
    s.check(from_bits(b));
    s.check(from_bits(b | 0x80000000u));
  }
  for (std::uint32_t b : kNanBits) s.check(from_bits(b));
}

// Every FP8 code value and every midpoint between two adjacent values of one
// sign, +-`ulps` floats around each, plus the midpoint between +-max and the
// value the next code would have (where an unsaturated RNE would round away).
void fp8_dense_sweep(DType dtype, int ulps) {
  Sweep s(dtype);
  std::vector<double> values;  // non-negative, ascending by magnitude code
  for (std::uint32_t m = 0; m < 0x80u; ++m) {
    const double v = orc::decode(dtype, m);
    if (std::isnan(v) || std::isinf(v)) break;
    values.push_back(v);
  }
  ASSERT_GE(values.size(), 100u);
  for (std::size_t i = 0; i < values.size(); ++i) {
    s.around(float(values[i]), ulps);
    const double next = i + 1 < values.size()
                            ? values[i + 1]
                            : values[i] + (values[i] - values[i - 1]);  // beyond max
    const double mid = (values[i] + next) / 2;
    ASSERT_EQ(double(float(mid)), mid) << "midpoint not exact in float";
    s.around(float(mid), ulps);
  }
  s.around(float(2 * values.back()), ulps);
  sweep_specials(s, ulps);
  s.expect_clean();
}

TEST(Encoders, E4M3FN_DenseSweep) { fp8_dense_sweep(DType::kFloat8E4M3FN, 512); }
TEST(Encoders, E5M2_DenseSweep) { fp8_dense_sweep(DType::kFloat8E5M2, 512); }
TEST(Encoders, E4M3FNUZ_DenseSweep) { fp8_dense_sweep(DType::kFloat8E4M3FNUZ, 512); }

// Every finite bf16 / fp16 value and every midpoint to the next value (for the
// largest finite value: the midpoint to where infinity would be, IEEE's
// overflow threshold), +-`ulps` floats around each, both signs.
void half_dense_sweep(DType dtype, int ulps) {
  Sweep s(dtype);
  const std::uint32_t sign_bit = 0x8000u;
  std::vector<double> values;
  for (std::uint32_t m = 0; m < sign_bit; ++m) {
    const double v = orc::decode(dtype, m);
    if (std::isnan(v)) break;
    values.push_back(std::isinf(v) ? (dtype == DType::kFloat16 ? 65536.0 : std::ldexp(1.0, 128))
                                   : v);
    if (std::isinf(v)) break;
  }
  for (std::size_t i = 0; i + 1 < values.size(); ++i) {
    s.around(float(values[i]), ulps);
    const double mid = (values[i] + values[i + 1]) / 2;
    if (mid < double(std::numeric_limits<float>::max())) {
      ASSERT_EQ(double(float(mid)), mid) << "midpoint not exact in float";
      s.around(float(mid), ulps);
    }
  }
  sweep_specials(s, ulps);
  s.expect_clean();
}

TEST(Encoders, BF16_DenseSweep) { half_dense_sweep(DType::kBFloat16, 64); }
TEST(Encoders, F16_DenseSweep) { half_dense_sweep(DType::kFloat16, 64); }

// Every 251st float32 bit pattern (both signs, every exponent, every residue
// of the low mantissa bits over the sweep), all formats: 17 million inputs
// each, about a second in all. (The small-float encoder was also compared
// with the oracle over all 2^32 inputs, once, when its rounding changed to
// the one-addition form: 0 differences in each format; about 2 minutes on
// two cores, too long for every test run.)
TEST(Encoders, AllFormats_StridedSweep) {
  for (DType d : {DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E4M3FNUZ,
                  DType::kBFloat16, DType::kFloat16}) {
    Sweep s(d);
    for (std::uint64_t u = 0; u <= 0xffffffffull; u += 251) s.check(from_bits(std::uint32_t(u)));
    s.expect_clean();
  }
}

// NaN of either sign and any payload gives the one canonical, positive code.
TEST(Encoders, NaNIsCanonical) {
  for (std::uint32_t b : kNanBits) {
    const float f = from_bits(b);
    EXPECT_EQ(rd::f32_to_e4m3fn(f), 0x7fu) << std::hex << b;
    EXPECT_EQ(rd::f32_to_e5m2(f), 0x7fu) << std::hex << b;
    EXPECT_EQ(rd::f32_to_e4m3fnuz(f), 0x80u) << std::hex << b;
    EXPECT_EQ(rd::f32_to_bf16(f), 0x7fc0u) << std::hex << b;
    EXPECT_EQ(rd::f32_to_f16(f), 0x7e00u) << std::hex << b;
  }
}

// Decoding of every bf16 and fp16 code (the library's input path) equals the
// oracle's field-by-field decoding, sign of zero included.
TEST(Encoders, BF16ToF32_AllCodes) {
  int bad = 0;
  for (std::uint32_t c = 0; c < 0x10000u; ++c) {
    const float got = rd::bf16_to_f32(std::uint16_t(c));
    const double want = orc::decode(DType::kBFloat16, c);
    const bool ok = std::isnan(want)
                        ? std::isnan(got)
                        : (double(got) == want && std::signbit(got) == std::signbit(want));
    if (!ok && ++bad <= 10)
      ADD_FAILURE() << "bf16 0x" << std::hex << c << ": library " << got << ", oracle " << want;
  }
  EXPECT_EQ(bad, 0);
}

TEST(Encoders, F16ToF32_AllCodes) {
  int bad = 0;
  for (std::uint32_t c = 0; c < 0x10000u; ++c) {
    const float got = rd::f16_to_f32(std::uint16_t(c));
    const double want = orc::decode(DType::kFloat16, c);
    const bool ok = std::isnan(want)
                        ? std::isnan(got)
                        : (double(got) == want && std::signbit(got) == std::signbit(want));
    if (!ok && ++bad <= 10)
      ADD_FAILURE() << "fp16 0x" << std::hex << c << ": library " << got << ", oracle " << want;
  }
  EXPECT_EQ(bad, 0);
}

// ------------------------------------------------------------- the oracle itself
// Facts of each format, computed by hand from its definition (OCP FP8 spec,
// AMD's fnuz variant, IEEE 754 binary16, bfloat16).
TEST(Oracle, DecodesHandPickedCodes) {
  struct Case {
    DType dtype;
    std::uint32_t code;
    double value;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const Case cases[] = {
      // e4m3fn: bias 7, 3 mantissa bits, no inf, NaN S.1111.111
      {DType::kFloat8E4M3FN, 0x00, 0.0},
      {DType::kFloat8E4M3FN, 0x01, 0x1p-9},
      {DType::kFloat8E4M3FN, 0x07, 7 * 0x1p-9},
      {DType::kFloat8E4M3FN, 0x08, 0x1p-6},
      {DType::kFloat8E4M3FN, 0x38, 1.0},
      {DType::kFloat8E4M3FN, 0x39, 1.125},
      {DType::kFloat8E4M3FN, 0x7E, 448.0},
      {DType::kFloat8E4M3FN, 0x78, 256.0},
      {DType::kFloat8E4M3FN, 0xFE, -448.0},
      {DType::kFloat8E4M3FN, 0xB8, -1.0},
      // e5m2: bias 15, IEEE specials
      {DType::kFloat8E5M2, 0x01, 0x1p-16},
      {DType::kFloat8E5M2, 0x04, 0x1p-14},
      {DType::kFloat8E5M2, 0x3C, 1.0},
      {DType::kFloat8E5M2, 0x7B, 57344.0},
      {DType::kFloat8E5M2, 0x7C, inf},
      {DType::kFloat8E5M2, 0xFC, -inf},
      // e4m3fnuz: bias 8, no inf, no -0, NaN 0x80
      {DType::kFloat8E4M3FNUZ, 0x01, 0x1p-10},
      {DType::kFloat8E4M3FNUZ, 0x40, 1.0},
      {DType::kFloat8E4M3FNUZ, 0x7F, 240.0},
      {DType::kFloat8E4M3FNUZ, 0xFF, -240.0},
      {DType::kFloat8E4M3FNUZ, 0x08, 0x1p-7},
      // bf16, fp16, fp32
      {DType::kBFloat16, 0x3F80, 1.0},
      {DType::kBFloat16, 0x7F7F, 0x1.FEp127},
      {DType::kBFloat16, 0x0001, 0x1p-133},
      {DType::kBFloat16, 0xFF80, -inf},
      {DType::kFloat16, 0x3C00, 1.0},
      {DType::kFloat16, 0x7BFF, 65504.0},
      {DType::kFloat16, 0x0001, 0x1p-24},
      {DType::kFloat16, 0x7C00, inf},
      {DType::kFloat16, 0xC000, -2.0},
      {DType::kFloat32, 0x3F800000u, 1.0},
      {DType::kFloat32, 0x00000001u, 0x1p-149},
      {DType::kFloat32, 0x7F7FFFFFu, 0x1.FFFFFEp127},
  };
  for (const Case& c : cases)
    EXPECT_EQ(orc::decode(c.dtype, c.code), c.value)
        << ropekv::to_string(c.dtype) << " 0x" << std::hex << c.code;
  for (DType d : {DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E4M3FNUZ,
                  DType::kBFloat16, DType::kFloat16, DType::kFloat32})
    EXPECT_TRUE(std::isnan(orc::decode(d, orc::canonical_nan(d)))) << ropekv::to_string(d);
  EXPECT_TRUE(std::isnan(orc::decode(DType::kFloat8E4M3FN, 0xFF)));
  EXPECT_TRUE(std::isnan(orc::decode(DType::kFloat8E4M3FNUZ, 0x80)));
  EXPECT_EQ(orc::decode(DType::kFloat8E4M3FNUZ, 0x00), 0.0);
  EXPECT_EQ(orc::max_finite(DType::kFloat8E4M3FN), 448.0);
  EXPECT_EQ(orc::max_finite(DType::kFloat8E5M2), 57344.0);
  EXPECT_EQ(orc::max_finite(DType::kFloat8E4M3FNUZ), 240.0);
  EXPECT_EQ(orc::max_finite(DType::kFloat16), 65504.0);
  // 256 codes: e4m3fn has 2 NaNs, e5m2 2 infinities and 6 NaNs, e4m3fnuz 1 NaN.
  auto count = [](DType d, bool (*pred)(double)) {
    int n = 0;
    for (std::uint32_t c = 0; c < 256; ++c) n += pred(orc::decode(d, c)) ? 1 : 0;
    return n;
  };
  auto is_nan = [](double v) { return std::isnan(v); };
  auto is_inf = [](double v) { return std::isinf(v); };
  EXPECT_EQ(count(DType::kFloat8E4M3FN, is_nan), 2);
  EXPECT_EQ(count(DType::kFloat8E4M3FN, is_inf), 0);
  EXPECT_EQ(count(DType::kFloat8E5M2, is_nan), 6);
  EXPECT_EQ(count(DType::kFloat8E5M2, is_inf), 2);
  EXPECT_EQ(count(DType::kFloat8E4M3FNUZ, is_nan), 1);
  EXPECT_EQ(count(DType::kFloat8E4M3FNUZ, is_inf), 0);
}

TEST(Oracle, EncodesHandPickedValues) {
  struct Case {
    DType dtype;
    double value;
    std::uint32_t code;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Case cases[] = {
      // ties to even: 1.0625 is halfway between 1.0 (0x38) and 1.125 (0x39)
      {DType::kFloat8E4M3FN, 1.0625, 0x38},
      {DType::kFloat8E4M3FN, 1.1875, 0x3A},
      {DType::kFloat8E4M3FN, 1.0625000001, 0x39},
      {DType::kFloat8E4M3FN, -1.0625, 0xB8},
      // subnormals: halfway between 0 and 2^-9 -> 0; 1.5 * 2^-9 -> 2 * 2^-9
      {DType::kFloat8E4M3FN, 0x1p-10, 0x00},
      {DType::kFloat8E4M3FN, 1.5 * 0x1p-9, 0x02},
      {DType::kFloat8E4M3FN, -0x1p-11, 0x80},
      {DType::kFloat8E4M3FN, -0.0, 0x80},
      // saturation, inf included
      {DType::kFloat8E4M3FN, 464.0, 0x7E},
      {DType::kFloat8E4M3FN, 1e9, 0x7E},
      {DType::kFloat8E4M3FN, inf, 0x7E},
      {DType::kFloat8E4M3FN, -inf, 0xFE},
      {DType::kFloat8E4M3FN, nan, 0x7F},
      {DType::kFloat8E4M3FN, -nan, 0x7F},
      {DType::kFloat8E5M2, 61440.0, 0x7B},
      {DType::kFloat8E5M2, inf, 0x7B},
      {DType::kFloat8E5M2, -1e30, 0xFB},
      {DType::kFloat8E5M2, 0x1p-17, 0x00},
      {DType::kFloat8E5M2, 0x1.8p-16, 0x02},
      {DType::kFloat8E5M2, 1.125, 0x3C},
      {DType::kFloat8E5M2, nan, 0x7F},
      {DType::kFloat8E4M3FNUZ, -0.0, 0x00},
      {DType::kFloat8E4M3FNUZ, -0x1p-12, 0x00},
      {DType::kFloat8E4M3FNUZ, 248.0, 0x7F},
      {DType::kFloat8E4M3FNUZ, -inf, 0xFF},
      {DType::kFloat8E4M3FNUZ, nan, 0x80},
      {DType::kFloat8E4M3FNUZ, 1.0, 0x40},
      // IEEE overflow: 65520 is halfway between 65504 and 2^16 -> inf (even)
      {DType::kFloat16, 65519.99, 0x7BFF},
      {DType::kFloat16, 65520.0, 0x7C00},
      {DType::kFloat16, -65520.0, 0xFC00},
      {DType::kFloat16, 1.0 + 0x1p-11, 0x3C00},
      {DType::kFloat16, 1.0 + 3 * 0x1p-11, 0x3C02},
      {DType::kFloat16, 0x1p-25, 0x0000},
      {DType::kFloat16, nan, 0x7E00},
      {DType::kFloat16, -0.0, 0x8000},
      {DType::kBFloat16, 1.0 + 0x1p-8, 0x3F80},
      {DType::kBFloat16, 1.0 + 3 * 0x1p-8, 0x3F82},
      {DType::kBFloat16, 0x1.FFp127, 0x7F80},
      {DType::kBFloat16, -nan, 0x7FC0},
      {DType::kFloat32, 1.0 + 0x1p-24, 0x3F800000u},
      {DType::kFloat32, 1.0 + 3 * 0x1p-24, 0x3F800002u},
      {DType::kFloat32, 0x1.FFFFFFp127, 0x7F800000u},
      {DType::kFloat32, 0x1p-150, 0x00000000u},
      {DType::kFloat32, 0x1.8p-149, 0x00000002u},
      {DType::kFloat32, -nan, 0x7FC00000u},
  };
  for (const Case& c : cases)
    EXPECT_EQ(orc::encode(c.dtype, c.value), c.code)
        << ropekv::to_string(c.dtype) << " " << c.value;
  // Every code of every 8/16-bit format round-trips (NaN to the canonical NaN).
  for (DType d : {DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E4M3FNUZ,
                  DType::kBFloat16, DType::kFloat16}) {
    const std::uint32_t n = 1u << orc::bits_of(d);
    for (std::uint32_t c = 0; c < n; ++c) {
      const double v = orc::decode(d, c);
      const std::uint32_t want = std::isnan(v)
                                     ? orc::canonical_nan(d)
                                     : (std::isinf(v) && orc::is_fp8(d) ? orc::encode(d, v) : c);
      ASSERT_EQ(orc::encode(d, v), want) << ropekv::to_string(d) << " 0x" << std::hex << c;
    }
  }
}

TEST(Oracle, OrderKeyAndSteps) {
  const DType d = DType::kFloat8E4M3FN;
  EXPECT_LT(orc::order_key(d, 0x80), orc::order_key(d, 0x00));  // -0 just below +0
  EXPECT_LT(orc::order_key(d, 0x81), orc::order_key(d, 0x80));
  EXPECT_EQ(orc::step_distance(d, 0x80, 0x00), 0);
  EXPECT_EQ(orc::step_distance(d, 0x81, 0x01), 2);
  EXPECT_EQ(orc::step_distance(d, 0x38, 0x3A), 2);
  EXPECT_EQ(orc::step_distance(DType::kFloat32, 0x3F800000u, 0x3F800003u), 3);
}

}  // namespace
