// BackendMemory for the CUDA backend (the shared body is gpu_memory.hpp).
#include <cuda_runtime_api.h>

#include "gpu_memory.hpp"

namespace ropekv_test {
namespace {
struct CudaApi {
  using Error = cudaError_t;
  static constexpr Error kSuccess = cudaSuccess;
  static constexpr ropekv::Backend kBackend = ropekv::Backend::kCuda;
  static constexpr const char* kName = "CUDA";
  static const char* error_string(Error e) { return cudaGetErrorString(e); }
  static Error malloc(void** p, std::size_t n) { return cudaMalloc(p, n); }
  static Error free(void* p) { return cudaFree(p); }
  static Error copy(void* d, const void* s, std::size_t n, bool to_device) {
    return cudaMemcpy(d, s, n, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
  }
  static Error last_error() { return cudaGetLastError(); }
  static Error synchronize() { return cudaDeviceSynchronize(); }
};
}  // namespace

const BackendMemory& cuda_memory() {
  return GpuMemory<CudaApi>::get("Cuda", "no CUDA device present: CUDA tests skipped (not passed)");
}

}  // namespace ropekv_test
