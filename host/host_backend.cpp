// The host backend: plans each token, runs its rows with the variant of the
// widest instruction set the CPU supports (isa.cpp over rows.hpp), on the
// host's threads (threads.cpp: Kokkos' host space, or std::threads where it
// is serial). It is the reference every device backend is checked against
// bit for bit, and a real CPU fallback.
#include <atomic>
#include <exception>

#include "backends/backend.hpp"
#include "detail/params.hpp"
#include "detail/result.hpp"
#include "host/isa.hpp"
#include "host/threads.hpp"

namespace ropekv {
namespace detail {
namespace {

using host::Kernel;
using host::RowFns;
using host::select_kernel_for_cpu;

// Runs one token: every q head, every k head, every v head. Returns whether
// checked mode skipped it.
bool run_token(const LaunchParams& p, const RowFns& fns, const Divisors& d, std::int64_t t) {
  const TokenPlan plan = plan_token(p, t);
  if (!plan.write) return plan.bad;
  const char* cs = p.cos_sin + plan.pos * p.cos_row_stride * p.cos.bytes;
  const std::int64_t in = p.in.bytes, qo = p.q_out.bytes, cd = p.cache.bytes;
  for (std::int64_t h = 0; h < p.num_q_heads; ++h) {
    fns.q_rope(p.q_rope.row(t, h, in), p.q_rope_out.row(t, h, qo), cs, p.rotary_dim, p.style, d.q);
    if (p.nope_dim > 0)
      fns.q_copy(p.q_nope.row(t, h, in), p.q_nope_out.row(t, h, qo), p.nope_dim, d.q);
  }
  for (std::int64_t h = 0; h < p.num_kv_heads; ++h) {
    fns.k_rope(p.k_rope.row(t, h, in), p.k_cache_rope.row(plan.page, plan.entry, h, cd), cs,
               p.rotary_dim, p.style, d.k);
    if (p.nope_dim > 0)
      fns.kv_copy(p.k_nope.row(t, h, in), p.k_cache_nope.row(plan.page, plan.entry, h, cd),
                  p.nope_dim, d.k);
    if (p.v_dim > 0)
      fns.kv_copy(p.v.row(t, h, in), p.v_cache.row(plan.page, plan.entry, h, cd), p.v_dim, d.v);
  }
  return false;
}

bool host_available() noexcept { return true; }

// Runs tokens [t0, t1) of one call; returns how many checked mode skipped.
std::int64_t run_range(const LaunchParams& p, const Kernel& kernel, const Divisors& d,
                       std::int64_t t0, std::int64_t t1) {
  if (kernel.range != nullptr) return kernel.range(p, d, t0, t1);
  std::int64_t bad = 0;
  for (std::int64_t t = t0; t < t1; ++t) bad += run_token(p, kernel.rows, d, t) ? 1 : 0;
  return bad;
}

Result host_launch(const LaunchParams& p, LaunchState* /*state: keeps nothing*/) noexcept {
  try {
    const Kernel kernel = select_kernel_for_cpu(p);
    const Divisors d = load_divisors(p);
    // Skipped tokens: each chunk counts its own and adds them once; the
    // caller's counter is updated by this thread after every chunk is done
    // (exact for any thread count, and written only when tokens were skipped).
    std::atomic<std::int64_t> bad{0};
    host_for_tokens(p, [&](std::int64_t t0, std::int64_t t1) {
      const std::int64_t n = run_range(p, kernel, d, t0, t1);
      if (n != 0) bad.fetch_add(n, std::memory_order_relaxed);
    });
    if (p.skipped_tokens != nullptr && bad.load() != 0)
      *p.skipped_tokens += static_cast<unsigned long long>(bad.load());
  } catch (const std::exception& e) {
    return make_result(Status::kErrorLaunchFailed, "host backend failed: %s", e.what());
  } catch (...) {
    return make_result(Status::kErrorLaunchFailed, "host backend failed");
  }
  return Result{};
}

}  // namespace

const BackendOps kHostBackendOps = {Backend::kHost, &host_available, &host_launch};

}  // namespace detail
}  // namespace ropekv
