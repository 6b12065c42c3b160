// The unfused baseline: the same work done as serving engines do it without
// fusion, in three passes over memory:
//   1. RoPE on the rotary parts of q and k, in the input dtype (bf16). The
//      result goes to scratch buffers q_rot [nnz, Hq, R] and k_rot [nnz, Hk, R]
//      instead of in place, so repeated calls do not drift; the bytes moved
//      are those of the in-place kernel (read q, k rotary parts; write them).
//   2. Quantize q to the output dtype (reads q_rot and the non-rotary part of q).
//   3. Write k (k_rot + non-rotary part) and v into the paged cache with
//      conversion (reshape_and_cache).
// Element math comes from core/detail/element_math.hpp (one definition).
// Supported: bf16 inputs, fp32 cos/sin table, e4m3fn outputs (the canonical
// shapes of the perf suite); anything else returns kErrorUnsupportedDType.
#pragma once

#include "ropekv/ropekv.hpp"

namespace ropekv_perf {

// The one input dtype the baselines take (unfused::supported checks it).
constexpr ropekv::DType kUnfusedInput = ropekv::DType::kBFloat16;

// Host memory, runs on the calling thread.
ropekv::Result unfused_host(const ropekv::Arguments& args, void* q_rot, void* k_rot);

#if ROPEKV_ENABLE_CUDA
// CUDA device memory; three kernels launched on args.stream (graph-capturable:
// no allocation, no synchronisation).
ropekv::Result unfused_cuda(const ropekv::Arguments& args, void* q_rot, void* k_rot);
#endif

}  // namespace ropekv_perf
