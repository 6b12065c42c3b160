// The backend interface, the fixed registry (one entry per backend compiled
// in, chosen by the generated config header) and backend selection
// (registry.cpp).
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
  // `state`: null, or the caller's (LaunchState), which the backend may use
  // to keep its decision between the caller's launches.
  Result (*launch)(const LaunchParams& params, LaunchState* state) noexcept;
};

// The registered backend for `id` (a concrete backend), or null if not compiled.
const BackendOps* find_backend(Backend id) noexcept;

// The backend a call goes to: `requested` (kAuto resolved) if it is compiled
// in, else kErrorBackendNotCompiled or kErrorInvalidArgument. Whether it has
// a device is launch_on's concern alone (validation needs none).
Result select_backend(Backend requested, const BackendOps** ops) noexcept;
// run()'s last step, for lowered parameters: kErrorNoDevice without a
// device, nothing for nnz == 0, else the backend's launch.
Result launch_on(const BackendOps& ops, const LaunchParams& p,
                 LaunchState* state = nullptr) noexcept;

// Declared whatever the build (only registry.cpp names them, for the backends
// compiled in): a backend's source then compiles to the same object in every
// combination of backends, which ccache shares between builds.
extern const BackendOps kHostBackendOps;
extern const BackendOps kCudaBackendOps;
extern const BackendOps kHipBackendOps;

}  // namespace detail
}  // namespace ropekv
