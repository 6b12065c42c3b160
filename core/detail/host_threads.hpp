// How many threads the host backend runs a large call on: the concurrency of
// Kokkos' default host execution space when it is parallel, else the threads
// the backend starts itself (host/host_backend.cpp). The perf suite measures
// its host copy ceiling with as many threads, so that the comparison is like
// for like. Defined only when the host backend is compiled in.
#pragma once

namespace ropekv {
namespace detail {

int host_backend_threads() noexcept;

}  // namespace detail
}  // namespace ropekv
