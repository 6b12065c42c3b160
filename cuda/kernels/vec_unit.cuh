// The vector paths' unit of work, shared by the vector, staged and decode
// kernels (one source for CUDA and HIP): a token's work is cut into
// 16-element units (VecUnit), each loaded as two 16-byte vectors, rotated in
// registers, quantized and stored as two 8-byte FP8 rows. The vector paths
// take aligned shapes (R, N, Dv multiples of 16; 16-byte aligned input rows;
// 8-byte aligned FP8 output rows; fp32 or input-dtype cos/sin); canonical
// shapes are template specialisations (kR/kN/kDv > 0; 0: read at run time).
// Every kernel reads a token's slot (or batch index) first and nothing else
// of a padding token; every element goes through the shared element math.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/vendor.hpp"
#include "detail/element_math.hpp"
#include "detail/params.hpp"

namespace ropekv {
namespace detail {
namespace gpu {

constexpr int kItem = 16;       // elements per vector-path work item
constexpr int kVecBlock = 256;  // threads per block, vector path

// Per-launch geometry of the vector path, computed once on the host.
//
// A token's work is split into 16-element units: first its rotary units
// (rotary rows = Hq query heads then Hk key heads, S_r = R/16 units each),
// then its copy units (query non-rotary parts, key non-rotary parts, values,
// N/16 or Dv/16 units per row). A team of `team` consecutive threads takes
// one token at a time (grid-stride over tokens) and its lanes stride over
// the units. `team` is a multiple of S_r, so lane l always takes rotary
// unit l mod S_r of a row: it loads that unit's 8 cos and 8 sin values once
// per token and reuses them for every head it rotates.
struct VecGeometry {
  std::uint32_t rot_sub;     // S_r = R / 16
  std::uint32_t nope_sub;    // N / 16
  std::uint32_t v_sub;       // Dv / 16
  std::uint32_t rot_units;   // (Hq + Hk) * S_r
  std::uint32_t q_nope_end;  // rot_units + Hq * N/16
  std::uint32_t k_nope_end;  // q_nope_end + Hk * N/16
  std::uint32_t units;       // k_nope_end + Hk * Dv/16
  std::uint32_t team;        // threads per token (a multiple of S_r)
  std::uint32_t teams;       // teams per block (block = team * teams threads)
  // With PDL: blocks let the next kernel launch when they start (1) or when
  // they exit (0). See the launcher.
  std::uint32_t early_trigger;
  // The rows kernel's guided order (the launcher's; the fixed index forms):
  // the first guided_blocks blocks take the tokens but the last in the
  // grid-stride order, each later block one token a team (0: off).
  std::uint32_t guided_blocks;
};

// Element e (0..7) of eight packed 16-bit values.
__device__ __forceinline__ std::uint16_t half_lane(const uint4& v, int e) {
  const std::uint32_t w = e < 2 ? v.x : (e < 4 ? v.y : (e < 6 ? v.z : v.w));
  return std::uint16_t((e & 1) ? (w >> 16) : (w & 0xffffu));
}

template <DType In>
__device__ __forceinline__ void decode8(const uint4& v, float (&out)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) out[e] = Format<In>::decode(half_lane(v, e));
}

// Eight cos (or sin) values starting at `row + first` elements.
template <DType Cos>
__device__ __forceinline__ void load_cos8(const char* row, std::int64_t first, float (&out)[8]) {
  if constexpr (Cos == DType::kFloat32) {
    const float4* p = reinterpret_cast<const float4*>(row + first * 4);
    const float4 a = load_readonly(p), b = load_readonly(p + 1);
    out[0] = a.x;
    out[1] = a.y;
    out[2] = a.z;
    out[3] = a.w;
    out[4] = b.x;
    out[5] = b.y;
    out[6] = b.z;
    out[7] = b.w;
  } else {
    decode8<Cos>(load_readonly(reinterpret_cast<const uint4*>(row + first * 2)), out);
  }
}

// Four cos (or sin) values starting at `row + first` elements.
template <DType Cos>
__device__ __forceinline__ void load_cos4(const char* row, std::int64_t first, float* out) {
  if constexpr (Cos == DType::kFloat32) {
    const float4 a = load_readonly(reinterpret_cast<const float4*>(row + first * 4));
    out[0] = a.x;
    out[1] = a.y;
    out[2] = a.z;
    out[3] = a.w;
  } else {
    const uint2 v = load_readonly(reinterpret_cast<const uint2*>(row + first * 2));
#pragma unroll
    for (int e = 0; e < 4; ++e)
      out[e] =
          Format<Cos>::decode(std::uint16_t(((e < 2 ? v.x : v.y) >> (16 * (e & 1))) & 0xffffu));
  }
}

// Eight values -> eight FP8 codes (the scale step, then the format's
// encoder). kIeee: the scale's divisor needs IEEE division (rare; see
// ScaleDivisor), else the branch-free Markstein form.
template <DType Out, bool kIeee>
__device__ __forceinline__ uint2 encode8_with(const float (&v)[8], ScaleDivisor scale) {
  std::uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float a = kIeee ? apply_scale(v[2 * i], scale) : apply_scale_fast(v[2 * i], scale);
    const float b =
        kIeee ? apply_scale(v[2 * i + 1], scale) : apply_scale_fast(v[2 * i + 1], scale);
    std::uint32_t pair;
    if (!hw_encode_fp8x2<Out>(a, b, &pair))
      pair = std::uint32_t(Format<Out>::encode(a)) | (std::uint32_t(Format<Out>::encode(b)) << 8);
    w[i] = pair;
  }
  return make_uint2(w[0] | (w[1] << 16), w[2] | (w[3] << 16));
}
template <DType Out>
__device__ __forceinline__ uint2 encode8(const float (&v)[8], ScaleDivisor scale) {
  return __builtin_expect(needs_ieee(scale), 0) ? encode8_with<Out, true>(v, scale)
                                                : encode8_with<Out, false>(v, scale);
}
// kIeee < 0: encode8 (the form tested here); 0 or 1: the form the caller
// tested once for every divisor it uses.
template <DType Out, int kIeee>
__device__ __forceinline__ uint2 encode8_as(const float (&v)[8], ScaleDivisor scale) {
  if constexpr (kIeee < 0) {
    return encode8<Out>(v, scale);
  } else {
    return encode8_with<Out, kIeee == 1>(v, scale);
  }
}

// Compile-time unit counts of a specialisation (kR > 0), or the launch's own.
template <int kR, int kN, int kDv>
struct ShapeOf {
  // Half the rotary dim (R/2).
  __device__ __forceinline__ static std::uint32_t rot_half(const VecGeometry& g) {
    return kR > 0 ? std::uint32_t(kR / 2) : 8 * g.rot_sub;
  }
  __device__ __forceinline__ static std::uint32_t rot_sub(const VecGeometry& g) {
    return kR > 0 ? std::uint32_t(kR / kItem) : g.rot_sub;
  }
  __device__ __forceinline__ static std::uint32_t nope_sub(const VecGeometry& g) {
    return kR > 0 ? std::uint32_t(kN / kItem) : g.nope_sub;
  }
  __device__ __forceinline__ static std::uint32_t v_sub(const VecGeometry& g) {
    return kR > 0 ? std::uint32_t(kDv / kItem) : g.v_sub;
  }
};

// One 16-element unit of a planned token: where it writes, how, and its
// input vectors (both loaded before either is used). Every row part (rotary,
// non-rotary, value) of length L is cut the same way: unit `sub` holds
// elements [8 sub, 8 sub + 8) and [L/2 + 8 sub, L/2 + 8 sub + 8), so each
// load and store instruction of a warp covers whole contiguous segments.
// For NeoX those are the unit's 8 rotation pairs; for interleaved RoPE, the
// 4 adjacent pairs of each half.
struct VecUnit {
  char* dst;           // output row part
  std::uint32_t sub;   // unit within its row part
  std::uint32_t part;  // kRotQ, kRotK, kNopeQ, kNopeK or kValue
  uint4 a, b;
};
enum : std::uint32_t { kRotQ, kRotK, kNopeQ, kNopeK, kValue };
constexpr int kParts = 5;

// Which row part, head and unit within the row part unit u of a token is.
struct UnitRef {
  std::uint32_t part, head, sub;
};
// Sets r's head (row) and unit within the row for unit x of a row part whose
// rows hold n units each.
__device__ __forceinline__ void split_unit(std::uint32_t x, std::uint32_t n, UnitRef& r) {
  r.head = x / n;
  r.sub = x - r.head * n;
}
// A part's units a row as a divisor: 1 for a part the shape lacks (whose
// branch is never taken).
__device__ __forceinline__ std::uint32_t unit_divisor(std::uint32_t n) { return n > 0 ? n : 1u; }
template <int kR, int kN, int kDv>
__device__ __forceinline__ UnitRef unit_ref(const VecGeometry& g, std::uint32_t num_q_heads,
                                            std::uint32_t u) {
  using S = ShapeOf<kR, kN, kDv>;
  // Each branch divides by its own unit count: a constant (a shift) in the
  // specialisations.
  UnitRef r;
  if (u < g.rot_units) {  // rotary rows: Hq query heads, then Hk key heads
    split_unit(u, S::rot_sub(g), r);
    const bool q = r.head < num_q_heads;
    r.part = q ? kRotQ : kRotK;
    r.head = q ? r.head : r.head - num_q_heads;
  } else if (u < g.k_nope_end) {  // (never reached when N == 0)
    const std::uint32_t n = unit_divisor(S::nope_sub(g));
    const bool q = u < g.q_nope_end;
    split_unit(u - (q ? g.rot_units : g.q_nope_end), n, r);
    r.part = q ? kNopeQ : kNopeK;
  } else {  // (never reached for MLA)
    split_unit(u - g.k_nope_end, unit_divisor(S::v_sub(g)), r);
    r.part = kValue;
  }
  return r;
}

// Half the length of a row part, in elements.
template <int kR, int kN, int kDv>
__device__ __forceinline__ std::uint32_t part_half(const VecGeometry& g, std::uint32_t part) {
  using S = ShapeOf<kR, kN, kDv>;
  return 8 * (part <= kRotK ? S::rot_sub(g) : (part <= kNopeK ? S::nope_sub(g) : S::v_sub(g)));
}
// True for the parts written to the caches (addressed by page and entry).
__device__ __forceinline__ bool cache_part(std::uint32_t part) {
  return part == kRotK || part == kNopeK || part == kValue;
}

// The input view of a part: through a pointer to the member where the
// vendor can address kernel parameters (one indexed parameter load per
// field), else selected by value (kParamsAddressable).
__device__ __forceinline__ HeadTensor input_of(const LaunchParams& p, std::uint32_t part) {
  if constexpr (kParamsAddressable) {
    const HeadTensor* s = part == kRotQ    ? &p.q_rope
                          : part == kRotK  ? &p.k_rope
                          : part == kNopeQ ? &p.q_nope
                          : part == kNopeK ? &p.k_nope
                                           : &p.v;
    return *s;
  } else {
    HeadTensor s = p.v;
    if (part == kRotQ) s = p.q_rope;
    if (part == kRotK) s = p.k_rope;
    if (part == kNopeQ) s = p.q_nope;
    if (part == kNopeK) s = p.k_nope;
    return s;
  }
}

// Resolves unit u of planned token t: fills its destination, unit and part
// and returns the 16-byte vectors of its input row part (2-byte elements;
// the unit's two input vectors are at sub and part_half / 8 + sub).
template <int kR, int kN, int kDv>
__device__ __forceinline__ const uint4* vec_resolve(const LaunchParams& p, const VecGeometry& g,
                                                    std::int64_t t, std::uint32_t u,
                                                    const TokenPlan& plan, VecUnit& it) {
  const UnitRef r = unit_ref<kR, kN, kDv>(g, std::uint32_t(p.num_q_heads), u);
  it.sub = r.sub;
  it.part = r.part;
  const std::int64_t h = r.head;
  // FP8 outputs: 1-byte elements.
  if (r.part == kRotQ)
    it.dst = p.q_rope_out.row(t, h, 1);
  else if (r.part == kNopeQ)
    it.dst = p.q_nope_out.row(t, h, 1);
  else if (r.part == kRotK)
    it.dst = p.k_cache_rope.row(plan.page, plan.entry, h, 1);
  else if (r.part == kNopeK)
    it.dst = p.k_cache_nope.row(plan.page, plan.entry, h, 1);
  else
    it.dst = p.v_cache.row(plan.page, plan.entry, h, 1);
  return reinterpret_cast<const uint4*>(input_of(p, r.part).row(t, h, 2));
}

// Resolves unit u of planned token t and issues its two input loads.
template <int kR, int kN, int kDv>
__device__ __forceinline__ void vec_issue(const LaunchParams& p, const VecGeometry& g,
                                          std::int64_t t, std::uint32_t u, const TokenPlan& plan,
                                          VecUnit& it) {
  const uint4* x = vec_resolve<kR, kN, kDv>(p, g, t, u, plan, it);
  it.a = load_readonly(x + it.sub);
  it.b = load_readonly(x + part_half<kR, kN, kDv>(g, it.part) / 8 + it.sub);
}

// The lane's cos and sin values for rotary unit `sub` (see VecUnit) of a
// cos/sin row `cs` with rot_half = R/2: NeoX pairs 8 sub + e; interleaved
// pairs 4 sub + e (e < 4) and R/4 + 4 sub + e.
template <DType Cos>
__device__ __forceinline__ void load_unit_cos(RopeStyle style, std::uint32_t rot_half,
                                              const char* cs, std::uint32_t sub, float (&cv)[8],
                                              float (&sv)[8]) {
  const std::int64_t half = rot_half;
  if (__builtin_expect(style == RopeStyle::kNeox, 1)) {
    load_cos8<Cos>(cs, 8 * std::int64_t(sub), cv);
    load_cos8<Cos>(cs, half + 8 * std::int64_t(sub), sv);
  } else {
    const std::int64_t q = half / 2;
    load_cos4<Cos>(cs, 4 * std::int64_t(sub), cv);
    load_cos4<Cos>(cs, q + 4 * std::int64_t(sub), cv + 4);
    load_cos4<Cos>(cs, half + 4 * std::int64_t(sub), sv);
    load_cos4<Cos>(cs, half + q + 4 * std::int64_t(sub), sv + 4);
  }
}

// The output codes of one unit with input vectors va, vb: rotated (rotary
// units, with the lane's cos/sin) and quantized; lo holds the unit's first
// 8 elements, hi its 8 elements half a row part further (kIeee: encode8_as).
template <DType In, DType Out, int kIeee = -1>
__device__ __forceinline__ void encode_unit(RopeStyle style, bool rotary, ScaleDivisor scale,
                                            const uint4& va, const uint4& vb, const float (&cv)[8],
                                            const float (&sv)[8], uint2& lo, uint2& hi) {
#if defined(ROPEKV_EXPERIMENT_NO_MATH)
  // Measurement builds only (preset cuda-bare; wrong output): the same loads
  // (every input word, every cos/sin vector) and stores, no rotation or
  // quantization; the kernels' time without their arithmetic.
  (void)style;
  (void)rotary;
  std::uint32_t c = __float_as_uint(scale.recip), s = 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    c ^= __float_as_uint(cv[e]);
    s ^= __float_as_uint(sv[e]);
  }
  lo = make_uint2(va.x ^ va.z ^ c, va.y ^ va.w ^ s);
  hi = make_uint2(vb.x ^ vb.z ^ c, vb.y ^ vb.w ^ s);
#else
  float a[8], b[8];
  decode8<In>(va, a);
  decode8<In>(vb, b);
  if (rotary) {
    float ya[8], yb[8];
    if (__builtin_expect(style == RopeStyle::kNeox, 1)) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const RotatedPair r = rotate_pair(a[e], b[e], cv[e], sv[e]);
        ya[e] = r.y;
        yb[e] = r.yp;
      }
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const RotatedPair r0 = rotate_pair(a[2 * e], a[2 * e + 1], cv[e], sv[e]);
        const RotatedPair r1 = rotate_pair(b[2 * e], b[2 * e + 1], cv[4 + e], sv[4 + e]);
        ya[2 * e] = r0.y;
        ya[2 * e + 1] = r0.yp;
        yb[2 * e] = r1.y;
        yb[2 * e + 1] = r1.yp;
      }
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      a[e] = ya[e];
      b[e] = yb[e];
    }
  }
  lo = encode8_as<Out, kIeee>(a, scale);
  hi = encode8_as<Out, kIeee>(b, scale);
#endif
}

// Stores a unit's codes into the output row part `dst` of half length `half`.
__device__ __forceinline__ void store_unit(char* dst, std::uint32_t half, std::uint32_t sub,
                                           const uint2& lo, const uint2& hi) {
  store_streaming(reinterpret_cast<uint2*>(dst) + sub, lo);
  store_streaming(reinterpret_cast<uint2*>(dst + half) + sub, hi);
}

// The scale of a part's output: 0 q, 1 k, 2 v. The query parts are the even
// ones below kValue, the key parts the odd ones: one test of the low bit.
static_assert(kRotQ % 2 == 0 && kNopeQ % 2 == 0 && kRotK % 2 == 1 && kNopeK % 2 == 1 &&
                  kValue > kNopeK,
              "scale_index tests the parts' low bit");
__host__ __device__ __forceinline__ bool is_key_part(std::uint32_t part) {
  return (part & 1u) != 0;
}
__host__ __device__ __forceinline__ std::uint32_t scale_index(std::uint32_t part) {
  return part == kValue ? 2u : (is_key_part(part) ? 1u : 0u);
}
// The divisor of a part's output (scale_index's choice, selected directly:
// a select on the index costs the vector kernels two more compares a unit).
__device__ __forceinline__ ScaleDivisor divisor_of(const Divisors& d, std::uint32_t part) {
  return part == kValue ? d.v : (is_key_part(part) ? d.k : d.q);
}

// Encodes and stores an issued unit of the vector kernels.
template <DType In, DType Out, int kR, int kN, int kDv>
__device__ __forceinline__ void vec_finish(const LaunchParams& p, const VecGeometry& g,
                                           const Divisors& d, const VecUnit& it,
                                           const float (&cv)[8], const float (&sv)[8]) {
  uint2 lo, hi;
  encode_unit<In, Out>(p.style, it.part <= kRotK, divisor_of(d, it.part), it.a, it.b, cv, sv, lo,
                       hi);
  store_unit(it.dst, part_half<kR, kN, kDv>(g, it.part), it.sub, lo, hi);
}

// ------------------------------------------------------------- index forms
// The index forms a kernel may be specialised on: any (read from the launch
// parameters at run time), or one of the two common forms fixed at compile
// time, so that a token's index resolution is a few instructions: slot
// mapping with int64 slots and positions (vLLM), and a page table with int32
// arrays and positions (FlashInfer, SGLang); both unchecked, with a
// power-of-two page size.
enum : int { kIndexAny = 0, kIndexSlot64 = 1, kIndexTable32 = 2 };

// The members load_token_indices, plan_begin and finish_plan read, in a
// fixed form: index arrays of fixed widths, no checks.
template <int kForm>
struct FixedIndex {
  static constexpr Addressing addressing =
      kForm == kIndexSlot64 ? Addressing::kSlotMapping : Addressing::kPageTable;
  static constexpr bool checked = false;
  static constexpr std::int64_t batch_size = 0, num_kv_indices = 0, num_pages = 0, max_pos = 0;
  // A token's entries as the arrays hold them (TokenIndicesOf).
  using Index = std::conditional_t<kForm == kIndexSlot64, std::int64_t, std::int32_t>;
  FixedIndexArray<true> slot_mapping;
  FixedIndexArray<false> batch_indices;
  FixedIndexArray<false> kv_positions;
  FixedIndexArray<kForm == kIndexSlot64> positions;
  FixedIndexArray<false> kv_indptr;
  FixedIndexArray<false> kv_indices;
  int page_shift;
};
// A fixed form's page size is a power of two: (page, entry) by shift and
// mask (the overload finish_plan finds for FixedIndex).
template <int kForm>
__device__ __forceinline__ PageEntry page_of(const FixedIndex<kForm>& p, std::int64_t slot) {
  PageEntry pe;
  pe.page = slot >> p.page_shift;
  pe.entry = slot & ((std::int64_t(1) << p.page_shift) - 1);
  return pe;
}
// The index resolution's view of the launch parameters in form kForm: p
// itself (the run-time form), or its arrays in a fixed form (made at each
// use, so that they stay kernel parameters rather than registers).
template <int kForm>
__device__ __forceinline__ decltype(auto) index_view(const LaunchParams& p) {
  if constexpr (kForm == kIndexAny) {
    return (p);
  } else {
    return FixedIndex<kForm>{{p.slot_mapping.data}, {p.batch_indices.data}, {p.kv_positions.data},
                             {p.positions.data},    {p.kv_indptr.data},     {p.kv_indices.data},
                             p.page_shift};
  }
}

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
