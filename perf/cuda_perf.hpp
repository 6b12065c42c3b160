// GPU timing of the perf suite (perf/cuda_timing.cu), behind a plain C++
// interface so that ropekv_perf.cpp needs no CUDA header. Compiled only when
// ROPEKV_ENABLE_CUDA.
#pragma once

#include <cstdint>
#include <string>

#include "perf_problem.hpp"

namespace ropekv_perf {

enum class GpuVariant {
  kFused,     // ropekv::run(args, Backend::kCuda)
  kFusedPdl,  // the same with programmatic dependent launch
  kUnfused,   // unfused_cuda: RoPE, quantize, reshape_and_cache kernels
  // kFused / kUnfused with every call on the same buffer set: inputs, outputs
  // and their pages stay in the L2 and the TLBs, as when q, k and v come
  // straight from the previous kernel of a serving stream.
  kFusedHot,
  kUnfusedHot,
  // cudaMemcpyAsync D2D of half the op's byte model (bytes read + written =
  // the op's), rotated over buffers like kFused: what a plain copy of the
  // same size achieves in the same graph method.
  kCopySameSize,
};
// The unfused variants, and those on one buffer set.
inline bool is_unfused(GpuVariant v) {
  return v == GpuVariant::kUnfused || v == GpuVariant::kUnfusedHot;
}
inline bool is_hot(GpuVariant v) {
  return v == GpuVariant::kFusedHot || v == GpuVariant::kUnfusedHot;
}

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
};

// True when a CUDA device can run the backend; `description` gets the device
// name or the reason there is none.
bool cuda_present(std::string* description);
// Device-to-device cudaMemcpyAsync of 1 GiB timed with events, median of 9,
// bytes read + written; < 0 on error (`error` says why).
double cuda_copy_gbps(std::string* error);
// Builds (or reuses) the device buffers of (shape, nnz), captures a graph of
// back-to-back calls rotating over enough buffer sets to leave L2 (or as many
// as 1000 calls allow), replays it and returns the median time per call.
GpuTiming cuda_time(const Shape& s, std::int64_t nnz, GpuVariant variant);
// Frees the cached device buffers.
void cuda_release();

}  // namespace ropekv_perf
