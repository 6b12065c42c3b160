// How the host backend spreads a call over threads (Kokkos' host space, or
// its own std::threads when that space is serial), shared with the perf
// suite's host unfused baseline so that both get the same parallelism.
// Defined only when the host backend is compiled in (host/threads.cpp, the
// one file that uses Kokkos).
#pragma once

#include <cstdint>
#include <functional>

namespace ropekv {
namespace detail {

struct LaunchParams;

// How many threads the host backend runs a large call on: the concurrency of
// Kokkos' default host execution space when it is parallel, else the threads
// the backend starts itself. The perf suite measures its host copy ceiling
// with as many threads, so that the comparison is like for like.
int host_backend_threads() noexcept;

// Runs body(t0, t1) over the tokens [0, p.nnz) in chunks of consecutive
// tokens, on the threads the host backend uses for a call like `p` (one
// below its size threshold). Rethrows the first exception body throws, once
// every thread has stopped; chunks not yet taken by then are not run.
void host_for_tokens(const LaunchParams& p,
                     const std::function<void(std::int64_t, std::int64_t)>& body);

// For tests: how many threads the last host_for_tokens call made on this
// thread ran its work on (1: the calling thread alone; with own threads, the
// calling thread plus the workers that started; with a parallel Kokkos host
// space, its concurrency). 0 before the first call. Says whether a call was
// actually split, which host_backend_threads() (the configured count) does not.
int host_last_call_threads() noexcept;

}  // namespace detail
}  // namespace ropekv
