// The consumer's own CUDA code: it uses the CUDA runtime that CMake links for
// the program (CMAKE_CUDA_RUNTIME_LIBRARY), which must be the one ropekv links.
#include <cuda_runtime_api.h>

int consumer_cuda_runtime_version() {
  int v = 0;
  return cudaRuntimeGetVersion(&v) == cudaSuccess ? v : -1;
}
