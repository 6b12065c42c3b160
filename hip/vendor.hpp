// The HIP side of the vendor layer (see cuda/vendor.hpp): what differs
// from CUDA for AMD GPUs. The kernels themselves are cuda/kernels/.
//  * runtime calls: hip* instead of cuda*;
//  * no programmatic dependent launch (the option is accepted and ignored);
//  * FP8: every format through the shared software encoders (e4m3fnuz is the
//    natural format of gfx94x, e4m3fn of gfx950); no hardware conversion is
//    used, so results are bit-identical with the host backend by construction;
//  * wave size 64 on CDNA: the kernels use logical row groups (kGroup) and
//    never assume the hardware width.
#pragma once

#include <hip/hip_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ropekv/ropekv.hpp"

namespace ropekv {
namespace detail {
namespace gpu {

using Stream = hipStream_t;
using Error = hipError_t;
constexpr Error kSuccess = hipSuccess;
constexpr Backend kBackendId = Backend::kHip;
constexpr const char* kVendorName = "HIP";

inline Error device_count(int* n) { return hipGetDeviceCount(n); }
inline Error current_device(int* dev) { return hipGetDevice(dev); }
inline Error multiprocessor_count(int dev, int* n) {
  return hipDeviceGetAttribute(n, hipDeviceAttributeMultiprocessorCount, dev);
}
inline Error l2_cache_bytes(int dev, int* n) {
  return hipDeviceGetAttribute(n, hipDeviceAttributeL2CacheSize, dev);
}
// The device memory's peak clock (kHz) and bus width (bits).
inline Error memory_clock_khz(int dev, int* n) {
  return hipDeviceGetAttribute(n, hipDeviceAttributeMemoryClockRate, dev);
}
inline Error memory_bus_bits(int dev, int* n) {
  return hipDeviceGetAttribute(n, hipDeviceAttributeMemoryBusWidth, dev);
}
inline Error resident_blocks(const void* kernel, int block, std::size_t smem, int* n) {
  return hipOccupancyMaxActiveBlocksPerMultiprocessor(n, kernel, block, smem);
}
inline Error allow_shared(const void* kernel, std::size_t bytes) {
  return hipFuncSetAttribute(kernel, hipFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}
inline Error last_error() { return hipGetLastError(); }
inline const char* error_string(Error e) { return hipGetErrorString(e); }

inline Error launch(const void* kernel, dim3 grid, dim3 block, std::size_t smem, Stream stream,
                    bool /*pdl*/, void** args) {
  const Error e = hipLaunchKernel(kernel, grid, block, args, smem, stream);
  return e != hipSuccess ? e : hipGetLastError();
}

// Kernels read their parameters by value on HIP: indexing them at run time,
// or picking among members' addresses, makes the AMDGPU compiler copy the
// whole parameter struct to scratch memory.
constexpr bool kParamsAddressable = false;
// The decode kernel's lean bodies (cuda/kernels/decode.cuh, kBodyLean): not
// on HIP, where beside the general body they cost scratch memory and no AMD
// GPU has measured them.
constexpr bool kDecodeLeanBodies = false;

__device__ __forceinline__ void dependency_wait() {}
__device__ __forceinline__ void dependents_launch() {}
__device__ __forceinline__ void store_streaming(uint2* p, uint2 v) { *p = v; }
__device__ __forceinline__ uint2 load_readonly(const uint2* p) { return *p; }
__device__ __forceinline__ uint4 load_readonly(const uint4* p) { return *p; }
__device__ __forceinline__ float4 load_readonly(const float4* p) { return *p; }
// A q, k or v input vector read after a PDL wait (CUDA: not the read-only
// path); a plain load.
__device__ __forceinline__ uint4 load_coherent(const uint4* p) { return *p; }
// A q, k or v input vector (CUDA: evict-first; here a plain load, unmeasured).
__device__ __forceinline__ uint4 load_input(const uint4* p) { return *p; }
// An L2 prefetch (CUDA); none here (unmeasured on AMD GPUs).
__device__ __forceinline__ void prefetch_l2(const void*, bool) {}

// No asynchronous global-to-shared copy is used on AMD GPUs: the launcher
// never picks the staged vector kernel (kAsyncCopy), and these plain
// copies only keep the shared source compiling.
constexpr bool kAsyncCopy = false;
__device__ __forceinline__ void async_copy16(uint4* smem, const uint4* gmem) { *smem = *gmem; }
__device__ __forceinline__ void async_commit() {}
template <int N>
__device__ __forceinline__ void async_wait() {}

// No bulk copies either (the launcher never picks the bulk kernel); these
// stubs only keep the shared source compiling.
constexpr bool kBulkCopy = false;
// The row-loop vector kernel is not built for HIP: under the AMD register
// budget it spills (scripts/hip_resources.sh); HIP keeps the vector and
// staged kernels there.
constexpr bool kRowsKernel = false;
// The decode kernel keeps the packed layout for page tables of shapes with
// non-rotary parts: the by-role layout, unmeasured here, would spill 55-56
// SGPRs there (occupancy 8 -> 7 waves, scripts/hip_resources.sh).
constexpr bool kDecodeByRole = false;
inline bool bulk_copy_built(const void*) { return false; }
__device__ __forceinline__ void barrier_init(std::uint64_t*) {}
__device__ __forceinline__ void barrier_expect(std::uint64_t*, unsigned) {}
__device__ __forceinline__ void bulk_copy(void*, const void*, unsigned, std::uint64_t*) {}
__device__ __forceinline__ void bulk_reuse_fence() {}
__device__ __forceinline__ void barrier_wait(std::uint64_t*, unsigned) {}
// The rows kernel's dynamic order (not built here: kRowsKernel).
__device__ __forceinline__ unsigned group_broadcast(unsigned, unsigned v, int) { return v; }
__device__ __forceinline__ void named_barrier(unsigned, unsigned) {}

template <DType Out>
__device__ __forceinline__ bool hw_encode_fp8x2(float, float, std::uint32_t*) {
  return false;
}

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
