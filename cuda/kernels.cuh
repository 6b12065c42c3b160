// The fused device kernels, one source for CUDA and HIP.
//
// decode path (fused_decode_kernel): launches that fit on the device at once
//   with one 16-element unit (see VecUnit) per thread: a block takes a chunk
//   of one token's units, each thread one unit, and its chain of dependent
//   loads is as short as the format allows (see the kernel).
// vector path (fused_vec_kernel): the hand-tuned path for aligned shapes
//   (R, N, Dv multiples of 16; 16-byte aligned input rows; 8-byte aligned FP8
//   output rows; fp32 or input-dtype cos/sin). A token's work is cut into
//   16-element units (see VecUnit); a team of threads takes one token at a
//   time, loads its indices and each lane's cos/sin once, and strides over
//   the units two at a time (two 16-byte loads each, rotation in registers,
//   two 8-byte FP8 stores). Every warp load and store covers whole contiguous
//   segments. Canonical shapes are template specialisations (kR/kN/kDv > 0);
//   0 means "read at run time". See VecGeometry and fused_vec_kernel.
//   fused_vec_staged_kernel is the same path for large launches: its inputs
//   go through a per-thread ring in shared memory by asynchronous copies.
//   The launcher picks; where the vendor layer has no asynchronous copy
//   (HIP) the direct kernel serves every size.
// generic path (fused_generic_kernel): any valid shape, alignment and dtype
//   combination, one kernel per input dtype, FP8 output dtype (or run-time
//   output dtype) and cos/sin dtype. One block per token (grid-stride);
//   groups of kGroup threads take whole head rows, lanes stride over pairs /
//   elements.
//
// Every kernel reads a token's slot (or batch index) first and nothing else
// of a padding token; every element goes through the shared element math.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/gpu_runtime.hpp"
#include "detail/element_math.hpp"
#include "detail/params.hpp"

namespace ropekv {
namespace detail {
namespace gpu {

constexpr int kItem = 16;       // elements per vector-path work item
constexpr int kVecBlock = 256;  // threads per block, vector path
constexpr int kGenericBlock = 256;
// Blocks per multiprocessor the generic kernels are compiled for (64
// registers; 12 bytes spilled in 6 of the 24). On the H200, 3 and 1
// (80-120 registers) were 24% and 57% slower at 8192 tokens.
constexpr int kGenericMinBlocks = 4;
// Blocks per multiprocessor the vector kernel is compiled for: caps it at
// 80 registers (unbounded it takes 100-128). On the H200, 2 lost 10-20% at
// large nnz and 4 (64 registers, heavy spills) lost 25-30%.
constexpr int kVecMinBlocks = 3;
// Blocks of kVecBlock threads per multiprocessor the decode kernel is
// compiled for: a cap of 48 registers (unbounded it takes 62), so that more
// of a decode batch fits on the device at once (deepseek-v3 MLA TP8 at 256
// tokens: 768 blocks of 224 threads need 6 a multiprocessor). The bf16
// specialisations do not spill under it.
#ifndef ROPEKV_DECODE_MIN_BLOCKS
#define ROPEKV_DECODE_MIN_BLOCKS 5
#endif
constexpr int kDecodeMinBlocks = ROPEKV_DECODE_MIN_BLOCKS;
// Threads per head row in the generic path (a logical group: any warp
// width). Fewer threads per row spread each row's set-up (its addresses,
// cache offset) over more elements per thread; on the H200 (llama-3.1-8b
// with misaligned rows, 8192 tokens) 32, 16, 8 and 4 took 150, 120, 131 and
// 229 us.
constexpr int kGroup = 16;

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
  bool staged;  // host only: the launcher picks the staged kernel
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
  return needs_ieee(scale) ? encode8_with<Out, true>(v, scale) : encode8_with<Out, false>(v, scale);
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
template <int kR, int kN, int kDv>
__device__ __forceinline__ UnitRef unit_ref(const VecGeometry& g, std::uint32_t num_q_heads,
                                            std::uint32_t u) {
  using S = ShapeOf<kR, kN, kDv>;
  // Each branch divides by its own unit count: a constant (a shift) in the
  // specialisations.
  UnitRef r;
  if (u < g.rot_units) {  // rotary rows: Hq query heads, then Hk key heads
    const std::uint32_t row = u / S::rot_sub(g);
    r.sub = u - row * S::rot_sub(g);
    const bool q = row < num_q_heads;
    r.part = q ? kRotQ : kRotK;
    r.head = q ? row : row - num_q_heads;
  } else if (u < g.k_nope_end) {  // (never reached when N == 0)
    const std::uint32_t n = S::nope_sub(g) > 0 ? S::nope_sub(g) : 1u;
    const bool q = u < g.q_nope_end;
    const std::uint32_t cu = u - (q ? g.rot_units : g.q_nope_end);
    r.head = cu / n;
    r.sub = cu - r.head * n;
    r.part = q ? kNopeQ : kNopeK;
  } else {  // (never reached for MLA)
    const std::uint32_t n = S::v_sub(g) > 0 ? S::v_sub(g) : 1u;
    const std::uint32_t cu = u - g.k_nope_end;
    r.head = cu / n;
    r.sub = cu - r.head * n;
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
// field), else selected by value (see param_at).
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

// The 16-byte vectors of an input row part of 2-byte elements at `row` (the
// unit's two input vectors are at sub and part_half / 8 + sub).
__device__ __forceinline__ const uint4* row_vectors(const char* row) {
  return reinterpret_cast<const uint4*>(row);
}

// Resolves unit u of planned token t: fills its destination, unit and part
// and returns the 16-byte vectors of its input row part.
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
  return row_vectors(input_of(p, r.part).row(t, h, 2));
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
  if (style == RopeStyle::kNeox) {
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
// 8 elements, hi its 8 elements half a row part further.
template <DType In, DType Out>
__device__ __forceinline__ void encode_unit(RopeStyle style, bool rotary, ScaleDivisor scale,
                                            const uint4& va, const uint4& vb, const float (&cv)[8],
                                            const float (&sv)[8], uint2& lo, uint2& hi) {
  float a[8], b[8];
  decode8<In>(va, a);
  decode8<In>(vb, b);
  if (rotary) {
    float ya[8], yb[8];
    if (style == RopeStyle::kNeox) {
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
  lo = encode8<Out>(a, scale);
  hi = encode8<Out>(b, scale);
}

// Stores a unit's codes into the output row part `dst` of half length `half`.
__device__ __forceinline__ void store_unit(char* dst, std::uint32_t half, std::uint32_t sub,
                                           const uint2& lo, const uint2& hi) {
  store_streaming(reinterpret_cast<uint2*>(dst) + sub, lo);
  store_streaming(reinterpret_cast<uint2*>(dst + half) + sub, hi);
}

// The scale of a part's output: 0 q, 1 k, 2 v.
__device__ __forceinline__ std::uint32_t scale_index(std::uint32_t part) {
  return part == kValue ? 2u : ((part == kRotQ || part == kNopeQ) ? 0u : 1u);
}
// The divisor of a part's output.
__device__ __forceinline__ ScaleDivisor divisor_of(const Divisors& d, std::uint32_t part) {
  const std::uint32_t i = scale_index(part);
  return i == 0 ? d.q : (i == 1 ? d.k : d.v);
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

// Teams of g.team threads, one token per team at a time (grid-stride over
// tokens). Per token: the index entries (prefetched during the previous
// token), then, once the token is known not to be padding, the lane's
// cos/sin and the inputs of its first two units together, then two units
// per step. The next token's index entries are loaded while the current
// token's inputs are in flight.
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv>
__global__ void __launch_bounds__(kVecBlock, kVecMinBlocks)
    fused_vec_kernel(const LaunchParams p, const VecGeometry g) {
  using S = ShapeOf<kR, kN, kDv>;
  dependency_wait();
  if (g.early_trigger) dependents_launch();
  const std::uint32_t lane = threadIdx.x % g.team;
  const std::int64_t team_stride = std::int64_t(gridDim.x) * g.teams;
  std::int64_t t = std::int64_t(blockIdx.x) * g.teams + threadIdx.x / g.team;
  if (t >= p.nnz) return;
  TokenIndices ix = load_token_indices(p, t);
  const Divisors d = load_divisors(p);  // while the index loads are in flight
  // The lane's rotary unit within a row (fixed: team % S_r == 0).
  const std::uint32_t rot_sub = lane % S::rot_sub(g);
  while (true) {
    const TokenPlan plan = finish_plan(p, ix);
    const std::int64_t next = t + team_stride;
    const bool more = next < p.nnz;
    if (more) ix = load_token_indices(p, next);  // in flight with this token's loads
    if (plan.write) {
      float cv[8], sv[8];
      if (lane < g.rot_units)
        load_unit_cos<Cos>(p.style, S::rot_half(g),
                           p.cos_sin + plan.pos * p.cos_row_stride * p.cos.bytes, rot_sub, cv, sv);
      for (std::uint32_t u = lane; u < g.units; u += 2 * g.team) {
        const std::uint32_t u2 = u + g.team;
        VecUnit x0, x1;
        vec_issue<kR, kN, kDv>(p, g, t, u, plan, x0);
        if (u2 < g.units) vec_issue<kR, kN, kDv>(p, g, t, u2, plan, x1);
        vec_finish<In, Out, kR, kN, kDv>(p, g, d, x0, cv, sv);
        if (u2 < g.units) vec_finish<In, Out, kR, kN, kDv>(p, g, d, x1, cv, sv);
      }
    } else if (plan.bad && lane == 0 && p.skipped_tokens != nullptr) {
      atomicAdd(p.skipped_tokens, 1ull);
    }
    if (!more) break;
    t = next;
  }
}

// ------------------------------------------------- vector path, staged copies
// For launches beyond one wave of decode-sized teams, where the kernel
// above is bound by the bytes each SM keeps in flight (its loads hold
// registers until used). Same teams, units, math and stores; each thread
// instead copies its items (up to two units, 64 bytes of input) into its
// own ring of kStages slots in shared memory with asynchronous copies, which
// hold no registers, and finishes the oldest item while the next kStages - 1
// are in flight. A thread reads back only its own slots, so no barrier is
// needed. A token's cos/sin are loaded (L1/L2: the table is small) when the
// lane finishes its first rotary unit of that token.
// Ring depth and blocks per SM, measured on the H200 (perf/RESULTS.md): 2
// slots at 3 blocks of 256 (80 registers, 48 KB of shared memory a block)
// beat 3 slots (no gain: 216 KB of shared memory leaves little L1), 4 slots
// at 2 blocks (3-5 points worse), 2 slots at 2 or 4 blocks (worse; 4 spills).
// The macros exist for such measurements.
#ifndef ROPEKV_VEC_STAGES
#define ROPEKV_VEC_STAGES 2
#endif
#ifndef ROPEKV_STAGED_MIN_BLOCKS
#define ROPEKV_STAGED_MIN_BLOCKS 3
#endif
constexpr int kStages = ROPEKV_VEC_STAGES;
constexpr int kStagedMinBlocks = ROPEKV_STAGED_MIN_BLOCKS;
// 16-byte words per thread and slot: the item's four input vectors, then
// its two destinations and its cos/sin row with both units' (sub, part).
constexpr int kSlotWords = 6;
constexpr std::size_t staged_shared_bytes(unsigned block) {
  return std::size_t(kStages) * kSlotWords * 16 * block;
}
constexpr std::uint32_t kNoPart = 0xffu;

__device__ __forceinline__ uint2 split_ptr(const void* ptr) {
  const std::uint64_t v = reinterpret_cast<std::uint64_t>(ptr);
  return make_uint2(std::uint32_t(v), std::uint32_t(v >> 32));
}
__device__ __forceinline__ char* join_ptr(std::uint32_t lo, std::uint32_t hi) {
  return reinterpret_cast<char*>((std::uint64_t(hi) << 32) | lo);
}

template <DType In, DType Out, DType Cos, int kR, int kN, int kDv>
__global__ void __launch_bounds__(kVecBlock, kStagedMinBlocks)
    fused_vec_staged_kernel(const LaunchParams p, const VecGeometry g) {
  using S = ShapeOf<kR, kN, kDv>;
  extern __shared__ uint4 ring[];
  dependency_wait();
  if (g.early_trigger) dependents_launch();
  const std::uint32_t lane = threadIdx.x % g.team;
  const std::int64_t team_stride = std::int64_t(gridDim.x) * g.teams;
  std::int64_t t = std::int64_t(blockIdx.x) * g.teams + threadIdx.x / g.team;
  if (t >= p.nnz) return;
  const std::uint32_t rot_sub = lane % S::rot_sub(g);
  const Divisors d = load_divisors(p);
  const std::uint32_t B = blockDim.x;
  uint4* const mine = ring + threadIdx.x;  // word w of slot s: mine[(s * kSlotWords + w) * B]

  // The item cursor: token t (planned), its next unit u, the prefetched
  // indices of the team's next token.
  TokenIndices ix = load_token_indices(p, t);
  TokenPlan plan;  // write = false: the first advance plans t
  std::uint32_t u = g.units;
  t -= team_stride;
  bool exhausted = false;
  // Moves to the lane's next item; false when there is none.
  auto advance = [&]() -> bool {
    while (!exhausted && !(plan.write && u < g.units)) {
      t += team_stride;
      if (t >= p.nnz) {
        exhausted = true;
        break;
      }
      plan = finish_plan(p, ix);
      if (plan.bad && lane == 0 && p.skipped_tokens != nullptr) atomicAdd(p.skipped_tokens, 1ull);
      if (t + team_stride < p.nnz) ix = load_token_indices(p, t + team_stride);
      u = lane;
    }
    return !exhausted;
  };
  // Copies the current item into slot s and records how to finish it.
  auto issue = [&](std::uint32_t s) {
    uint4* w = mine + s * kSlotWords * B;
    VecUnit x0, x1;
    const uint4* src = vec_resolve<kR, kN, kDv>(p, g, t, u, plan, x0);
    async_copy16(w, src + x0.sub);
    async_copy16(w + B, src + part_half<kR, kN, kDv>(g, x0.part) / 8 + x0.sub);
    const std::uint32_t u2 = u + g.team;
    x1.dst = nullptr;
    x1.sub = 0;
    x1.part = kNoPart;
    if (u2 < g.units) {
      src = vec_resolve<kR, kN, kDv>(p, g, t, u2, plan, x1);
      async_copy16(w + 2 * B, src + x1.sub);
      async_copy16(w + 3 * B, src + part_half<kR, kN, kDv>(g, x1.part) / 8 + x1.sub);
    }
    const uint2 d0 = split_ptr(x0.dst), d1 = split_ptr(x1.dst);
    const uint2 cs = split_ptr(p.cos_sin + plan.pos * p.cos_row_stride * p.cos.bytes);
    w[4 * B] = make_uint4(d0.x, d0.y, d1.x, d1.y);
    w[5 * B] = make_uint4(cs.x, cs.y, x0.sub | (x0.part << 24), x1.sub | (x1.part << 24));
    u += 2 * g.team;
  };
  float cv[8] = {}, sv[8] = {};
  const char* cos_row = nullptr;  // the token whose cos/sin are in cv, sv
  // Finishes the item in slot s (its copies have landed).
  auto finish = [&](std::uint32_t s) {
    const uint4* w = mine + s * kSlotWords * B;
    const uint4 m0 = w[4 * B], m1 = w[5 * B];
    VecUnit x;
    x.dst = join_ptr(m0.x, m0.y);
    x.sub = m1.z & 0xffffffu;
    x.part = m1.z >> 24;
    x.a = w[0];
    x.b = w[B];
    const char* cs = join_ptr(m1.x, m1.y);
    if (x.part <= kRotK && cs != cos_row) {
      load_unit_cos<Cos>(p.style, S::rot_half(g), cs, rot_sub, cv, sv);
      cos_row = cs;
    }
    vec_finish<In, Out, kR, kN, kDv>(p, g, d, x, cv, sv);
    if ((m1.w >> 24) != kNoPart) {
      x.dst = join_ptr(m0.z, m0.w);
      x.sub = m1.w & 0xffffffu;
      x.part = m1.w >> 24;
      x.a = w[2 * B];
      x.b = w[3 * B];
      vec_finish<In, Out, kR, kN, kDv>(p, g, d, x, cv, sv);
    }
  };

  // Item k's copies form copy group k; at most kStages - 1 groups stay in
  // flight while item `done` is finished.
  std::uint32_t issued = 0, done = 0;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (advance()) issue(issued++ % kStages);
    async_commit();
  }
  while (done < issued) {
    if (advance()) issue(issued++ % kStages);
    async_commit();
    async_wait<kStages - 1>();
    finish(done++ % kStages);
  }
}

// ---------------------------------------------------------------- decode path
// For launches whose one-unit-per-thread grid fits on the device at once
// (decode batches). Block (x, y) takes a chunk of token y's units, each
// thread one unit, so each warp's chain is one unit long. A thread's loads
// go out in three steps, each as soon as what it depends on has arrived:
//   1. its token's index entries and, for a device scale, its part's scale;
//   2. once the index entries say the token is not padding: the unit's two
//      input vectors, its cos/sin values (position) and the page-table
//      look-ups (batch index), all at once;
//   3. rotation, quantization and the two stores.
// Loading the inputs in step 1 (a padding token's rows may be read) measured
// 0.1-0.2 us slower on the H200: their address needs parameter reads that
// hold up the warp's in-order issue ahead of the cos/sin loads.
// Without early_indices the kernel waits for the previous grid (PDL) before
// step 1; with it, steps 1 and 2 but the input loads happen before the wait,
// the input loads and the stores after it.

// The decode kernel's parameters: what it reads, grouped by when. The
// index-resolution members carry LaunchParams' names (load_token_indices,
// finish_plan).
struct DecodeParams {
  IndexArray slot_mapping, batch_indices, kv_positions, positions, kv_indptr, kv_indices;
  Addressing addressing = Addressing::kSlotMapping;
  int page_shift = -1;
  std::int64_t page_size = 0;
  bool checked = false;
  bool early_indices = false;
  std::int64_t batch_size = 0, num_kv_indices = 0, num_pages = 0, max_pos = 0;
  unsigned long long* skipped_tokens = nullptr;

  const char* cos_sin = nullptr;
  std::int64_t cos_row_bytes = 0;
  RopeStyle style = RopeStyle::kNeox;
  std::uint32_t num_q_heads = 0;
  ScaleDivisor div[3] = {};            // host scales (by scale_index), made on the host
  const float* scale_ptr[3] = {};      // device scales (null: use div)
  ScaleConvention convention[3] = {};  // of the device scales
  VecGeometry g = {};
  // Per row part (kRotQ .. kValue): its input rows (2-byte elements, token
  // and head strides) and where its output rows are (1-byte elements), with
  // query outputs addressed as (token, 0, head) and caches as (page, entry,
  // head) through the one cache_offset formula. One array per field, read
  // where it is used.
  const char* src[kParts] = {};
  std::int64_t src_token[kParts] = {}, src_head[kParts] = {};
  char* dst[kParts] = {};
  std::int64_t dst_page[kParts] = {}, dst_entry[kParts] = {}, dst_head[kParts] = {};
};

// The index forms of the decode kernel: any (read from DecodeParams at run
// time), or one of the two common forms fixed at compile time, so that a
// token's index resolution is a few instructions on the critical path:
// slot mapping with int64 slots and positions (vLLM), and a page table with
// int32 arrays and positions (FlashInfer, SGLang); both unchecked, with a
// power-of-two page size.
enum : int { kIndexAny = 0, kIndexSlot64 = 1, kIndexTable32 = 2 };

// The members load_token_indices and finish_plan read, for a fixed form:
// index arrays of fixed widths, no checks.
template <int kForm>
struct FixedIndex {
  static constexpr Addressing addressing =
      kForm == kIndexSlot64 ? Addressing::kSlotMapping : Addressing::kPageTable;
  static constexpr bool checked = false;
  static constexpr std::int64_t batch_size = 0, num_kv_indices = 0, num_pages = 0, max_pos = 0;
  FixedIndexArray<true> slot_mapping;
  FixedIndexArray<false> batch_indices;
  FixedIndexArray<false> kv_positions;
  FixedIndexArray<kForm == kIndexSlot64> positions;
  FixedIndexArray<false> kv_indptr;
  FixedIndexArray<false> kv_indices;
  int page_shift;
  std::int64_t page_size;
};
// A fixed form's page size is a power of two: (page, entry) by shift and
// mask (the overload finish_plan finds for FixedIndex).
template <int kForm>
__device__ __forceinline__ PageEntry page_of(const FixedIndex<kForm>& p, std::int64_t slot) {
  PageEntry pe;
  pe.page = slot >> p.page_shift;
  pe.entry = slot & (p.page_size - 1);
  return pe;
}
template <int kForm>
__device__ __forceinline__ FixedIndex<kForm> fixed_index(const DecodeParams& p) {
  return FixedIndex<kForm>{{p.slot_mapping.data}, {p.batch_indices.data}, {p.kv_positions.data},
                           {p.positions.data},    {p.kv_indptr.data},     {p.kv_indices.data},
                           p.page_shift,          p.page_size};
}

// Token t's index entries and, once loaded, its plan, in form kForm.
template <int kForm>
__device__ __forceinline__ TokenIndices decode_indices(const DecodeParams& p, std::int64_t t) {
  if constexpr (kForm == kIndexAny) {
    return load_token_indices(p, t);
  } else {
    return load_token_indices(fixed_index<kForm>(p), t);
  }
}
template <int kForm>
__device__ __forceinline__ TokenPlan decode_plan(const DecodeParams& p, const TokenIndices& ix) {
  if constexpr (kForm == kIndexAny) {
    return finish_plan(p, ix);
  } else {
    return finish_plan(fixed_index<kForm>(p), ix);
  }
}

template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, int kForm>
__global__ void __launch_bounds__(kVecBlock, kDecodeMinBlocks)
    fused_decode_kernel(const DecodeParams p) {
  using S = ShapeOf<kR, kN, kDv>;
  const std::uint32_t u = blockIdx.x * blockDim.x + threadIdx.x;
  const std::int64_t t = blockIdx.y;
  dependents_launch();
  if (u >= p.g.units) return;
  if (!p.early_indices) dependency_wait();
  // 1. The token's index entries (the head of the chain), then the unit's
  //    input address and scale, which do not depend on them.
  const TokenIndices ix = decode_indices<kForm>(p, t);
  const UnitRef r = unit_ref<kR, kN, kDv>(p.g, p.num_q_heads, u);
  const uint4* x = row_vectors(
      param_at(p.src, r.part) +
      head_offset(t, r.head, param_at(p.src_token, r.part), param_at(p.src_head, r.part)) * 2);
  const std::uint32_t half = part_half<kR, kN, kDv>(p.g, r.part);
  uint4 va = {}, vb = {};
  const std::uint32_t which = scale_index(r.part);
  ScaleDivisor div = param_at(p.div, which);
  const float* scale_ptr = param_at(p.scale_ptr, which);
  const float dev_scale = scale_ptr != nullptr ? *scale_ptr : 0.f;
  // 2. Not padding: the unit's inputs, its cos/sin (checked mode: position
  //    in range first) and the page-table look-ups.
  if (ix.key < 0) return;
  if (!p.early_indices) {
    va = load_readonly(x + r.sub);
    vb = load_readonly(x + half / 8 + r.sub);
  }
  const bool rotary = r.part <= kRotK;
  float cv[8] = {}, sv[8] = {};
  const bool pos_ok = !p.checked || position_in_range(p, ix.pos);
  if (rotary && pos_ok)
    load_unit_cos<Cos>(p.style, S::rot_half(p.g), p.cos_sin + ix.pos * p.cos_row_bytes, r.sub, cv,
                       sv);
  if (scale_ptr != nullptr)  // while the cos/sin loads fly
    div = make_divisor(dev_scale, param_at(p.convention, which));
  const TokenPlan plan = decode_plan<kForm>(p, ix);
  if (!plan.write) {
    if (plan.bad && u == 0 && p.skipped_tokens != nullptr) atomicAdd(p.skipped_tokens, 1ull);
    return;
  }
  if (p.early_indices) {
    dependency_wait();
    va = load_readonly(x + r.sub);
    vb = load_readonly(x + half / 8 + r.sub);
  }
  // 3. The codes, then the address (a page-table entry may still be in
  //    flight while they are computed), then the stores.
  uint2 lo, hi;
#if defined(ROPEKV_EXPERIMENT_DECODE_NO_MATH)
  // Measurement only (wrong output): the same loads and stores, no rotation
  // or quantization; what the arithmetic costs on the chain.
  lo = make_uint2(va.x ^ f32_bits(cv[0]), va.y ^ f32_bits(sv[0]));
  hi = make_uint2(vb.x ^ f32_bits(cv[7]) ^ f32_bits(div.recip), vb.y ^ f32_bits(sv[7]));
#else
  encode_unit<In, Out>(p.style, rotary, div, va, vb, cv, sv, lo, hi);
#endif
  const bool cache = cache_part(r.part);
  const std::int64_t dst_stride[3] = {param_at(p.dst_page, r.part), param_at(p.dst_entry, r.part),
                                      param_at(p.dst_head, r.part)};
  char* dst = param_at(p.dst, r.part) +
              cache_offset(cache ? plan.page : t, cache ? plan.entry : 0, r.head, dst_stride);
  store_unit(dst, half, r.sub, lo, hi);
}

// ---------------------------------------------------------------- generic path
// Element i of a row of dtype D (input and cos/sin dtypes: f32, f16, bf16).
template <DType D>
__device__ __forceinline__ float load_elem(const char* base, std::int64_t i) {
  if constexpr (D == DType::kFloat32) {
    return reinterpret_cast<const float*>(base)[i];
  } else {
    return Format<D>::decode(reinterpret_cast<const std::uint16_t*>(base)[i]);
  }
}

// One FP8 code: the hardware conversion where the vendor layer has one
// (proven equal to the shared encoder), else the shared encoder.
template <DType Out>
__device__ __forceinline__ std::uint8_t encode_fp8(float v) {
  std::uint32_t pair;
  if (hw_encode_fp8x2<Out>(v, 0.f, &pair)) return std::uint8_t(pair & 0xffu);
  return Format<Out>::encode(v);
}

// The scale step of the generic kernels: kIeee when a divisor of the launch
// needs IEEE division (decided once per launch), else the Markstein form.
template <bool kIeee>
__device__ __forceinline__ float scale_step(float v, ScaleDivisor scale) {
  return kIeee ? apply_scale(v, scale) : apply_scale_fast(v, scale);
}

// The stored value of v in output dtype D (FP8: the scale step, then the
// hardware or shared encoder).
template <DType D, bool kIeee>
__device__ __forceinline__ void store_in(char* base, std::int64_t i, float v, ScaleDivisor scale) {
  using Storage = typename Format<D>::storage;
  if constexpr (kQuantized<D>)
    reinterpret_cast<Storage*>(base)[i] = encode_fp8<D>(scale_step<kIeee>(v, scale));
  else
    reinterpret_cast<Storage*>(base)[i] = store_value<D>(v, scale);
}

// The stored value of v in output dtype Out, or in `d` when Out is kInvalid
// (output dtype known at run time only).
template <DType Out, bool kIeee>
__device__ __forceinline__ void store_as(char* base, DType d, std::int64_t i, float v,
                                         ScaleDivisor scale) {
  if constexpr (Out != DType::kInvalid) {
    store_in<Out, kIeee>(base, i, v, scale);
  } else {
    // Per element: a switch (one indexed jump), not dispatch's chain of tests.
    switch (d) {
      case DType::kFloat8E4M3FN: store_in<DType::kFloat8E4M3FN, kIeee>(base, i, v, scale); break;
      case DType::kFloat8E5M2: store_in<DType::kFloat8E5M2, kIeee>(base, i, v, scale); break;
      case DType::kFloat8E4M3FNUZ: store_in<DType::kFloat8E4M3FNUZ, kIeee>(base, i, v, scale); break;
      case DType::kBFloat16: store_in<DType::kBFloat16, kIeee>(base, i, v, scale); break;
      case DType::kFloat16: store_in<DType::kFloat16, kIeee>(base, i, v, scale); break;
      default: store_in<DType::kFloat32, kIeee>(base, i, v, scale); break;
    }
  }
}

// A cos/sin value: fp32 table (kCosF32) or the input dtype's.
template <DType In, bool kCosF32>
__device__ __forceinline__ float load_cos(const char* cs, std::int64_t i) {
  return load_elem < kCosF32 ? DType::kFloat32 : In > (cs, i);
}

// One head row: rotary part (if `rope_dst`), then `copy_n` pass-through
// elements; lanes stride over pairs / elements.
template <DType In, DType Out, bool kCosF32, bool kIeee>
__device__ __forceinline__ void generic_row(const LaunchParams& p, const char* rope_src,
                                            char* rope_dst, const char* copy_src, char* copy_dst,
                                            std::int64_t copy_n, DType out, const char* cs,
                                            ScaleDivisor scale, int lane) {
  if (rope_dst != nullptr) {
    const std::int64_t half = p.rotary_dim / 2;
    for (std::int64_t q = lane; q < half; q += kGroup) {
      const PairIndex ix = pair_index(p.style, q, half);
      const RotatedPair r =
          rotate_pair(load_elem<In>(rope_src, ix.first), load_elem<In>(rope_src, ix.second),
                      load_cos<In, kCosF32>(cs, q), load_cos<In, kCosF32>(cs, half + q));
      store_as<Out, kIeee>(rope_dst, out, ix.first, r.y, scale);
      store_as<Out, kIeee>(rope_dst, out, ix.second, r.yp, scale);
    }
  }
  for (std::int64_t e = lane; e < copy_n; e += kGroup)
    store_as<Out, kIeee>(copy_dst, out, e, load_elem<In>(copy_src, e), scale);
}

// One block per token (grid-stride); groups of kGroup threads take whole
// head rows. In, Out (kInvalid: run time) and the cos/sin dtype are fixed at
// compile time, so the per-element work has no dtype branch.
template <DType In, DType Out, bool kCosF32, bool kIeee>
__device__ __forceinline__ void generic_tokens(const LaunchParams& p, const Divisors& d) {
  const int lane = int(threadIdx.x) % kGroup;
  const int group = int(threadIdx.x) / kGroup;
  const int groups = int(blockDim.x) / kGroup;
  const std::int64_t in_es = p.in.bytes, qo_es = p.q_out.bytes, c_es = p.cache.bytes;
  const std::int64_t rows = p.num_q_heads + p.num_kv_heads * (p.v_dim > 0 ? 2 : 1);
  for (std::int64_t t = blockIdx.x; t < p.nnz; t += gridDim.x) {
    const TokenPlan plan = plan_token(p, t);
    if (!plan.write) {
      if (plan.bad && threadIdx.x == 0 && p.skipped_tokens != nullptr)
        atomicAdd(p.skipped_tokens, 1ull);
      continue;
    }
    const char* cs = p.cos_sin + plan.pos * p.cos_row_stride * p.cos.bytes;
    for (std::int64_t r = group; r < rows; r += groups) {
      if (r < p.num_q_heads) {
        const std::int64_t h = r;
        generic_row<In, Out, kCosF32, kIeee>(
            p, p.q_rope.row(t, h, in_es), p.q_rope_out.row(t, h, qo_es), p.q_nope.row(t, h, in_es),
            p.q_nope_out.row(t, h, qo_es), p.nope_dim, p.q_out.dtype, cs, d.q, lane);
      } else if (r < p.num_q_heads + p.num_kv_heads) {
        const std::int64_t h = r - p.num_q_heads;
        generic_row<In, Out, kCosF32, kIeee>(
            p, p.k_rope.row(t, h, in_es), p.k_cache_rope.row(plan.page, plan.entry, h, c_es),
            p.k_nope.row(t, h, in_es), p.k_cache_nope.row(plan.page, plan.entry, h, c_es),
            p.nope_dim, p.cache.dtype, cs, d.k, lane);
      } else {
        const std::int64_t h = r - p.num_q_heads - p.num_kv_heads;
        generic_row<In, Out, kCosF32, kIeee>(p, nullptr, nullptr, p.v.row(t, h, in_es),
                                             p.v_cache.row(plan.page, plan.entry, h, c_es),
                                             p.v_dim, p.cache.dtype, cs, d.v, lane);
      }
    }
  }
}

// One kernel per (input dtype, FP8 output dtype or kInvalid, cos/sin fp32 or
// input dtype): each gets the registers of its own body. The launcher picks.
template <DType In, DType Out, bool kCosF32>
__global__ void __launch_bounds__(kGenericBlock, kGenericMinBlocks)
    fused_generic_kernel(const LaunchParams p) {
  dependency_wait();
  dependents_launch();
  const Divisors d = load_divisors(p);
  if (needs_ieee(d.q) || needs_ieee(d.k) || needs_ieee(d.v))
    generic_tokens<In, Out, kCosF32, true>(p, d);
  else
    generic_tokens<In, Out, kCosF32, false>(p, d);
}

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
