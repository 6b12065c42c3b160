// The host backend's threads: Kokkos' start-up and its host execution space,
// or, where that space is serial, the backend's own std::thread pool. The
// one file of the library that uses Kokkos.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>
#if defined(__linux__)
#include <sched.h>
#endif

#include "detail/params.hpp"
#include "host/threads.hpp"

namespace ropekv {
namespace detail {
namespace {

// The library initialises Kokkos on first use when the application has not,
// and finalises it at exit.
void ensure_kokkos() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!Kokkos::is_initialized()) {
      Kokkos::initialize();
      std::atexit([] {
        if (Kokkos::is_initialized()) Kokkos::finalize();
      });
    }
  });
}

// ---------------------------------------------------------------- threads
// Debian's Kokkos (and any Serial-only build) runs a parallel_for on the
// calling thread alone. The op is a few flops per byte, and on the host one
// core does not saturate memory with them, so a large call is then split
// into chunks of consecutive tokens run by std::threads, one per CPU the
// process may use. Each token is computed by the same code whatever thread runs it,
// and distinct tokens write distinct outputs (validation rejects overlapping
// outputs), so the results are the same bits for any thread count, in calls
// where no two tokens address one cache entry (a caller error: such an
// entry then holds bytes each written by one of those tokens). With a Kokkos whose host
// space is parallel (OpenMP, Threads) Kokkos does the splitting instead.

// Threads a large call uses when Kokkos' host space is serial:
// ROPEKV_HOST_THREADS=N (>= 1) if set, else the CPUs this process may run on.
int own_threads() {
  static const int n = [] {
    if (const char* env = std::getenv("ROPEKV_HOST_THREADS")) {
      const int v = std::atoi(env);
      if (v >= 1) return v;
    }
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
    return std::max(1, int(std::thread::hardware_concurrency()));
  }();
  return n;
}

// Below this many bytes of the byte model per call, a call runs on the
// calling thread: starting and joining a thread costs tens of microseconds,
// about what one core needs for this much data.
constexpr double kMinBytesForThreads = 2.0 * 1024 * 1024;

double model_bytes(const LaunchParams& p) {
  const double in = double(p.in.bytes), q_out = double(p.q_out.bytes), kv = double(p.cache.bytes);
  const double d = double(p.rotary_dim + p.nope_dim);
  const double per_token = double(p.num_q_heads) * d * (in + q_out) +
                           double(p.num_kv_heads) * (d + double(p.v_dim)) * (in + kv) +
                           double(p.rotary_dim) * double(p.cos.bytes);
  return per_token * double(p.nnz);
}

// The first exception a body threw on any thread, rethrown on the calling
// thread once all have stopped (an exception must not escape a worker).
class FirstFailure {
 public:
  void record() noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!first_) first_ = std::current_exception();
  }
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr first_;
};

// What host_last_call_threads() reports: set once per call, per calling thread.
thread_local int last_call_threads = 0;

}  // namespace

void host_for_tokens(const LaunchParams& p,
                     const std::function<void(std::int64_t, std::int64_t)>& body) {
  ensure_kokkos();
  using Space = Kokkos::DefaultHostExecutionSpace;
  if (Space::concurrency() > 1) {
    using Policy = Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>;
    FirstFailure failure;
    Kokkos::parallel_for("ropekv::host::rope_quant_append", Policy(0, p.nnz),
                         [&body, &failure](std::int64_t t) {
                           try {
                             body(t, t + 1);
                           } catch (...) {
                             failure.record();
                           }
                         });
    Space().fence();
    last_call_threads = Space::concurrency();
    failure.rethrow();
    return;
  }
  // Serial host space: the calling thread and up to threads - 1 workers
  // take chunks of consecutive tokens from a shared counter until none is
  // left. Chunks rather than one fixed range per thread: on a shared
  // machine one core may be taken away for a while, and the other threads
  // then do its share instead of waiting for it. A worker that cannot be
  // started just leaves more chunks to the others.
  const int threads =
      model_bytes(p) < kMinBytesForThreads ? 1 : int(std::min<std::int64_t>(own_threads(), p.nnz));
  if (threads <= 1) {
    last_call_threads = 1;
    if (p.nnz > 0) body(0, p.nnz);
    return;
  }
  // About 16 chunks per thread, at most 64 tokens each (a few hundred
  // microseconds of work for the largest canonical shapes).
  const std::int64_t chunk =
      std::max<std::int64_t>(1, std::min<std::int64_t>(64, p.nnz / (16 * threads)));
  // A body that throws stops the chunks not yet taken.
  std::atomic<std::int64_t> next{0};
  FirstFailure failure;
  auto work = [&p, &body, &next, chunk, &failure] {
    try {
      for (;;) {
        const std::int64_t t0 = next.fetch_add(chunk, std::memory_order_relaxed);
        if (t0 >= p.nnz) return;
        body(t0, std::min(p.nnz, t0 + chunk));
      }
    } catch (...) {
      next.store(p.nnz, std::memory_order_relaxed);
      failure.record();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(std::size_t(threads - 1));
  for (int i = 0; i + 1 < threads; ++i) {
    try {
      workers.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  last_call_threads = 1 + int(workers.size());
  work();
  for (std::thread& w : workers) w.join();
  failure.rethrow();
}

int host_last_call_threads() noexcept { return last_call_threads; }

int host_backend_threads() noexcept {
  ensure_kokkos();
  const int kokkos = Kokkos::DefaultHostExecutionSpace::concurrency();
  return kokkos > 1 ? kokkos : own_threads();
}

}  // namespace detail
}  // namespace ropekv
