// The bulk vector kernel (fused_vec_bulk_kernel): the vector path with each
// group of tokens' input rows brought into shared memory by bulk copies
// (where the vendor layer has them: kBulkCopy), so that the bytes in flight
// cost neither registers nor an instruction per 16 bytes.
#pragma once

#include "cuda/kernels/vec_unit.cuh"

namespace ropekv {
namespace detail {
namespace gpu {

// Where a token's inputs lie, for the bulk kernel (the launcher's
// bulk_plan): every input part's rows of token t lie in one span of `span`
// bytes at base + t * token_bytes, which they tile exactly (fused QKV rows,
// any head order); part P's row of head h starts at off[P] + h * head
// stride bytes into it. A block takes `tokens` consecutive tokens at a time
// (its teams), in a ring of kBulkStages slots of tokens * span bytes.
struct BulkPlan {
  const char* base = nullptr;
  std::int64_t token_bytes = 0;
  std::uint32_t span = 0;
  std::uint32_t tokens = 0;
  bool contiguous = false;  // token_bytes == span: a slot is one copy
  // Each part's place in the span and head stride when planned (launcher
  // only: bulk_holds checks a kept plan against them).
  std::uint32_t off[kParts] = {};
  std::int64_t head_stride[kParts] = {};
};
constexpr int kBulkStages = 3;
constexpr std::size_t bulk_shared_bytes(const BulkPlan& b) {
  return std::size_t(kBulkStages) * b.tokens * b.span + kBulkStages * sizeof(std::uint64_t);
}

// Teams of g.team threads, b.tokens teams a block, one token each. A block
// takes token groups blockIdx.x, blockIdx.x + gridDim.x, ...: thread 0
// starts the bulk copies of the next kBulkStages - 1 groups while the block
// works on one; each lane finishes its token's units from shared memory (the
// same math and stores as the other vector kernels). A group's slot is
// refilled once every thread has left it (a block barrier per group).
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv>
__global__ void __launch_bounds__(kVecBlock, 2)
    fused_vec_bulk_kernel(const LaunchParams p, const VecGeometry g, const BulkPlan b) {
  using S = ShapeOf<kR, kN, kDv>;
  extern __shared__ uint4 ring[];  // kBulkStages slots, then the barriers
  const std::uint32_t slot_bytes = b.tokens * b.span;
  char* const slots = reinterpret_cast<char*>(ring);
  std::uint64_t* const bars =
      reinterpret_cast<std::uint64_t*>(slots + std::size_t(kBulkStages) * slot_bytes);
  const std::int64_t groups = (p.nnz + b.tokens - 1) / b.tokens;
  if (threadIdx.x == 0)
    for (int s = 0; s < kBulkStages; ++s) barrier_init(&bars[s]);
  __syncthreads();
  dependency_wait();
  if (g.early_trigger) dependents_launch();
  // Thread 0: start the copies of group `grp` into slot s. (The plan's fields
  // by value: a reference into a kernel parameter makes a local copy of it.)
  const std::uint32_t tokens = b.tokens, span = b.span;
  const std::int64_t token_bytes = b.token_bytes, nnz = p.nnz;
  const char* const base = b.base;
  const bool contiguous = b.contiguous;
  auto fill = [=](std::int64_t grp, int s) {
    const std::int64_t t0 = grp * tokens;
    const std::int64_t n = nnz - t0 < tokens ? nnz - t0 : tokens;
    char* dst = slots + std::size_t(s) * slot_bytes;
    const char* src = base + t0 * token_bytes;
    barrier_expect(&bars[s], unsigned(n) * span);
    if (contiguous) {
      bulk_copy(dst, src, unsigned(n) * span, &bars[s]);
    } else {
      for (std::int64_t j = 0; j < n; ++j)
        bulk_copy(dst + j * span, src + j * token_bytes, span, &bars[s]);
    }
  };
  if (threadIdx.x == 0)
    for (int s = 0; s < kBulkStages - 1; ++s)
      if (blockIdx.x + std::int64_t(s) * gridDim.x < groups) fill(blockIdx.x + s * gridDim.x, s);
  const std::uint32_t lane = threadIdx.x % g.team, team = threadIdx.x / g.team;
  const std::uint32_t rot_sub = lane % S::rot_sub(g);
  const Divisors d = load_divisors(p);
  std::int64_t grp = blockIdx.x;
  TokenIndices ix;
  if (grp < groups && grp * b.tokens + team < p.nnz)
    ix = load_token_indices(p, grp * b.tokens + team);
  for (std::uint32_t k = 0; grp < groups; ++k, grp += gridDim.x) {
    const int s = int(k % kBulkStages);
    // The group kBulkStages - 1 ahead goes into the slot the previous group
    // left (every thread is past it: the barrier at the end of that group).
    const std::int64_t ahead = grp + std::int64_t(kBulkStages - 1) * gridDim.x;
    if (threadIdx.x == 0 && ahead < groups) fill(ahead, int((k + kBulkStages - 1) % kBulkStages));
    const std::int64_t t = grp * b.tokens + team;
    const bool mine = t < p.nnz;
    TokenPlan plan;
    if (mine) plan = finish_plan(p, ix);
    const std::int64_t next = t + std::int64_t(gridDim.x) * b.tokens;
    if (next < p.nnz) ix = load_token_indices(p, next);  // in flight with this group
    float cv[8] = {}, sv[8] = {};
    if (mine && plan.write && lane < g.rot_units)
      load_unit_cos<Cos>(p.style, S::rot_half(g),
                         p.cos_sin + plan.pos * p.cos_row_stride * p.cos.bytes, rot_sub, cv, sv);
    barrier_wait(&bars[s], (k / kBulkStages) & 1u);
    if (mine && plan.write) {
      const char* row = slots + std::size_t(s) * slot_bytes + std::size_t(team) * b.span;
      for (std::uint32_t u = lane; u < g.units; u += g.team) {
        // The unit's destination and part, and its input row's place in the
        // token's span (the same offset as in global memory: the span tiles it).
        VecUnit x;
        const char* in =
            reinterpret_cast<const char*>(vec_resolve<kR, kN, kDv>(p, g, t, u, plan, x));
        const uint4* v = reinterpret_cast<const uint4*>(row + (in - (b.base + t * b.token_bytes)));
        x.a = v[x.sub];
        x.b = v[part_half<kR, kN, kDv>(g, x.part) / 8 + x.sub];
        vec_finish<In, Out, kR, kN, kDv>(p, g, d, x, cv, sv);
      }
    } else if (mine && plan.bad && lane == 0 && p.skipped_tokens != nullptr) {
      atomicAdd(p.skipped_tokens, 1ull);
    }
    __syncthreads();  // the slot is free again
    if (threadIdx.x == 0) bulk_reuse_fence();
  }
}

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
