#include "backends/backend.hpp"

namespace ropekv {
namespace detail {

const BackendOps* find_backend(Backend id) noexcept {
  switch (id) {
#if ROPEKV_ENABLE_KOKKOS
    case Backend::kHost:
      return &kHostBackendOps;
#endif
#if ROPEKV_ENABLE_CUDA
    case Backend::kCuda:
      return &kCudaBackendOps;
#endif
#if ROPEKV_ENABLE_HIP
    case Backend::kHip:
      return &kHipBackendOps;
#endif
    default:
      return nullptr;
  }
}

}  // namespace detail
}  // namespace ropekv
