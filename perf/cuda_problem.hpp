// The internals the CUDA timing files of the perf suite share: the device buffers of a
// (shape, nnz) problem, the CUDA error helpers, and the functions one file calls in another.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda_perf.hpp"
#include "perf_problem.hpp"

namespace ropekv_perf {

inline std::string cuda_error(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}
// On a CUDA error: *error says which call failed and why, and the function returns false.
#define PERF_CUDA_TRY(expr)           \
  do {                                \
    const cudaError_t e_ = (expr);    \
    if (e_ != cudaSuccess) {          \
      *error = cuda_error(#expr, e_); \
      return false;                   \
    }                                 \
  } while (0)

// A failed launch's Result for error e (success: none).
inline ropekv::Result error_result(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return ropekv::Result{};
  ropekv::Result r;
  r.status = ropekv::Status::kErrorLaunchFailed;
  std::snprintf(r.message, sizeof r.message, "%s: %s", what, cudaGetErrorString(e));
  return r;
}

// A device allocation freed on destruction.
struct DeviceBuffer {
  void* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

// The device side of one (shape, nnz): `sets` copies of the input and output
// buffers (and the unfused scratch), one copy of the tables and indices.
struct DeviceProblem {
  std::string key;
  const Shape* shape = nullptr;
  Batch batch;
  Sizes sizes;
  int sets = 0;
  double set_bytes = 0;  // byte-model bytes of one call
  DeviceBuffer pool, shared;
  DeviceBuffer copy_src, copy_dst;  // kCopy: `sets` slices of copy_bytes each
  std::size_t copy_bytes = 0;
  std::vector<Buffers> bufs;
  std::vector<void*> q_rot, k_rot;
  std::vector<ropekv::Arguments> args[2];  // [0] slot mapping, [1] page table
  bool checked[2] = {false, false};        // fused output compared with the host backend

  ~DeviceProblem() { cudaDeviceSynchronize(); }
};

// A stream destroyed with its owner.
struct OwnedStream {
  cudaStream_t s = nullptr;
  ~OwnedStream() {
    if (s != nullptr) cudaStreamDestroy(s);
  }
};

// cuda_timing.cu: a case's arguments on buffer set `set`, and the check before timing a case.
ropekv::Arguments case_arguments(const DeviceProblem& dp, int set, const GpuCase& c,
                                 cudaStream_t stream);
bool check_output(DeviceProblem& dp, const GpuCase& c, cudaStream_t stream, std::string* label,
                  std::string* error);

// cuda_floors.cu: the reference kernels timed beside the op (GpuKind::kFloor, kDataFloor, kMove,
// kMathFloor).
ropekv::Result launch_floor(const ropekv::Arguments& a, const Shape& s, cudaStream_t stream);
ropekv::Result launch_data_floor(const ropekv::Arguments& a, const Shape& s, const Sizes& z,
                                 cudaStream_t stream);
ropekv::Result launch_move(DeviceProblem& dp, int set, const GpuCase& c, cudaStream_t stream);
ropekv::Result launch_math_floor(const ropekv::Arguments& a, DeviceProblem& dp, int set,
                                 const GpuCase& c, cudaStream_t stream);

// cuda_cpu_time.cu: the kCpuRun and kCpuBareLaunch rows (CPU time per call, no graph).
bool time_cpu(DeviceProblem& dp, const GpuCase& c, GpuTiming* out, std::string* error);

}  // namespace ropekv_perf
