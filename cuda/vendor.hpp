// Selected by ROPEKV_GPU_HIP (set by hip/CMakeLists.txt) for HIP builds.
// The thin vendor layer under the shared device source (cuda/kernels/,
// cuda/launcher.cu). Everything vendor-specific that the kernel and its
// launcher use is named here, once for CUDA and (through hip/vendor.hpp)
// once for HIP. The kernel itself assumes no warp width.
#pragma once

#include "ropekv/ropekv.hpp"

#if defined(ROPEKV_GPU_HIP)
#include "hip/vendor.hpp"
#else
#include <cuda_runtime.h>
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#include <cuda_fp8.h>
#endif

#include <cstddef>
#include <cstdint>

namespace ropekv {
namespace detail {
namespace gpu {

using Stream = cudaStream_t;
using Error = cudaError_t;
constexpr Error kSuccess = cudaSuccess;
constexpr Backend kBackendId = Backend::kCuda;
constexpr const char* kVendorName = "CUDA";

inline Error device_count(int* n) { return cudaGetDeviceCount(n); }
inline Error current_device(int* dev) { return cudaGetDevice(dev); }
inline Error multiprocessor_count(int dev, int* n) {
  return cudaDeviceGetAttribute(n, cudaDevAttrMultiProcessorCount, dev);
}
inline Error l2_cache_bytes(int dev, int* n) {
  return cudaDeviceGetAttribute(n, cudaDevAttrL2CacheSize, dev);
}
// The device memory's peak clock (kHz) and bus width (bits).
inline Error memory_clock_khz(int dev, int* n) {
  return cudaDeviceGetAttribute(n, cudaDevAttrMemoryClockRate, dev);
}
inline Error memory_bus_bits(int dev, int* n) {
  return cudaDeviceGetAttribute(n, cudaDevAttrGlobalMemoryBusWidth, dev);
}
// Blocks of `block` threads of `kernel`, each with `smem` bytes of dynamic
// shared memory, that fit on one multiprocessor at once.
inline Error resident_blocks(const void* kernel, int block, std::size_t smem, int* n) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, kernel, block, smem);
}
// Lets `kernel` use `bytes` of dynamic shared memory (above the default 48 KB).
inline Error allow_shared(const void* kernel, std::size_t bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}
inline Error last_error() { return cudaGetLastError(); }
inline const char* error_string(Error e) { return cudaGetErrorString(e); }

// Launches `kernel` on `grid` x `block` with `smem` bytes of dynamic shared
// memory on `stream`, with programmatic dependent launch (sm_90+) when `pdl`
// is set. `args` points at each kernel argument in turn.
inline Error launch(const void* kernel, dim3 grid, dim3 block, std::size_t smem, Stream stream,
                    bool pdl, void** args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelExC(&cfg, kernel, args);
}

#if defined(__CUDACC__)
// Programmatic dependent launch: wait for the previous grid's memory before
// reading inputs; let the next grid start its prologue early. No-ops before
// sm_90 and when launched without the attribute.
__device__ __forceinline__ void dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// CUDA indexes the parameter bank directly (one indexed constant load), and
// so a kernel may take the address of a parameter member.
constexpr bool kParamsAddressable = true;
// The decode kernel's lean bodies (cuda/kernels/decode.cuh, kBodyLean).
constexpr bool kDecodeLeanBodies = true;

// Streaming (evict-first) stores: outputs are never re-read by this kernel.
__device__ __forceinline__ void store_streaming(uint2* p, uint2 v) { __stcs(p, v); }
__device__ __forceinline__ uint2 load_readonly(const uint2* p) { return __ldg(p); }
__device__ __forceinline__ uint4 load_readonly(const uint4* p) { return __ldg(p); }
__device__ __forceinline__ float4 load_readonly(const float4* p) { return __ldg(p); }
// A q, k or v input vector read after a PDL wait that is not at the kernel's
// start: a coherent load (cached in the L2 only). The read-only path's
// (ld.global.nc: for data no grid writes while this one runs) the assembler
// moved above such a wait, where the previous grid may still be writing the
// data; a plain load cost a flat kernel 8 bytes of stack (perf/RESULTS.md).
__device__ __forceinline__ uint4 load_coherent(const uint4* p) { return __ldcg(p); }
// A q, k or v input vector read evict-first (streaming: it is read once), which
// leaves the L2 to the index arrays, the cos/sin rows and the cache lines being
// written (the op floor and the flat layout at large launches: perf/RESULTS.md).
__device__ __forceinline__ uint4 load_input(const uint4* p) { return __ldcs(p); }
// Where `on`, fetches the line holding p into the L2 (no register, nothing
// waits on it): for a load that must itself wait for a test (the decode
// kernel's inputs). Predicated, not branched over, so that the compiler
// keeps it ahead of that test.
__device__ __forceinline__ void prefetch_l2(const void* p, bool on) {
  asm volatile(
      "{\n .reg .pred q;\n setp.ne.u32 q, %1, 0;\n @q prefetch.global.L2 [%0];\n}" ::"l"(p),
      "r"(unsigned(on)));
}

// Asynchronous 16-byte copies from global to shared memory (cp.async,
// sm_80+; L2 only): they hold no registers while in flight. A thread groups
// its copies (async_commit) and waits until at most N of its groups are
// still pending (async_wait<N>); it only ever reads back its own copies.
constexpr bool kAsyncCopy = true;
__device__ __forceinline__ void async_copy16(uint4* smem, const uint4* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
#else
  *smem = __ldg(gmem);
#endif
}
__device__ __forceinline__ void async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// Bulk asynchronous copies (cp.async.bulk, sm_90+) of whole token rows from
// global into shared memory, completing on a shared-memory barrier
// (mbarrier): one thread starts a copy of many bytes, the barrier's phase
// flips when they have landed. kBulkCopy: the vendor has them (the launcher
// picks the bulk kernel only then, and only for kernels built for sm_90+:
// bulk_copy_built).
constexpr bool kBulkCopy = true;
// The row-loop vector kernel (cuda/kernels/vec_rows.cuh) is built here.
constexpr bool kRowsKernel = true;
// The decode kernel's by-role layout for page tables of shapes with
// non-rotary parts (cuda/kernels/decode.cuh): measured faster here.
constexpr bool kDecodeByRole = true;
inline bool bulk_copy_built(const void* kernel) {
  cudaFuncAttributes a = {};
  if (cudaFuncGetAttributes(&a, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.binaryVersion >= 90;
}
#if defined(__CUDACC__)
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return unsigned(__cvta_generic_to_shared(p));
}
// Barrier `bar` expects one arrival a phase (the thread that starts the copies).
__device__ __forceinline__ void barrier_init(std::uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// The arrival of a phase that `bytes` of copies complete.
__device__ __forceinline__ void barrier_expect(std::uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)),
               "r"(bytes)
               : "memory");
#endif
}
// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from
// global to shared memory, completing on `bar`. After shared memory was read
// by ordinary loads (the previous use of the slot), bulk_reuse_fence first.
__device__ __forceinline__ void bulk_copy(void* smem, const void* gmem, unsigned bytes,
                                          std::uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(shared_address(smem)),
      "l"(gmem), "r"(bytes), "r"(shared_address(bar))
      : "memory");
#endif
}
__device__ __forceinline__ void bulk_reuse_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// Waits until phase `parity` (0, 1, 0, ...: the slot's use count mod 2) of
// `bar` has completed.
__device__ __forceinline__ void barrier_wait(std::uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
#endif
}
// The rows kernel's dynamic order: lane 0's value of a group of `width`
// lanes (a power of two up to the warp; `mask` its lanes) to every lane of
// it; a barrier of `threads` threads (a multiple of the warp) on named
// barrier `id` (1..15; 0 is __syncthreads').
__device__ __forceinline__ unsigned group_broadcast(unsigned mask, unsigned v, int width) {
  return __shfl_sync(mask, v, 0, width);
}
__device__ __forceinline__ void named_barrier(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
#endif  // __CUDACC__

// Two floats to two FP8 codes (first in the low byte) with the instruction
// of sm_89+, where it is bit-identical to the shared software encoder for
// e4m3fn and e5m2 (tests/test_cuda_fp8_hw.cu compares the two over every
// float32 bit pattern). Returns false where no hardware path exists.
template <DType Out>
__device__ __forceinline__ bool hw_encode_fp8x2(float a, float b, std::uint32_t* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (Out == DType::kFloat8E4M3FN || Out == DType::kFloat8E5M2) {
    // No NaN fix-up needed: the instruction writes 0x7f for a NaN of either
    // sign and any payload, the library's canonical code.
    float2 v;
    v.x = a;
    v.y = b;
    *out = __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE,
                                    Out == DType::kFloat8E4M3FN ? __NV_E4M3 : __NV_E5M2);
    return true;
  }
#endif
  (void)a;
  (void)b;
  (void)out;
  return false;
}
#endif  // __CUDACC__

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
#endif
