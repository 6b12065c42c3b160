// The GPU launcher's decision for one call, separated from the launch
// itself: the backend's launch is prepare_launch + launch_prepared. The perf
// suite uses the two halves to time a bare launch of the very kernel a call
// takes (CPU time per call) and sets measurement overrides (Tuning).
// One source for CUDA and HIP.
#pragma once

#include <cstddef>

#include "cuda/kernels/decode.cuh"
#include "cuda/kernels/generic.cuh"
#include "cuda/kernels/vec.cuh"
#include "cuda/kernels/vec_bulk.cuh"
#include "cuda/kernels/vec_rows.cuh"
#include "cuda/kernels/vec_staged.cuh"

namespace ropekv {
namespace detail {
namespace gpu {

enum class Path : int {
  kDecode,   // fused_decode_kernel: one unit per thread, the launch fits at once
  kVector,   // fused_vec_kernel: teams loop over tokens
  kStaged,   // fused_vec_staged_kernel: the same with asynchronous copies
  kBulk,     // fused_vec_bulk_kernel: the same with bulk copies of whole token rows
  kRows,     // fused_vec_rows_kernel: a loop per row part (specialised shapes, larger launches)
  kGeneric,  // fused_generic_kernel: any valid shape and alignment
};
const char* to_string(Path path) noexcept;

struct PreparedLaunch {
  Path path = Path::kGeneric;
  const void* kernel = nullptr;
  dim3 grid, block;
  std::size_t smem = 0;
  Stream stream = nullptr;
  bool pdl = false;
  // The kernel's arguments: (*params, geometry) for the vector kernels,
  // (decode) for the decode kernel, (*params) for the generic kernel.
  // `params` is prepare_launch's argument: it must outlive the launch.
  const LaunchParams* params = nullptr;
  VecGeometry geometry = {};
  bool decode_by_part = false;  // by part or role (fused_decode_kernel, flat: by role)
  bool decode_flat = false;     // over a 1D grid (fused_decode_flat_kernel)
  bool decode_stream = false;   // flat: inputs loaded evict-first (its own kernel)
  bool decode_pair = false;     // flat: two units a thread (its own kernel)
  bool rows_dynamic = false;    // the rows kernel in the dynamic token order (its own kernel)
  DecodeParams decode;
  BulkPlan bulk;  // the bulk kernel's third argument
};
// The path's name, "decode-flat" for the decode kernel's flat layout (with
// two units a thread "decode-flat-pair"),
// "rows-dynamic" for the rows kernel's dynamic order (tests, the perf suite's
// labels).
const char* path_name(const PreparedLaunch& l) noexcept;

// Chooses the kernel, geometry and grid of p and fills `out` (which keeps a
// pointer to p); launches nothing. Fails only without a current device.
// With `state` (a caller's, see LaunchState), the decision kept there is
// reused where it holds, as the backend's launch with that state does.
Result prepare_launch(const LaunchParams& p, PreparedLaunch* out,
                      LaunchState* state = nullptr) noexcept;
// Launches a prepared launch: one vendor launch call, nothing else.
Error launch_prepared(const PreparedLaunch& l) noexcept;

// Overrides of the launcher's rules, for measurements only (the library
// itself never sets them). 0 = the rule.
struct Tuning {
  // 1: the decode kernel wherever it can run; -1: never; 2: as 1, and its
  // packed layout flat (the tokens' units back to back over a 1D grid);
  // 3: the rule's choice, flat (measurements); 4: as 2, the by-role layout's
  // (or packed) layout's kernel with evict-first inputs (tests).
  int decode = 0;
  int pdl_trigger =
      0;  // vector kernels under PDL: 1: let dependents launch at block start; -1: at exit
  // 1: the bulk kernel for every vector-path launch it takes (a measurement);
  // N > 1: the same with ring slots of N KiB (one token's rows at least).
  int bulk = 0;
  // 1: the rows kernel for every vector-path launch of a specialised shape;
  // -1: never (the vector or staged kernel instead).
  int rows = 0;
  // N > 0: decode blocks of at most N warps, a token's warps spread evenly
  // over its blocks; -1: at most 4 warps, never the wider blocks of the rule.
  int decode_warps = 0;
  // Page tables past the decode kernel's grid in the flat layout (by role),
  // their inputs evict-first past one L2: up to N times the L2's bytes a
  // launch (N > 0; the rule: 4), or never (-1).
  int flat_tables = 0;
  // Slot mapping the same (its packed layout): up to N L2s (N > 0) or never
  // (-1); the rule: four on devices of low DRAM bandwidth a multiprocessor.
  int flat_slots = 0;
  // The rows kernel's grid: N blocks (N > 0, past one wave too), or the
  // fewest blocks that keep one wave's rounds a team (-1).
  int rows_blocks = 0;
  // N > 0: the rows kernel's teams take their tokens past the third from a
  // device counter, in the order they ask, where a team has N tokens or more
  // (a measurement: the counter is one a device, so launches that take it
  // must not run at once on concurrent streams).
  int rows_dynamic = 0;
  // The rows kernel's guided order: one wave of blocks takes all tokens but
  // about N% of them, which blocks of one token a team take after it (N > 0;
  // -1 never; the rule: 10 on devices of low DRAM bandwidth a multiprocessor,
  // else never; not with rows_blocks or rows_dynamic).
  int rows_guided = 0;
  // 1: the flat layout with two units a thread wherever the flat layout is
  // taken (its own kernels).
  int flat_pair = 0;
};
void set_tuning(const Tuning& t) noexcept;
Tuning tuning() noexcept;
#ifdef ROPEKV_ROWS_TRACE
// A measurement build's rows-kernel trace (cuda/kernels/vec_rows.cuh):
// kRowsTraceTeams x kRowsTraceSlots values.
void rows_trace_copy(unsigned long long* out);
#endif

// The launcher's occupancy cache (one entry per (kernel, block size,
// device), in the order they were made), for tests: its size, and the
// position of (kernel, block, dev) in it (-1 if absent) with the dynamic
// shared memory the kernel was allowed on dev when that entry was made.
struct ResidentCacheProbe {
  int entries = 0;
  int position = -1;
  std::size_t shared = 0;
};
ResidentCacheProbe probe_resident_cache(const void* kernel, unsigned block, int dev) noexcept;

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
