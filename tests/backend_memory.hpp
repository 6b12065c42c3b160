// The memory of a backend under test: how the test suites allocate, fill
// and read back buffers for it. One instance per backend; the grid suite is
// written once against this interface and instantiated per backend.
#pragma once

#include <cstddef>

#include "ropekv/ropekv.hpp"

namespace ropekv_test {

struct BackendMemory {
  ropekv::Backend backend;
  const char* name;  // "Host", "Cuda", "Hip"
  // Compiled and a device present. When false, device tests GTEST_SKIP()
  // with `why_unavailable`.
  bool (*available)();
  const char* why_unavailable;
  void* (*alloc)(std::size_t bytes);  // never null on success; aborts on failure
  void (*release)(void* p);
  void (*upload)(void* dst, const void* src, std::size_t bytes);    // host -> backend
  void (*download)(void* dst, const void* src, std::size_t bytes);  // backend -> host
  void (*synchronize)();  // waits for all work on the backend's default stream
};

const BackendMemory& host_memory();
#if ROPEKV_ENABLE_CUDA
const BackendMemory& cuda_memory();
#endif
#if ROPEKV_ENABLE_HIP
const BackendMemory& hip_memory();
#endif

}  // namespace ropekv_test
