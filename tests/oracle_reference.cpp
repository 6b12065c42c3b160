// The test oracle's op (see oracle.hpp): reading the call's memory, the error bounds and
// reference(), which also evaluates the contract's float32 formula exactly as written.
// Independent of core/detail, like the formats' element math in oracle.cpp.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "oracle.hpp"
#include "oracle_internal.hpp"

namespace ropekv_oracle {
namespace {

using ropekv::Arguments;
using ropekv::TensorView;

// ------------------------------------------------------------- reading memory
// Input formats (bf16, fp16, fp32) are a subset of the output formats.
double load_value(DType dtype, const unsigned char* p) {
  return decode(dtype, load_code(p, bits_of(dtype)));
}

unsigned char* element(const TensorView& v, std::int64_t i0, std::int64_t i1, std::int64_t i2,
                       std::int64_t i3 = 0) {
  const std::int64_t off =
      i0 * v.stride[0] + i1 * v.stride[1] + i2 * v.stride[2] + (v.rank == 4 ? i3 * v.stride[3] : 0);
  return static_cast<unsigned char*>(v.data) + off * std::int64_t(bytes_of(v.dtype));
}

// A scale as the oracle applies it: divide by it or multiply by it (the
// scale's convention), in double, and as the contract's one float32 operation.
struct OracleScale {
  double value = 1.0;
  float value_f32 = 1.0f;
  bool multiply = false;
  double apply(double v) const { return multiply ? v * value : v / value; }
  float apply_f32(float v) const { return multiply ? v * value_f32 : v / value_f32; }
};
OracleScale scale_of(const ropekv::Scale& s) {
  OracleScale o;
  o.value_f32 = s.device != nullptr ? *s.device : s.value;
  o.value = double(o.value_f32);
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

// value and bound (double), and `exact`: the contract's float32 formula.
struct Converted {
  double value, bound;
  float exact;
};

// A rotated element: value = f(x*c -+ xp*s) for FP8 outputs, else the
// rotated value itself. `prod_sum` = |x*c| + |xp*s|. `y_f32`: the rotation
// by the contract's float32 formula (fmaf), scaled here likewise.
Converted rotated(double y, double prod_sum, bool finite_inputs, bool fp8, OracleScale scale,
                  float y_f32) {
  Converted r;
  const OracleScale f = fp8 ? scale : OracleScale{};
  r.value = f.apply(y);
  r.exact = fp8 ? scale.apply_f32(y_f32) : y_f32;
  r.bound = (finite_inputs && std::isfinite(y))
                ? std::fabs(f.apply(3 * kU * prod_sum * kSlack + kAbsSlack))
                : 0.0;
  return r;
}

// A pass-through element: value = f(x); only the FP8 scaling rounds.
// Inputs are bf16/fp16/fp32, so x is a float32 value: float(x) is exact.
Converted passed(double x, bool fp8, OracleScale scale) {
  Converted r;
  r.exact = fp8 ? scale.apply_f32(float(x)) : float(x);
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
  e.exact_value = c.exact;
  e.exact = encode(dtype, double(c.exact));  // a float is exact in double: one rounding
  if (c.bound > 0) {
    e.lo = encode(dtype, c.value - c.bound);
    e.hi = encode(dtype, c.value + c.bound);
  } else {
    e.lo = e.hi = e.nearest;
  }
  return e;
}

}  // namespace

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

// ------------------------------------------------------------- public: the op
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
                " %s: value %.17g (bound %.3g), nearest code 0x%0*x, allowed 0x%0*x..0x%0*x, "
                "float32 formula %.9g -> code 0x%0*x",
                ropekv::to_string(dtype), value, error_bound, w, nearest, w, lo, w, hi,
                double(exact_value), w, exact);
  return s + b;
}

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
      // The contract's float32 formula, as SPEC writes it (inputs and table
      // entries are float32 values, so the casts are exact).
      const float x0f = float(x0), x1f = float(x1), cf = float(c), sf = float(s);
      const float y0f = std::fmaf(x0f, cf, -(x1f * sf));
      const float y1f = std::fmaf(x1f, cf, x0f * sf);
      rot[std::size_t(i0)] = rotated(y0, sum, finite, fp8, scale, y0f);
      rot[std::size_t(i1)] = rotated(y1, sum1, finite, fp8, scale, y1f);
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
