// The backend interface and the fixed registry (one entry per backend
// compiled in, chosen by the generated config header).
#pragma once

#include "detail/params.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv {
namespace detail {

struct BackendOps {
  Backend id;
  // True when the backend can run now (device backends: a device is present).
  bool (*available)() noexcept;
  // Runs validated, lowered parameters. May return kErrorLaunchFailed.
  Result (*launch)(const LaunchParams& params) noexcept;
};

// The registered backend for `id` (a concrete backend), or null if not compiled.
const BackendOps* find_backend(Backend id) noexcept;

#if ROPEKV_ENABLE_KOKKOS
extern const BackendOps kHostBackendOps;
#endif
#if ROPEKV_ENABLE_CUDA
extern const BackendOps kCudaBackendOps;
#endif
#if ROPEKV_ENABLE_HIP
extern const BackendOps kHipBackendOps;
#endif

}  // namespace detail
}  // namespace ropekv
