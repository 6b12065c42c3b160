// The test oracle (see oracle.hpp). Independent of core/detail by design:
// nothing here is shared with the library but the public Arguments struct.
// This file: the formats' element math; the op (reference()) is in oracle_reference.cpp.
#include "oracle.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "oracle_internal.hpp"

namespace ropekv_oracle {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ------------------------------------------------------------- format fields
// Where a format keeps its specials.
enum class Specials {
  kIeee,  // exponent all ones: infinity (mantissa 0) or NaN
  kFn,    // e4m3fn: no infinity; only S.1111.111 is NaN
  kFnuz,  // e4m3fnuz: no infinity, no -0; only 0x80 (the "-0" pattern) is NaN
};

struct FormatInfo {
  DType dtype;
  int exp_bits, man_bits, bias;
  Specials specials;
  bool saturates;  // FP8: finite overflow and inf saturate to +-max
  std::uint32_t nan_code;
};

const FormatInfo& info(DType dtype) {
  static const FormatInfo kInfos[] = {
      {DType::kFloat8E4M3FN, 4, 3, 7, Specials::kFn, true, 0x7Fu},
      {DType::kFloat8E5M2, 5, 2, 15, Specials::kIeee, true, 0x7Fu},
      {DType::kFloat8E4M3FNUZ, 4, 3, 8, Specials::kFnuz, true, 0x80u},
      {DType::kBFloat16, 8, 7, 127, Specials::kIeee, false, 0x7FC0u},
      {DType::kFloat16, 5, 10, 15, Specials::kIeee, false, 0x7E00u},
      {DType::kFloat32, 8, 23, 127, Specials::kIeee, false, 0x7FC00000u},
  };
  for (const FormatInfo& f : kInfos)
    if (f.dtype == dtype) return f;
  throw std::invalid_argument(std::string("oracle: not a float output format: ") +
                              ropekv::to_string(dtype));
}

int total_bits(const FormatInfo& f) { return 1 + f.exp_bits + f.man_bits; }

// The value of `code`, straight from its sign, exponent and mantissa fields.
double decode_fields(const FormatInfo& f, std::uint32_t code) {
  const int bits = total_bits(f);
  const bool negative = ((code >> (bits - 1)) & 1u) != 0;
  const std::uint32_t e = (code >> f.man_bits) & ((1u << f.exp_bits) - 1u);
  const std::uint32_t m = code & ((1u << f.man_bits) - 1u);
  const std::uint32_t e_all = (1u << f.exp_bits) - 1u;
  const std::uint32_t m_all = (1u << f.man_bits) - 1u;
  switch (f.specials) {
    case Specials::kIeee:
      if (e == e_all) return m != 0 ? kNaN : (negative ? -kInf : kInf);
      break;
    case Specials::kFn:
      if (e == e_all && m == m_all) return kNaN;
      break;
    case Specials::kFnuz:
      if (negative && e == 0 && m == 0) return kNaN;
      break;
  }
  double magnitude;
  if (e == 0) {  // subnormal: 0.m * 2^(1 - bias)
    magnitude = std::ldexp(double(m), 1 - f.bias - f.man_bits);
  } else {  // normal: 1.m * 2^(e - bias)
    magnitude = std::ldexp(double((1u << f.man_bits) | m), int(e) - f.bias - f.man_bits);
  }
  return negative ? -magnitude : magnitude;
}

// The non-negative values of a format with at most 16 bits, indexed by
// magnitude code (the code without its sign bit), ascending. The last entry
// is the largest finite value for saturating formats; for IEEE formats it is
// infinity, entered with the value 2^(emax+1) that the next binade would
// start at, so that nearest-with-ties-to-even gives IEEE's overflow rule.
struct Table {
  const FormatInfo* f = nullptr;
  std::vector<double> decoded;    // every code -> value (2^bits entries)
  std::vector<double> magnitude;  // magnitude code -> value, ascending
};

Table build_table(DType dtype) {
  Table t;
  t.f = &info(dtype);
  const int bits = total_bits(*t.f);
  t.decoded.resize(std::size_t(1) << bits);
  for (std::uint32_t c = 0; c < (1u << bits); ++c) t.decoded[c] = decode_fields(*t.f, c);
  const std::uint32_t sign_bit = 1u << (bits - 1);
  for (std::uint32_t m = 0; m < sign_bit; ++m) {
    const double v = t.decoded[m];
    if (std::isnan(v)) break;  // e4m3fn's 0x7F; IEEE NaNs follow infinity
    if (std::isinf(v)) {       // e5m2 saturates instead: its table ends at the largest finite value
      if (!t.f->saturates)
        t.magnitude.push_back(std::ldexp(1.0, (1 << (t.f->exp_bits - 1))));  // 2^(emax+1)
      break;
    }
    t.magnitude.push_back(v);
  }
  for (std::size_t i = 1; i < t.magnitude.size(); ++i)
    if (!(t.magnitude[i - 1] < t.magnitude[i]))
      throw std::logic_error("oracle: format table not ascending");
  return t;
}

const Table& table(DType dtype) {
  static const Table kE4m3fn = build_table(DType::kFloat8E4M3FN);
  static const Table kE5m2 = build_table(DType::kFloat8E5M2);
  static const Table kE4m3fnuz = build_table(DType::kFloat8E4M3FNUZ);
  static const Table kBf16 = build_table(DType::kBFloat16);
  static const Table kF16 = build_table(DType::kFloat16);
  switch (dtype) {
    case DType::kFloat8E4M3FN: return kE4m3fn;
    case DType::kFloat8E5M2: return kE5m2;
    case DType::kFloat8E4M3FNUZ: return kE4m3fnuz;
    case DType::kBFloat16: return kBf16;
    case DType::kFloat16: return kF16;
    default: break;
  }
  throw std::invalid_argument("oracle: no table for this dtype");
}

// Of two adjacent magnitude codes lo < hi with values vlo < a < vhi, the
// nearer; ties to the even code. The midpoint of two adjacent values of these
// formats (or of two adjacent floats) is exact in double.
std::uint32_t nearer(std::uint32_t lo, double vlo, std::uint32_t hi, double vhi, double a) {
  const double mid = (vlo + vhi) / 2;
  if (a < mid) return lo;
  if (a > mid) return hi;
  return (lo % 2 == 0) ? lo : hi;
}

std::uint32_t encode_table(const Table& t, double v) {
  const FormatInfo& f = *t.f;
  if (std::isnan(v)) return f.nan_code;
  const std::uint32_t sign_bit = 1u << (total_bits(f) - 1);
  const bool negative = std::signbit(v);
  double a = std::fabs(v);
  if (f.saturates) a = std::min(a, t.magnitude.back());
  std::uint32_t m;
  if (a >= t.magnitude.back()) {
    m = std::uint32_t(t.magnitude.size() - 1);
  } else {
    // The last value <= a, and the next one.
    const auto it = std::upper_bound(t.magnitude.begin(), t.magnitude.end(), a);
    const std::uint32_t lo = std::uint32_t(it - t.magnitude.begin()) - 1u;
    m = t.magnitude[lo] == a ? lo : nearer(lo, t.magnitude[lo], lo + 1, t.magnitude[lo + 1], a);
  }
  if (f.specials == Specials::kFnuz && m == 0) return 0;  // no negative zero
  return negative ? (sign_bit | m) : m;
}

// fp32: the same rule, searching the two floats around |v| with nextafter
// (2^32 codes are too many for a table; the C++ double->float conversion is
// only used as a starting guess).
std::uint32_t encode_f32(double v) {
  if (std::isnan(v)) return 0x7FC00000u;
  const std::uint32_t sign = std::signbit(v) ? 0x80000000u : 0u;
  const double a = std::fabs(v);
  const float kMax = std::numeric_limits<float>::max();
  const double kInfValue = std::ldexp(1.0, 128);  // where the next binade would start
  std::uint32_t bits;
  if (a >= kInfValue) {
    bits = 0x7F800000u;
  } else {
    float lo = a > double(kMax) ? kMax : static_cast<float>(a);
    while (double(lo) > a) lo = std::nextafter(lo, 0.0f);
    for (;;) {  // lo <= a; advance while the next float is still <= a
      if (lo == kMax) break;
      const float n = std::nextafter(lo, std::numeric_limits<float>::infinity());
      if (double(n) > a) break;
      lo = n;
    }
    std::uint32_t lo_bits;
    std::memcpy(&lo_bits, &lo, 4);
    if (double(lo) == a) {
      bits = lo_bits;
    } else {
      const double vhi = lo == kMax
                             ? kInfValue
                             : double(std::nextafter(lo, std::numeric_limits<float>::infinity()));
      bits = nearer(lo_bits, double(lo), lo_bits + 1u, vhi, a);  // kMax + 1 = infinity's bits
    }
  }
  return sign | bits;
}

double decode_f32(std::uint32_t code) {
  static const FormatInfo& f = info(DType::kFloat32);
  return decode_fields(f, code);
}

}  // namespace

// ------------------------------------------------------------- reading memory
// Bytes per element, from the formats' definitions (not the library's size_of).
std::int64_t bytes_of(DType dtype) {
  if (dtype == DType::kInt32) return 4;
  if (dtype == DType::kInt64) return 8;
  return total_bits(info(dtype)) / 8;
}

std::uint32_t load_code(const unsigned char* p, int bits) {
  if (bits == 8) return *p;
  if (bits == 16) {
    std::uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
  }
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

// ------------------------------------------------------------- public: formats
bool is_float_format(DType dtype) {
  switch (dtype) {
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E5M2:
    case DType::kFloat8E4M3FNUZ:
    case DType::kBFloat16:
    case DType::kFloat16:
    case DType::kFloat32: return true;
    default: return false;
  }
}

bool is_fp8(DType dtype) {
  return dtype == DType::kFloat8E4M3FN || dtype == DType::kFloat8E5M2 ||
         dtype == DType::kFloat8E4M3FNUZ;
}

int bits_of(DType dtype) { return total_bits(info(dtype)); }

double decode(DType dtype, std::uint32_t code) {
  if (dtype == DType::kFloat32) return decode_f32(code);
  return table(dtype).decoded.at(code);
}

bool is_nan_code(DType dtype, std::uint32_t code) { return std::isnan(decode(dtype, code)); }

std::uint32_t canonical_nan(DType dtype) { return info(dtype).nan_code; }

double max_finite(DType dtype) {
  if (dtype == DType::kFloat32) return double(std::numeric_limits<float>::max());
  const Table& t = table(dtype);
  return t.f->saturates ? t.magnitude.back() : t.magnitude[t.magnitude.size() - 2];
}

std::uint32_t encode(DType dtype, double v) {
  if (dtype == DType::kFloat32) return encode_f32(v);
  return encode_table(table(dtype), v);
}

std::int64_t order_key(DType dtype, std::uint32_t code) {
  const int bits = bits_of(dtype);
  const std::uint32_t sign_bit = 1u << (bits - 1);
  const std::int64_t m = std::int64_t(code & (sign_bit - 1u));
  return (code & sign_bit) != 0 ? -m - 1 : m;
}

std::int64_t step_distance(DType dtype, std::uint32_t a, std::uint32_t b) {
  const std::uint32_t sign_bit = 1u << (bits_of(dtype) - 1);
  auto index = [&](std::uint32_t c) {
    const std::int64_t m = std::int64_t(c & (sign_bit - 1u));
    return (c & sign_bit) != 0 ? -m : m;
  };
  const std::int64_t d = index(a) - index(b);
  return d < 0 ? -d : d;
}

// ------------------------------------------------------------- public: test inputs

void fill_rope_table(float* table, std::int64_t max_pos, std::int64_t r) {
  for (std::int64_t p = 0; p < max_pos; ++p)
    for (std::int64_t i = 0; i < r / 2; ++i) {
      const double theta = double(p) * std::pow(10000.0, -2.0 * double(i) / double(r));
      table[p * r + i] = float(std::cos(theta));
      table[p * r + r / 2 + i] = float(std::sin(theta));
    }
}

std::vector<float> rope_table(std::int64_t max_pos, std::int64_t r) {
  std::vector<float> t(std::size_t(max_pos * r));
  fill_rope_table(t.data(), max_pos, r);
  return t;
}

}  // namespace ropekv_oracle
