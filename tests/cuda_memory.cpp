// BackendMemory for the CUDA backend: cudaMalloc'd buffers, synchronous copies.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include "backend_memory.hpp"

namespace ropekv_test {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
    std::abort();
  }
}
bool available() { return ropekv::backend_available(ropekv::Backend::kCuda); }
void* alloc(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
  return p;
}
void release(void* p) { check(cudaFree(p), "cudaFree"); }
void upload(void* dst, const void* src, std::size_t n) {
  check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}
void download(void* dst, const void* src, std::size_t n) {
  check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}
void synchronize() {
  check(cudaGetLastError(), "kernel launch");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

}  // namespace

const BackendMemory& cuda_memory() {
  static const BackendMemory m = {ropekv::Backend::kCuda,
                                  "Cuda",
                                  &available,
                                  "no CUDA device present: CUDA tests skipped (not passed)",
                                  &alloc,
                                  &release,
                                  &upload,
                                  &download,
                                  &synchronize};
  return m;
}

}  // namespace ropekv_test
