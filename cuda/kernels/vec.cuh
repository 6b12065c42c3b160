// The vector kernel (fused_vec_kernel): aligned shapes, launches beyond
// what the decode kernel takes; teams of threads loop over tokens.
#pragma once

#include "cuda/kernels/vec_unit.cuh"

namespace ropekv {
namespace detail {
namespace gpu {

// Blocks per multiprocessor the vector kernel is compiled for: a cap of 80
// registers, the fastest measured (perf/RESULTS.md).
constexpr int kVecMinBlocks = 3;

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

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
