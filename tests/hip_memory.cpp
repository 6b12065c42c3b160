// BackendMemory for the HIP backend: hipMalloc'd buffers, synchronous copies.
#include <hip/hip_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "backend_memory.hpp"

namespace ropekv_test {
namespace {

void check(hipError_t e, const char* what) {
  if (e != hipSuccess) {
    std::fprintf(stderr, "HIP error in %s: %s\n", what, hipGetErrorString(e));
    std::abort();
  }
}
bool available() { return ropekv::backend_available(ropekv::Backend::kHip); }
void* alloc(std::size_t bytes) {
  void* p = nullptr;
  check(hipMalloc(&p, bytes == 0 ? 1 : bytes), "hipMalloc");
  return p;
}
void release(void* p) { check(hipFree(p), "hipFree"); }
void upload(void* dst, const void* src, std::size_t n) {
  check(hipMemcpy(dst, src, n, hipMemcpyHostToDevice), "hipMemcpy H2D");
}
void download(void* dst, const void* src, std::size_t n) {
  check(hipMemcpy(dst, src, n, hipMemcpyDeviceToHost), "hipMemcpy D2H");
}
void synchronize() {
  check(hipGetLastError(), "kernel launch");
  check(hipDeviceSynchronize(), "hipDeviceSynchronize");
}

}  // namespace

const BackendMemory& hip_memory() {
  static const BackendMemory m = {ropekv::Backend::kHip,
                                  "Hip",
                                  &available,
                                  "no AMD GPU present: HIP tests skipped (not passed)",
                                  &alloc,
                                  &release,
                                  &upload,
                                  &download,
                                  &synchronize};
  return m;
}

}  // namespace ropekv_test
