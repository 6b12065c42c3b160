// The staged vector kernel (fused_vec_staged_kernel): the vector path for
// large launches, its inputs through a per-thread ring in shared memory by
// asynchronous copies (where the vendor layer has them; HIP has not).
#pragma once

#include "cuda/kernels/vec_unit.cuh"

namespace ropekv {
namespace detail {
namespace gpu {

// For launches beyond one wave of decode-sized teams, where the kernel
// above is bound by the bytes each SM keeps in flight (its loads hold
// registers until used). Same teams, units, math and stores; each thread
// instead copies its items (up to two units, 64 bytes of input) into its
// own ring of kStages slots in shared memory with asynchronous copies, which
// hold no registers, and finishes the oldest item while the next kStages - 1
// are in flight. A thread reads back only its own slots, so no barrier is
// needed. A token's cos/sin are loaded (L1/L2: the table is small) when the
// lane finishes its first rotary unit of that token.
// Ring depth and blocks per SM: 2 slots at 3 blocks of 256 (80 registers,
// 48 KB of shared memory a block), the fastest measured (perf/RESULTS.md);
// the macros exist for such measurements.
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

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
