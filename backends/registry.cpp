// The fixed backend registry (one entry per backend compiled in, chosen by
// the generated config header) and backend selection: kAuto's order, the
// once-per-process device query, the checks before a launch.
#include <atomic>

#include "backends/backend.hpp"
#include "detail/result.hpp"

namespace ropekv {
namespace detail {

const BackendOps* find_backend(Backend id) noexcept {
  switch (id) {
#if ROPEKV_ENABLE_KOKKOS
    case Backend::kHost: return &kHostBackendOps;
#endif
#if ROPEKV_ENABLE_CUDA
    case Backend::kCuda: return &kCudaBackendOps;
#endif
#if ROPEKV_ENABLE_HIP
    case Backend::kHip: return &kHipBackendOps;
#endif
    default: return nullptr;
  }
}

}  // namespace detail

const char* to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::kAuto: return "auto";
    case Backend::kHost: return "host";
    case Backend::kCuda: return "cuda";
    case Backend::kHip: return "hip";
  }
  return "unknown";
}

namespace {

// Whether each backend has a device, asked once per process: a CUDA or HIP
// process sees a fixed set of devices from its first runtime call on, so
// run() need not pay a device-count query per call. Atomics: concurrent
// first calls may each ask, and store the same answer.
constexpr int kNumBackends = 4;  // Backend values 0..3
std::atomic<signed char> g_has_device[kNumBackends] = {{-1}, {-1}, {-1}, {-1}};

bool has_device(const detail::BackendOps& ops) noexcept {
  std::atomic<signed char>& known = g_has_device[static_cast<int>(ops.id)];
  signed char v = known.load(std::memory_order_relaxed);
  if (v < 0) {
    v = ops.available() ? 1 : 0;
    known.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

constexpr Backend kAutoOrder[] = {Backend::kCuda, Backend::kHip, Backend::kHost};

}  // namespace

bool backend_compiled(Backend backend) noexcept { return detail::find_backend(backend) != nullptr; }

bool backend_available(Backend backend) noexcept {
  const detail::BackendOps* ops = detail::find_backend(backend);
  return ops != nullptr && has_device(*ops);
}

Backend resolve_backend(Backend backend) noexcept {
  if (backend != Backend::kAuto) return backend;
  for (Backend b : kAutoOrder)
    if (backend_available(b)) return b;
  // No backend can run: the first compiled one, whose run() then reports
  // "no device" (and whose validate() still runs every rule).
  for (Backend b : kAutoOrder)
    if (backend_compiled(b)) return b;
  return Backend::kHost;
}

namespace detail {

Result select_backend(Backend requested, const BackendOps** ops) noexcept {
  if (requested != Backend::kAuto && requested != Backend::kHost && requested != Backend::kCuda &&
      requested != Backend::kHip)
    return make_result(Status::kErrorInvalidArgument,
                       "backend must be kAuto, kHost, kCuda or kHip, got %d",
                       static_cast<int>(requested));
  const Backend b = resolve_backend(requested);
  *ops = find_backend(b);
  if (*ops == nullptr)
    return make_result(
        Status::kErrorBackendNotCompiled,
        "backend %s is not compiled into this build of ropekv (configure with ROPEKV_ENABLE_%s=ON)",
        to_string(b), b == Backend::kHost ? "KOKKOS" : (b == Backend::kCuda ? "CUDA" : "HIP"));
  return Result{};
}

Result launch_on(const BackendOps& ops, const LaunchParams& p, LaunchState* state) noexcept {
  // After the rules, so that run() and validate() report the same error for
  // bad arguments whether or not a device is present.
  if (!has_device(ops))
    return make_result(Status::kErrorNoDevice, "backend %s has no device", to_string(ops.id));
  if (p.nnz == 0) return Result{};
  return ops.launch(p, state);
}

}  // namespace detail

}  // namespace ropekv
