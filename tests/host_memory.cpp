// BackendMemory for the host backend: plain host allocations, memcpy copies.
#include <cstdlib>
#include <cstring>

#include "backend_memory.hpp"

namespace ropekv_test {
namespace {

bool available() { return ropekv::backend_available(ropekv::Backend::kHost); }
// 256-byte aligned, like cudaMalloc/hipMalloc, so that a case's alignments are
// the same on every backend.
void* alloc(std::size_t bytes) {
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (p == nullptr) std::abort();
  return p;
}
void release(void* p) { std::free(p); }
void copy(void* dst, const void* src, std::size_t n) { std::memcpy(dst, src, n); }
void synchronize() {}  // the host backend returns when it is done

}  // namespace

const BackendMemory& host_memory() {
  static const BackendMemory m = {ropekv::Backend::kHost,
                                  "Host",
                                  &available,
                                  "the host backend is not compiled in (ROPEKV_ENABLE_KOKKOS=OFF)",
                                  &alloc,
                                  &release,
                                  &copy,
                                  &copy,
                                  &synchronize};
  return m;
}

}  // namespace ropekv_test
