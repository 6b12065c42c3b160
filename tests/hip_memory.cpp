// BackendMemory for the HIP backend (the shared body is gpu_memory.hpp).
#include <hip/hip_runtime.h>

#include "gpu_memory.hpp"

namespace ropekv_test {
namespace {
struct HipApi {
  using Error = hipError_t;
  static constexpr Error kSuccess = hipSuccess;
  static constexpr ropekv::Backend kBackend = ropekv::Backend::kHip;
  static constexpr const char* kName = "HIP";
  static const char* error_string(Error e) { return hipGetErrorString(e); }
  static Error malloc(void** p, std::size_t n) { return hipMalloc(p, n); }
  static Error free(void* p) { return hipFree(p); }
  static Error copy(void* d, const void* s, std::size_t n, bool to_device) {
    return hipMemcpy(d, s, n, to_device ? hipMemcpyHostToDevice : hipMemcpyDeviceToHost);
  }
  static Error last_error() { return hipGetLastError(); }
  static Error synchronize() { return hipDeviceSynchronize(); }
};
}  // namespace

const BackendMemory& hip_memory() {
  return GpuMemory<HipApi>::get("Hip", "no AMD GPU present: HIP tests skipped (not passed)");
}

}  // namespace ropekv_test
