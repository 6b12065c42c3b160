// The test oracle (see oracle.hpp). Independent of core/detail by design:
// nothing here is shared with the library but the public Arguments struct.
#include "oracle.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace ropekv_oracle {
namespace {

using ropekv::Arguments;
using ropekv::TensorView;

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

// ------------------------------------------------------------- reading memory
// Bytes per element, from the formats' definitions (not the library's size_of).
std::int64_t bytes_of(DType dtype) {
  if (dtype == DType::kInt32) return 4;
  if (dtype == DType::kInt64) return 8;
  return total_bits(info(dtype)) / 8;
}

// Input formats (bf16, fp16, fp32) are a subset of the output formats.
double load_value(DType dtype, const unsigned char* p) {
  return decode(dtype, load_code(p, bits_of(dtype)));
}

std::int64_t load_index(const TensorView& v, std::int64_t i) {
  const unsigned char* p =
      static_cast<const unsigned char*>(v.data) + i * v.stride[0] * std::int64_t(bytes_of(v.dtype));
  if (v.dtype == DType::kInt64) {
    std::int64_t x;
    std::memcpy(&x, p, 8);
    return x;
  }
  std::int32_t x;
  std::memcpy(&x, p, 4);
  return x;
}

unsigned char* element(const TensorView& v, std::int64_t i0, std::int64_t i1, std::int64_t i2,
                       std::int64_t i3 = 0) {
  const std::int64_t off =
      i0 * v.stride[0] + i1 * v.stride[1] + i2 * v.stride[2] + (v.rank == 4 ? i3 * v.stride[3] : 0);
  return static_cast<unsigned char*>(v.data) + off * std::int64_t(bytes_of(v.dtype));
}

// A scale as the oracle applies it: divide by it or multiply by it (the
// scale's convention), in double.
struct OracleScale {
  double value = 1.0;
  bool multiply = false;
  double apply(double v) const { return multiply ? v * value : v / value; }
};
OracleScale scale_of(const ropekv::Scale& s) {
  OracleScale o;
  o.value = s.device != nullptr ? double(*s.device) : double(s.value);
  o.multiply = s.convention == ropekv::ScaleConvention::kMultiply;
  return o;
}

// Last extent of a view that may be absent.
std::int64_t last_extent(const TensorView& v) { return v.present() ? v.extent[v.rank - 1] : 0; }

// ------------------------------------------------------------- error bounds
// The library computes, in float32 with unit roundoff u = 2^-24,
//   p = RN(xp*s), y = RN(x*c - p) (one fma), and for FP8 outputs q = RN(y/scale)
// (dividing convention) or q = RN(y*scale) (multiplying); write f(v) for v/scale
// or v*scale. With Y = x*c - xp*s exact:
//   |p - xp*s| <= u|xp*s|, |y - (x*c - p)| <= u|x*c - p| <= u(|Y| + u|xp*s|),
//   |q - f(y)| <= u|f(y)|,
// so |q - f(Y)| <= f(u|xp*s| + 2u|Y| + O(u^2)) <= f(3u(|x*c| + |xp*s|))
// up to the O(u^2) terms, which the factor (1 + 2^-20) covers together with
// the oracle's own double roundings (2^-53 relative). The inputs, products and
// quotients the grid generates stay far from float32 underflow and overflow;
// an absolute 2^-140 covers any subnormal rounding anyway.
constexpr double kU = 0x1p-24;
constexpr double kSlack = 1.0 + 0x1p-20;
constexpr double kAbsSlack = 0x1p-140;

struct Converted {
  double value, bound;
};

// A rotated element: value = f(x*c -+ xp*s) for FP8 outputs, else the
// rotated value itself. `prod_sum` = |x*c| + |xp*s|.
Converted rotated(double y, double prod_sum, bool finite_inputs, bool fp8, OracleScale scale) {
  Converted r;
  const OracleScale f = fp8 ? scale : OracleScale{};
  r.value = f.apply(y);
  r.bound = (finite_inputs && std::isfinite(y))
                ? std::fabs(f.apply(3 * kU * prod_sum * kSlack + kAbsSlack))
                : 0.0;
  return r;
}

// A pass-through element: value = f(x); only the FP8 scaling rounds.
Converted passed(double x, bool fp8, OracleScale scale) {
  Converted r;
  if (!fp8) {
    r.value = x;
    r.bound = 0.0;
    return r;
  }
  r.value = scale.apply(x);
  r.bound = std::isfinite(x) ? std::fabs(scale.apply(kU * std::fabs(x) * kSlack + kAbsSlack)) : 0.0;
  return r;
}

ExpectedElement make_element(Target target, std::int64_t token, std::int64_t head, std::int64_t dim,
                             std::int64_t page, std::int64_t entry, unsigned char* address,
                             DType dtype, Converted c) {
  ExpectedElement e;
  e.target = target;
  e.token = token;
  e.head = head;
  e.dim = dim;
  e.page = page;
  e.entry = entry;
  e.address = address;
  e.dtype = dtype;
  e.value = c.value;
  e.error_bound = c.bound;
  e.nearest = encode(dtype, c.value);
  if (c.bound > 0) {
    e.lo = encode(dtype, c.value - c.bound);
    e.hi = encode(dtype, c.value + c.bound);
  } else {
    e.lo = e.hi = e.nearest;
  }
  return e;
}

}  // namespace

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

const char* to_string(Target target) {
  switch (target) {
    case Target::kQRopeOut: return "q_rope_out";
    case Target::kQNopeOut: return "q_nope_out";
    case Target::kKCacheRope: return "k_cache_rope";
    case Target::kKCacheNope: return "k_cache_nope";
    case Target::kVCache: return "v_cache";
  }
  return "?";
}

bool ExpectedElement::allows(std::uint32_t code) const {
  if (is_nan_code(dtype, nearest)) return code == nearest;
  if (is_nan_code(dtype, code)) return false;
  const std::int64_t k = order_key(dtype, code);
  return order_key(dtype, lo) <= k && k <= order_key(dtype, hi);
}

std::string ExpectedElement::describe() const {
  char b[320];
  const int w = (bits_of(dtype) + 3) / 4;
  if (target == Target::kQRopeOut || target == Target::kQNopeOut) {
    std::snprintf(b, sizeof(b), "%s[token %lld, head %lld, dim %lld]", to_string(target),
                  static_cast<long long>(token), static_cast<long long>(head),
                  static_cast<long long>(dim));
  } else {
    std::snprintf(b, sizeof(b), "%s[page %lld, entry %lld, head %lld, dim %lld] (token %lld)",
                  to_string(target), static_cast<long long>(page), static_cast<long long>(entry),
                  static_cast<long long>(head), static_cast<long long>(dim),
                  static_cast<long long>(token));
  }
  std::string s = b;
  std::snprintf(b, sizeof(b),
                " %s: value %.17g (bound %.3g), nearest code 0x%0*x, allowed 0x%0*x..0x%0*x",
                ropekv::to_string(dtype), value, error_bound, w, nearest, w, lo, w, hi);
  return s + b;
}

// ------------------------------------------------------------- public: the op
Reference reference(const Arguments& a) {
  Reference ref;
  const bool mla = a.kind == ropekv::AttentionKind::kMla;
  const ropekv::CacheIndex& ci = a.cache_index;
  const std::int64_t nnz = a.q_rope.extent[0];
  const std::int64_t hq = a.q_rope.extent[1];
  const std::int64_t hk = a.k_rope.extent[1];
  const std::int64_t rdim = a.q_rope.extent[2];
  const std::int64_t half = rdim / 2;
  const std::int64_t ndim = last_extent(a.q_nope);
  const std::int64_t vdim = mla ? 0 : last_extent(a.v);
  const std::int64_t num_pages = a.k_cache_rope.extent[0];
  const std::int64_t page_size = a.k_cache_rope.extent[1];
  const std::int64_t max_pos = a.cos_sin_cache.extent[0];
  const DType in = a.q_rope.dtype;
  const DType qo = a.q_rope_out.dtype;
  const DType cd = a.k_cache_rope.dtype;
  const DType cs = a.cos_sin_cache.dtype;
  const bool q_fp8 = is_fp8(qo), c_fp8 = is_fp8(cd);
  const OracleScale q_scale = scale_of(a.q_scale);
  const OracleScale k_scale = scale_of(a.k_scale);
  const OracleScale v_scale = mla ? OracleScale{} : scale_of(a.v_scale);
  const bool checked = a.checked.enabled;
  const bool slots = ci.form == ropekv::Addressing::kSlotMapping;
  const std::int64_t batch = slots ? 0 : ci.kv_indptr.extent[0] - 1;
  const std::int64_t num_kv_indices = slots ? 0 : ci.kv_indices.extent[0];

  const std::size_t nr = std::size_t(rdim > 0 ? rdim : 0), nh = std::size_t(half > 0 ? half : 0);
  std::vector<double> x(nr), cosv(nh), sinv(nh);

  // The rotary part of one head row: (value, bound) per dim into `rot`.
  std::vector<Converted> rot(nr);
  auto rotate = [&](const TensorView& xin, std::int64_t t, std::int64_t h, bool fp8,
                    OracleScale scale) {
    for (std::int64_t d = 0; d < rdim; ++d)
      x[std::size_t(d)] = load_value(in, element(xin, t, h, d));
    for (std::int64_t i = 0; i < half; ++i) {
      const bool neox = a.rope_style == ropekv::RopeStyle::kNeox;
      const std::int64_t i0 = neox ? i : 2 * i;
      const std::int64_t i1 = neox ? i + half : 2 * i + 1;
      const double x0 = x[std::size_t(i0)], x1 = x[std::size_t(i1)];
      const double c = cosv[std::size_t(i)], s = sinv[std::size_t(i)];
      const bool finite =
          std::isfinite(x0) && std::isfinite(x1) && std::isfinite(c) && std::isfinite(s);
      // Products of two floats are exact in double; each line rounds once.
      const double y0 = x0 * c - x1 * s;
      const double y1 = x1 * c + x0 * s;
      const double sum = std::fabs(x0 * c) + std::fabs(x1 * s);
      const double sum1 = std::fabs(x1 * c) + std::fabs(x0 * s);
      rot[std::size_t(i0)] = rotated(y0, sum, finite, fp8, scale);
      rot[std::size_t(i1)] = rotated(y1, sum1, finite, fp8, scale);
    }
  };

  for (std::int64_t t = 0; t < nnz; ++t) {
    // ---- where the token goes
    std::int64_t page = 0, entry = 0;
    bool bad = false;
    if (slots) {
      const std::int64_t slot = load_index(ci.slot_mapping, t);
      if (slot < 0) {
        ++ref.padding_tokens;
        continue;
      }
      page = slot / page_size;
      entry = slot % page_size;
    } else {
      const std::int64_t b = load_index(ci.batch_indices, t);
      if (b < 0) {
        ++ref.padding_tokens;
        continue;
      }
      const std::int64_t kv_pos = load_index(ci.kv_positions, t);
      if (b >= batch || kv_pos < 0) {
        bad = true;
      } else {
        // Entry j = begin + kv_pos / page_size must lie in [begin, end) and
        // in kv_indices; garbage begin/end may be anything, so compare
        // without forming sums that can overflow.
        const std::int64_t begin = load_index(ci.kv_indptr, b);
        const std::int64_t end = load_index(ci.kv_indptr, b + 1);
        const std::int64_t in_seq = kv_pos / page_size;
        if (begin < 0 || end <= begin || in_seq >= end - begin ||
            in_seq >= num_kv_indices - begin) {
          bad = true;
        } else {
          page = load_index(ci.kv_indices, begin + in_seq);
          entry = kv_pos % page_size;
        }
      }
    }
    const std::int64_t pos = load_index(a.positions, t);
    if (page < 0 || page >= num_pages || pos < 0 || pos >= max_pos) bad = true;
    if (bad) {
      if (!checked) {
        char b[160];
        std::snprintf(b, sizeof(b),
                      "token %lld has an out-of-range index (page %lld, position %lld) in "
                      "unchecked mode",
                      static_cast<long long>(t), static_cast<long long>(page),
                      static_cast<long long>(pos));
        ref.error = b;
        return ref;
      }
      ++ref.bad_tokens;
      continue;
    }
    ++ref.written_tokens;

    // ---- the cos/sin row
    const unsigned char* row = static_cast<const unsigned char*>(a.cos_sin_cache.data) +
                               pos * a.cos_sin_cache.stride[0] * std::int64_t(bytes_of(cs));
    for (std::int64_t i = 0; i < half; ++i) {
      cosv[std::size_t(i)] = load_value(cs, row + i * std::int64_t(bytes_of(cs)));
      sinv[std::size_t(i)] = load_value(cs, row + (half + i) * std::int64_t(bytes_of(cs)));
    }

    // ---- query heads
    for (std::int64_t h = 0; h < hq; ++h) {
      rotate(a.q_rope, t, h, q_fp8, q_scale);
      for (std::int64_t d = 0; d < rdim; ++d)
        ref.elements.push_back(make_element(Target::kQRopeOut, t, h, d, -1, -1,
                                            element(a.q_rope_out, t, h, d), qo,
                                            rot[std::size_t(d)]));
      for (std::int64_t d = 0; d < ndim; ++d) {
        const double xv = load_value(in, element(a.q_nope, t, h, d));
        ref.elements.push_back(make_element(Target::kQNopeOut, t, h, d, -1, -1,
                                            element(a.q_nope_out, t, h, d), qo,
                                            passed(xv, q_fp8, q_scale)));
      }
    }
    // ---- key and value heads
    for (std::int64_t h = 0; h < hk; ++h) {
      rotate(a.k_rope, t, h, c_fp8, k_scale);
      for (std::int64_t d = 0; d < rdim; ++d)
        ref.elements.push_back(make_element(Target::kKCacheRope, t, h, d, page, entry,
                                            element(a.k_cache_rope, page, entry, h, d), cd,
                                            rot[std::size_t(d)]));
      for (std::int64_t d = 0; d < ndim; ++d) {
        const double xv = load_value(in, element(a.k_nope, t, h, d));
        ref.elements.push_back(make_element(Target::kKCacheNope, t, h, d, page, entry,
                                            element(a.k_cache_nope, page, entry, h, d), cd,
                                            passed(xv, c_fp8, k_scale)));
      }
      for (std::int64_t d = 0; d < vdim; ++d) {
        const double xv = load_value(in, element(a.v, t, h, d));
        ref.elements.push_back(make_element(Target::kVCache, t, h, d, page, entry,
                                            element(a.v_cache, page, entry, h, d), cd,
                                            passed(xv, c_fp8, v_scale)));
      }
    }
  }
  return ref;
}

}  // namespace ropekv_oracle
