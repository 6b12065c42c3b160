// Many host threads calling ropekv::run() at once, the process's first calls
// included: the library's one-time set-up (Kokkos initialisation, the CPU's
// instruction-set choice, the host thread count) runs under contention, and
// calls large enough to start the backend's own threads run beside small
// ones, checked-mode calls with bad tokens beside unchecked ones, and
// validate() beside run(). Each thread's results must equal the same call
// run alone afterwards, bit for bit, counters included. ctest runs every
// test in a process of its own, so the first calls here are the process's
// first; scripts/tsan.sh runs this under ThreadSanitizer.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend_memory.hpp"
#include "ropekv/ropekv.hpp"
#include "run_together.hpp"
#include "test_calls.hpp"

namespace {

using ropekv_test::Buffers;
using ropekv_test::Gqa;

// Job j: a call of its own (large or small, checked with bad tokens or not),
// built in its own buffers.
struct Job {
  int index;
  Gqa g;
  std::vector<std::int64_t> slots;
  bool checked = false;
  std::unique_ptr<Buffers> b;
  ropekv::Arguments a;
  std::vector<unsigned char> q, k, v;
  unsigned long long counter = 0;
  ropekv::Result result;

  explicit Job(int j) : index(j) {
    g.hq = 4;
    g.hk = 2;
    g.r = 64;
    g.n = j % 3 == 0 ? 0 : 64;       // the fast path and the row path
    g.nnz = j % 2 == 0 ? 1536 : 24;  // large: split over the backend's threads
    g.pages = (g.nnz + g.page_size - 1) / g.page_size;
    checked = j % 4 < 2;
    slots = ropekv_test::identity_slots(g.nnz);
    if (checked)
      for (std::int64_t t = j % 5; t < g.nnz; t += 7) slots[std::size_t(t)] = g.nnz + 100 + t;
    else
      for (std::int64_t t = 3; t < g.nnz; t += 11) slots[std::size_t(t)] = -1;  // padding
  }
  void build() {
    b = std::make_unique<Buffers>(ropekv_test::host_memory());
    a = ropekv_test::gqa_call(*b, g, slots, std::uint64_t(100 + index));
    a.checked.enabled = checked;
    a.checked.skipped_tokens = ropekv_test::add_counter(*b, 5);
    if (index % 3 == 1) a.k_scale = ropekv::Scale::host_multiplier(30.0f);
  }
  void run() {
    // validate() and run() of this call; every few jobs validate a broken
    // copy too, which must be rejected.
    ropekv::Arguments broken = a;
    broken.k_cache_rope.stride[3] = 2;
    if (index % 2 == 1 && ropekv::validate(broken, ropekv::Backend::kHost).ok())
      result.status = ropekv::Status::kErrorLaunchFailed;  // reported below
    else
      result = b->run(a);
    const std::size_t d = std::size_t(g.d());
    const auto* qp = static_cast<const unsigned char*>(a.q_rope_out.data);
    const auto* kp = static_cast<const unsigned char*>(a.k_cache_rope.data);
    const auto* vp = static_cast<const unsigned char*>(a.v_cache.data);
    const std::size_t cache = std::size_t(g.pages * g.page_size * g.hk) * d;
    q.assign(qp, qp + std::size_t(g.nnz * g.hq) * d);
    k.assign(kp, kp + cache);
    v.assign(vp, vp + cache);
    counter = *a.checked.skipped_tokens;
  }
};

TEST(HostConcurrency, ManyThreadsCallRunAtOnceFirstCallsIncluded) {
  setenv("ROPEKV_HOST_THREADS", "3", 0);  // the backend's own threads, beside these
  constexpr int kThreads = 8;
  std::vector<std::unique_ptr<Job>> jobs;
  for (int j = 0; j < kThreads; ++j) {
    jobs.push_back(std::make_unique<Job>(j));
    jobs.back()->build();  // builds only: nothing of the library has run yet
  }
  // All threads start their first call together.
  ropekv_test::run_together(kThreads, [&](int j) { jobs[std::size_t(j)]->run(); });

  // The same calls, one at a time.
  for (int j = 0; j < kThreads; ++j) {
    const Job& got = *jobs[std::size_t(j)];
    ASSERT_TRUE(got.result.ok()) << "job " << j << ": " << ropekv::to_string(got.result.status)
                                 << " " << got.result.message;
    Job alone(j);
    alone.build();
    alone.run();
    ASSERT_TRUE(alone.result.ok()) << alone.result.message;
    EXPECT_EQ(got.q, alone.q) << "job " << j << ": query output";
    EXPECT_EQ(got.k, alone.k) << "job " << j << ": K cache";
    EXPECT_EQ(got.v, alone.v) << "job " << j << ": V cache";
    EXPECT_EQ(got.counter, alone.counter) << "job " << j << ": skipped tokens";
    if (got.checked) {
      EXPECT_GT(got.counter, 5u) << "job " << j << ": no token was skipped";
    }
  }
}

}  // namespace
