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

// Declared whatever the build (only registry.cpp names them, for the backends
// compiled in): a backend's source then compiles to the same object in every
// combination of backends, which ccache shares between builds.
extern const BackendOps kHostBackendOps;
extern const BackendOps kCudaBackendOps;
extern const BackendOps kHipBackendOps;

}  // namespace detail
}  // namespace ropekv
