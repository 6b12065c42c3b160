// One call of the CUDA backend captured into a graph on a stream of its own
// (made on the calling thread's current device), for the CUDA runtime and
// multi-device tests. `mode` is the capture's: the default forbids unsafe
// calls in every thread during the capture; ThreadLocal only in this one
// (for captures made beside other threads' work).
#pragma once

#include <cuda_runtime_api.h>

#include "ropekv/ropekv.hpp"

namespace ropekv_test {

struct CapturedCall {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ropekv::Result result;
  cudaError_t error = cudaSuccess;  // the first failing capture step, if any
  explicit CapturedCall(ropekv::Arguments a,
                        cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal) {
    error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (error == cudaSuccess) error = cudaStreamBeginCapture(stream, mode);
    if (error != cudaSuccess) return;
    a.stream = stream;
    result = ropekv::run(a, ropekv::Backend::kCuda);
    error = cudaStreamEndCapture(stream, &graph);
    if (error == cudaSuccess) error = cudaGraphInstantiate(&exec, graph, 0);
  }
  ~CapturedCall() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  CapturedCall(const CapturedCall&) = delete;
  CapturedCall& operator=(const CapturedCall&) = delete;
};

}  // namespace ropekv_test
