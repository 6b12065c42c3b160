// BackendMemory for a GPU backend, written once over a vendor runtime `Api`
// (cuda_memory.cpp, hip_memory.cpp supply it): device buffers, synchronous
// copies, every runtime error fatal with its message.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "backend_memory.hpp"

namespace ropekv_test {

template <class Api>
struct GpuMemory {
  static void check(typename Api::Error e, const char* what) {
    if (e != Api::kSuccess) {
      std::fprintf(stderr, "%s error in %s: %s\n", Api::kName, what, Api::error_string(e));
      std::abort();
    }
  }
  static bool available() { return ropekv::backend_available(Api::kBackend); }
  static void* alloc(std::size_t bytes) {
    void* p = nullptr;
    check(Api::malloc(&p, bytes == 0 ? 1 : bytes), "malloc");
    return p;
  }
  static void release(void* p) { check(Api::free(p), "free"); }
  static void upload(void* dst, const void* src, std::size_t n) {
    check(Api::copy(dst, src, n, true), "copy to device");
  }
  static void download(void* dst, const void* src, std::size_t n) {
    check(Api::copy(dst, src, n, false), "copy to host");
  }
  static void synchronize() {
    check(Api::last_error(), "kernel launch");
    check(Api::synchronize(), "device synchronize");
  }
  static const BackendMemory& get(const char* name, const char* why_unavailable) {
    static const BackendMemory m = {Api::kBackend, name,    &available, why_unavailable, &alloc,
                                    &release,      &upload, &download,  &synchronize};
    return m;
  }
};

}  // namespace ropekv_test
