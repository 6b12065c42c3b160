// The launcher's arithmetic for a call, host code without device calls:
// whether the vector paths take it, their unit geometry and teams, the
// decode kernel's layout and parameters, the bulk kernel's plan. The
// measurements behind each rule are in perf/RESULTS.md. One source for CUDA
// and HIP.
#pragma once

#include <cstdint>

#include "cuda/kernels/decode.cuh"
#include "cuda/kernels/vec_bulk.cuh"

namespace ropekv {
namespace detail {
namespace gpu {

// The vector paths' conditions: 2-byte inputs, one FP8 output dtype, row
// parts of whole units, aligned rows (see cuda/kernels/).
bool vector_eligible(const LaunchParams& p);

// The unit geometry and teams of p on a device of `sms` multiprocessors;
// *staged: the launch is beyond one wave (the staged kernel's).
VecGeometry geometry(const LaunchParams& p, int sms, bool* staged);
// The rows kernel's team (fused_vec_rows_kernel) for g with hq query heads.
std::uint32_t rows_team(const VecGeometry& g, std::uint32_t hq);

// The decode path's blocks (see fused_decode_kernel's layouts), of whole
// warps, up to max_warps (4: 128 threads; registers are allocated to blocks
// in groups of four warps, so 4-warp blocks waste none; decide() takes 2 or
// 8 where that measured faster, perf/RESULTS.md); `even`: a token's warps
// spread evenly over its blocks (no idle warps in its last block).
//  * packed: the token's units in `chunks` blocks;
//  * by part: each part's units on warps of its own, the warps in blocks;
//    for shapes with non-rotary parts by role (decode_by_role): the query's
//    parts on the first warps, the cache's after them (warp_begin[kRotK]).
struct DecodeLayout {
  unsigned block = 0, chunks = 0;
  std::uint32_t units[kParts] = {};
  std::uint32_t warp_begin[kParts + 1] = {};
};
DecodeLayout decode_layout(const VecGeometry& g, std::uint32_t hq, bool by_part,
                           unsigned max_warps = 4, bool even = false);
// Whether a warp-uniform (by_part) decode kernel of g's shape takes the
// by-role layout (the shapes with non-rotary parts).
inline bool decode_by_role(const VecGeometry& g, bool by_part) { return by_part && g.nope_sub > 0; }
// Whether every stride of p fits in 32 bits (the decode kernel's, DecodePart).
bool strides_fit32(const LaunchParams& p);
// Whether the decode kernel can take p: its strides in 32 bits and a part's
// units in 16 (DecodePart).
bool decode_fits(const LaunchParams& p, const VecGeometry& g);
// The divisor of a 1D grid by `units` threads a token (FlatDivisor,
// ROPEKV_FLAT_QUOTIENT: kernels/decode.cuh), exact for x < 2^31: k = ceil(log2
// units), m = ceil(2^(31+k) / units) < 2^32, s = 31 + k (the flat decode
// layout; the perf suite's flat math floor).
FlatDivisor flat_divisor(std::uint32_t units);
// Whether a 1D grid of `units` threads in blocks of `block` keeps every
// thread's index under 2^31 (flat_divisor's bound).
inline bool flat_grid_fits(std::uint64_t units, unsigned block) {
  return units + block < (std::uint64_t(1) << 31);
}
// The decode kernel's view of p (see DecodeParams), every field written in
// place, in two parts as lowering has them (core/src/lower.cpp): the shape
// (host scales become divisors here, once per decision) and the step's data.
void fill_decode_shape(const LaunchParams& p, const VecGeometry& g, bool by_part, bool flat,
                       DecodeParams& d);
void fill_decode_data(const LaunchParams& p, DecodeParams& d);

constexpr std::uint32_t kBulkSlotMax = 32 * 1024;  // bytes of a bulk ring slot (default)
// The bulk kernel's view of p's inputs (BulkPlan), for `tokens_max` tokens a
// block and `slot_max` bytes a ring slot at most (one token at least): false
// where the input parts of a token do not tile one span with a common token
// stride.
bool bulk_plan(const LaunchParams& p, std::uint32_t tokens_max, std::uint32_t slot_max,
               BulkPlan* b);
// Whether a kept bulk plan holds for p (a call of the same decision key);
// then only its base moves.
bool bulk_holds(const LaunchParams& p, BulkPlan& b);

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
