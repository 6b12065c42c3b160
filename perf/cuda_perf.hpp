// GPU timing of the perf suite (perf/cuda_timing.cu, cuda_floors.cu,
// cuda_cpu_time.cu), behind a plain C++ interface so that ropekv_perf.cpp
// needs no CUDA header. Compiled only when ROPEKV_ENABLE_CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "perf_problem.hpp"

namespace ropekv_perf {

// What one GPU benchmark row times.
enum class GpuKind {
  kFused,    // ropekv::run(args, Backend::kCuda)
  kUnfused,  // unfused_cuda: RoPE, quantize, reshape_and_cache kernels
  // The floor of the op's chain of dependent loads (perf/cuda_floors.cu): per
  // token its index entries, then the cos/sin row (and for page tables the
  // indptr and page entries), then one byte stored per output row.
  kFloor,
  // The floor with every byte of the op moved at the decode kernel's grain
  // (16-element units: two 16-byte input loads, four of cos/sin for rotary
  // units, two 8-byte stores), XOR instead of rotation and quantization.
  kDataFloor,
  // cudaMemcpyAsync D2D of half the op's byte model (bytes read + written =
  // the op's): what a plain copy of the same size achieves in the same graph
  // method.
  kCopy,
  // A kernel that only moves the op's q, k and v bytes (two 16-byte loads and
  // one 16-byte store per 16-element unit; no index, no cos/sin); with PDL it
  // waits for the previous grid before its loads.
  kMove,
  // The move floor with the op's arithmetic (the library's element math: a
  // unit's rotation for as many units as the op rotates, the scale step,
  // FP8 conversion, two 8-byte stores); cos/sin of one row loaded before the
  // PDL wait, no index, no page look-up.
  kMathFloor,
  // CPU time per call on the calling thread, no graph: ropekv::run(), and a
  // bare launch of the kernel that run() launches (same grid, arguments).
  // kCpuRun times, in alternating batches, the bare launch, the launcher's
  // decision + launch, lowering + decision + launch, run() and
  // PreparedCall::run(), and reports each step's share.
  kCpuRun,
  kCpuBareLaunch,
};

struct GpuCase {
  GpuKind kind = GpuKind::kFused;
  bool page_table = false;  // page-table addressing (else slot mapping)
  // Every call on the same buffer set: inputs, outputs and their pages stay
  // in the L2 and the TLBs, as when q, k and v come straight from the
  // previous kernel of a serving stream. Otherwise calls rotate over enough
  // buffer sets to leave the L2.
  bool hot = false;
  bool pdl = false;    // programmatic dependent launch
  bool early = false;  // with pdl: indices_ready_before_previous_kernel
  int block = 0;       // kMathFloor: threads a block (a row per size; the floor is their best)
  bool flat = false;   // kMathFloor: one 1D grid over all tokens' units (else blocks a token)
  // kMathFloor, flat: the op floor (the op's whole work, one unit a thread: its index
  // entries, cos/sin at the position, page look-ups, and stores into its own destinations)
  bool op = false;
  // kMove: with less arithmetic than the op needs (rotation by one cos/sin pair with the
  // scale folded in, as many units rotated as the op rotates, e4m3fn conversion)
  bool arith = false;
  int units = 1;  // the op floor: units a thread (1, 2 or 4), their loads issued together
  // kMathFloor, 2D grid: the chain floor (the floor's index entries, then cos/sin at the
  // position, before the arithmetic; contiguous output, no page look-up)
  bool chain = false;
};
// The row's backend name:
// cuda[-unfused|-floor|-datafloor|-copy|-move|-movearith|-mathfloor-[flat]bN|-chainfloor-bN|
// -opfloor-bN[-uU]|-cpu-run|-cpu-launch]
// [-hot][-pdl[-early]][-pt].
std::string case_name(const GpuCase& c);

struct GpuTiming {
  bool ok = false;
  std::string error;
  double us_per_call = 0;     // median over the timed replays, per call
  double spread_pct = 0;      // (slowest - fastest replay) / median
  double working_set_mb = 0;  // byte-model bytes of the distinct buffer sets rotated through
  int sets = 0;               // distinct input/output buffer sets in the graph
  int calls = 0;              // calls captured in the graph
  int replays = 0;            // timed replays
  std::string check;          // what was checked before timing
  std::string path;           // kFused: the kernel path the launcher took
  // Further counters of the row (name, value), e.g. kCpuRun's breakdown.
  std::vector<std::pair<std::string, double>> counters;
};

// True when a CUDA device can run the backend; `description` gets the device
// name or the reason there is none.
bool cuda_present(std::string* description);
// Device-to-device cudaMemcpyAsync of 1 GiB timed with events, median of 9,
// bytes read + written; < 0 on error (`error` says why).
double cuda_copy_gbps(std::string* error);
// Builds (or reuses) the device buffers of (shape, nnz), captures a graph of
// back-to-back calls rotating over enough buffer sets to leave L2 (or as many
// as 1000 calls allow; hot: one set), replays it and returns the median time
// per call. kCpu*: the median CPU time per call over batches of calls.
GpuTiming cuda_time(const Shape& s, std::int64_t nnz, const GpuCase& c);
// Frees the cached device buffers.
void cuda_release();
// Applies measurement overrides of the launcher's rules from a string such
// as "decode=-1,pdl_trigger=1" (see cuda/launcher.hpp); returns false on a
// malformed string.
bool set_cuda_tuning(const std::string& spec);

}  // namespace ropekv_perf
