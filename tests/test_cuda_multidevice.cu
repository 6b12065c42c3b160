// Two GPUs in one process (issue 16): the launcher's per-device state (its
// audit: the comment at the top of cuda/launcher.cu). The same problems
// on devices 0 and 1 at once from two host threads, each on its own stream;
// the first call of each kernel path (decode, large-launch, staged,
// generic) on one device after the other has used it, both ways round,
// each making an occupancy-cache entry of its own device; a graph captured
// on each device, both replayed at once; checked-mode counters per device.
// Every result is compared bit for bit, every buffer, with the host backend.
//
// The first-call tests need the process's first launches of their kernels:
// ctest runs every test in a process of its own, and scripts/gpu_run.sh runs
// this suite alone (first-call tests first). Where a kernel was launched
// earlier in the process they skip, saying so, instead of passing.
// Tests skip, saying why, below two devices and without the host backend.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend_memory.hpp"
#include "cuda/launcher.hpp"
#include "cuda_capture.hpp"
#include "detail/lower.hpp"
#include "ropekv/ropekv.hpp"
#include "run_together.hpp"
#include "test_calls.hpp"

namespace {

namespace gpu = ropekv::detail::gpu;
using ropekv::Arguments;
using ropekv::Backend;
using ropekv::DType;
using ropekv::Result;
using ropekv_test::Buffers;
using ropekv_test::Gqa;
using Snapshot = std::vector<std::vector<unsigned char>>;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

int cuda_devices() {
  int n = 0;
  if (!ropekv::backend_available(Backend::kCuda) || cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  (void)cudaGetLastError();
  return n;
}
int sms_of(int dev) {
  int n = 0;
  cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
  return n;
}

// Every comparison here is with the host backend.
#define SKIP_WITHOUT_HOST_BACKEND()                                         \
  if (!ropekv_test::host_memory().available())                              \
  GTEST_SKIP() << "compares with the host backend, which this build lacks " \
                  "(ROPEKV_ENABLE_KOKKOS=OFF): skipped (not passed)"
#define SKIP_WITHOUT_DEVICES(n)                                                                \
  do {                                                                                         \
    const int found = cuda_devices();                                                          \
    if (found == 0) GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)"; \
    if (found < (n))                                                                           \
      GTEST_SKIP() << "needs " << (n) << " CUDA devices, " << found                            \
                   << " present: skipped (not passed)";                                        \
    SKIP_WITHOUT_HOST_BACKEND();                                                               \
  } while (0)
// The two devices' problems are sized once for both (path_cases): the
// large-launch size must lie between three quarters of a wave (beyond the
// decode kernel's bounds) and a wave on each.
#define SKIP_WITHOUT_TWO_DEVICES()                                                        \
  do {                                                                                    \
    SKIP_WITHOUT_DEVICES(2);                                                              \
    if (!one_size_fits(sms_of(0), sms_of(1)))                                             \
      GTEST_SKIP() << "devices 0 and 1 differ too much in size (" << sms_of(0) << " and " \
                   << sms_of(1) << " multiprocessors) for one problem to take the "       \
                   << "large-launch path on both: skipped (not passed)";                  \
  } while (0)

// A stream of the calling thread's current device.
struct DeviceStream {
  cudaStream_t s = nullptr;
  cudaError_t error = cudaSuccess;
  DeviceStream() { error = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~DeviceStream() {
    if (s != nullptr) cudaStreamDestroy(s);
  }
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
};

// One problem: a GQA call (test_calls.hpp) whose slots and positions a step
// changes (graph replays). A sixth of the tokens or so are padding, and in
// checked mode every `bad_every`-th token (from `bad_offset`) has a page
// beyond the cache, which the kernel skips and counts.
struct Case {
  const char* name;
  gpu::Path path;  // the launcher's choice on both devices
  Gqa g;
  std::uint64_t seed;
  int bad_every = 0, bad_offset = 0;
  unsigned long long counter_start = 0;

  std::int64_t slots() const { return g.pages * g.page_size; }
  bool bad(std::int64_t t) const { return bad_every > 0 && (t + bad_offset) % bad_every == 0; }
  unsigned long long bad_tokens() const {
    unsigned long long n = 0;
    for (std::int64_t t = 0; t < g.nnz; ++t) n += bad(t) ? 1 : 0;
    return n;
  }
  std::int64_t slot(std::int64_t t, int step) const {
    if (bad(t)) return slots() + t;
    if ((t + step) % 6 == 0) return -1;
    return (t + 5 * std::int64_t(step)) % slots();  // distinct for every token
  }
  // Writes step `step`'s slots and positions into a's (mirror) buffers.
  void set_step(const Arguments& a, int step) const {
    auto* pos = static_cast<std::int64_t*>(a.positions.data);
    auto* slot_of = static_cast<std::int64_t*>(a.cache_index.slot_mapping.data);
    for (std::int64_t t = 0; t < g.nnz; ++t) {
      pos[t] = (7 * t + 13 * std::int64_t(step)) % g.max_pos;
      slot_of[t] = slot(t, step);
    }
  }
  // The call in b's mirrors, at step 0.
  Arguments build(Buffers& b) const {
    std::vector<std::int64_t> s(static_cast<std::size_t>(g.nnz));
    Arguments a = ropekv_test::gqa_call(b, g, s, seed);
    set_step(a, 0);
    if (bad_every > 0) {
      a.checked.enabled = true;
      a.checked.skipped_tokens = ropekv_test::add_counter(b, counter_start);
    }
    return a;
  }
};

// The launcher's measure of a launch (cuda/launcher.cu, geometry()):
// decode-sized threads, half of each token's 16-element units (rounded up),
// against the device's 2048 threads per multiprocessor. prepare_launch
// confirms each case's path.
std::int64_t decode_threads_per_token(const Gqa& g) {
  const std::int64_t units = ((g.hq + g.hk) * (g.r + g.n) + g.hk * g.d()) / 16;
  return (units + 1) / 2;
}
std::int64_t capacity(int sms) { return std::int64_t(sms) * 2048; }
// Large-launch: over three quarters of a wave of the larger device (past the
// decode kernel's 32 tokens a multiprocessor for these shapes: 48 threads a
// token), at most a wave of the smaller.
bool one_size_fits(int sms_a, int sms_b) {
  const int lo = sms_a < sms_b ? sms_a : sms_b, hi = sms_a < sms_b ? sms_b : sms_a;
  return lo > 0 && 3 * capacity(hi) < 4 * capacity(lo);
}
Gqa shape(std::int64_t hq, std::int64_t hk, std::int64_t r, std::int64_t n, DType in, DType out) {
  Gqa g;
  g.hq = hq;
  g.hk = hk;
  g.r = r;
  g.n = n;
  g.in = in;
  g.q_out = g.cache = out;
  return g;
}
Case sized(Case c, std::int64_t nnz) {
  c.g.nnz = nnz;
  c.g.pages = (nnz + c.g.page_size - 1) / c.g.page_size + 1;
  return c;
}

// One problem per path, for devices of `sms_lo` to `sms_hi` multiprocessors
// (one_size_fits): decode (a decode batch; R = D = 64, gpt-oss's shape),
// large-launch (between three quarters of a wave and a wave; R = D = 128: the rows
// kernel for e4m3fn, else the vector kernel's large teams), staged (over a
// wave; R 64 of D 128: the rows kernel for e4m3fn) and generic (a
// non-rotary part of 8 elements, not a whole vector unit).
// The rows kernel's path for e4m3fn outputs where the vendor layer builds it
// (these shapes are specialised), else `other`.
gpu::Path rows_or(DType out, gpu::Path other) {
  return out == DType::kFloat8E4M3FN && gpu::kRowsKernel ? gpu::Path::kRows : other;
}
std::vector<Case> path_cases(DType in, DType out, int sms_lo, int sms_hi, std::uint64_t seed) {
  const Gqa large = shape(8, 2, 128, 0, in, out), staged = shape(8, 2, 64, 64, in, out);
  const std::int64_t mid_wave = (capacity(sms_hi) * 3 / 4 + capacity(sms_lo)) / 2;
  return {
      sized(Case{"decode", gpu::Path::kDecode, shape(8, 1, 64, 0, in, out), seed}, 64),
      sized(Case{"large-launch", rows_or(out, gpu::Path::kVector), large, seed + 1},
            mid_wave / decode_threads_per_token(large)),
      sized(Case{"staged", rows_or(out, gpu::Path::kStaged), staged, seed + 2},
            capacity(sms_hi) * 5 / 4 / decode_threads_per_token(staged)),
      sized(Case{"generic", gpu::Path::kGeneric, shape(4, 2, 32, 8, in, out), seed + 3}, 300),
  };
}
std::vector<Case> path_cases_for_both(DType in, DType out, std::uint64_t seed) {
  const int a = sms_of(0), b = sms_of(1);
  return path_cases(in, out, a < b ? a : b, a < b ? b : a, seed);
}

// What a call left behind on one device.
struct DeviceRun {
  Result result;
  cudaError_t error = cudaSuccess;  // the first failing CUDA call of the test's own
  Snapshot buffers;                 // every buffer afterwards, guards included
  unsigned long long counter = 0;   // the checked-mode counter, if any
  int device_after = -1;            // the calling thread's current device afterwards
  // The launcher's decision for the call (prepare_launch after it: the
  // occupancy cache answers, nothing more is asked of the device); no path
  // where prepare_launch failed.
  gpu::Path path = gpu::Path(-1);
  const void* kernel = nullptr;
  unsigned block = 0;
};

void keep_first(cudaError_t* first, cudaError_t e) {
  if (*first == cudaSuccess) *first = e;
}

// c run on the calling thread's current device, on `stream`.
DeviceRun run_on_device(const Case& c, const DeviceStream& stream) {
  DeviceRun out;
  keep_first(&out.error, stream.error);
  Buffers b(ropekv_test::cuda_memory());
  const Arguments host_args = c.build(b);
  Arguments on_device = b.on_backend(host_args);
  on_device.stream = stream.s;
  out.result = b.run_with(host_args, [&](const Arguments&) {
    // The uploads went through the legacy default stream, which `stream` does not wait for.
    keep_first(&out.error, cudaDeviceSynchronize());
    return ropekv::run(on_device, Backend::kCuda);
  });
  keep_first(&out.error, cudaGetDevice(&out.device_after));
  out.buffers = b.snapshot();
  if (host_args.checked.skipped_tokens != nullptr) out.counter = *host_args.checked.skipped_tokens;
  ropekv::detail::LaunchParams p;
  gpu::PreparedLaunch l;
  if (ropekv::detail::lower(on_device, &p).ok() && gpu::prepare_launch(p, &l).ok()) {
    out.path = l.path;
    out.kernel = l.kernel;
    out.block = l.block.x;
  }
  return out;
}

// The host backend's buffers for c at each of `steps` steps.
std::vector<Snapshot> host_steps(const Case& c, int steps) {
  Buffers b(ropekv_test::host_memory());
  const Arguments a = c.build(b);
  std::vector<Snapshot> out;
  for (int step = 0; step < steps; ++step) {
    c.set_step(a, step);
    const Result r = b.run(a);
    EXPECT_TRUE(r.ok()) << c.name << ", host backend: " << r.message;
    out.push_back(b.snapshot());
  }
  return out;
}

// A device's run of c matched the host backend's, took c's path, left the
// thread's current device as it was and counted c's bad tokens.
void expect_run(const DeviceRun& got, const Case& c, const Snapshot& want, int dev) {
  const std::string what = std::string(c.name) + " on device " + std::to_string(dev);
  ASSERT_TRUE(got.result.ok()) << what << ": " << got.result.message;
  ASSERT_EQ(got.error, cudaSuccess) << what << ": " << cudaGetErrorString(got.error);
  EXPECT_EQ(got.device_after, dev) << what << ": the current device changed";
  EXPECT_EQ(int(got.path), int(c.path)) << what << " took the " << gpu::to_string(got.path)
                                        << " path, not " << gpu::to_string(c.path);
  EXPECT_TRUE(got.buffers == want) << what << ": buffers differ from the host backend";
  if (c.bad_every > 0)
    EXPECT_EQ(got.counter, c.counter_start + c.bad_tokens()) << what << ": skipped tokens";
}

// The first call of each path's kernel on device `first`, then on `second`
// (from this one thread, so its last-answer shortcut holds `first`'s entry):
// each call must make an occupancy-cache entry of its own device, and match
// the host backend. Returns why it could not make first calls ("" if it did).
std::string first_calls(int first, int second, DType in) {
  for (const Case& c : path_cases_for_both(in, DType::kFloat8E4M3FN, 40 + std::uint64_t(first))) {
    const Snapshot want = host_steps(c, 1)[0];
    const void* kernel = nullptr;
    unsigned block = 0;
    for (const int dev : {first, second}) {
      EXPECT_EQ(cudaSetDevice(dev), cudaSuccess);  // the test's: the library never sets it
      const int made_before = gpu::probe_resident_cache(nullptr, 0, dev).entries;
      DeviceStream s;
      const DeviceRun got = run_on_device(c, s);
      expect_run(got, c, want, dev);
      const std::string what = std::string(c.name) + " kernel (" + std::to_string(got.block) +
                               " threads) on device " + std::to_string(dev);
      if (dev == first) {
        kernel = got.kernel;
        block = got.block;
      } else {
        EXPECT_EQ(got.kernel, kernel) << what << ": another kernel than on device " << first;
        EXPECT_EQ(got.block, block) << what << ": another block size than on device " << first;
      }
      // The generic path asks the occupancy cache nothing (its grid comes
      // from the multiprocessor count alone): its first calls are checked
      // for their results only.
      if (c.path == gpu::Path::kGeneric) continue;
      const gpu::ResidentCacheProbe mine = gpu::probe_resident_cache(got.kernel, got.block, dev);
      if (mine.position < 0)
        ADD_FAILURE() << what << ": no occupancy entry of this device (another device's used)";
      else if (mine.position < made_before)
        return "the " + what +
               " was launched earlier in this process: run this test alone "
               "(ctest and scripts/gpu_run.sh do); skipped (not passed)";
      if (dev == first && gpu::probe_resident_cache(kernel, block, second).position >= 0)
        return "the " + std::string(c.name) + " kernel was launched on device " +
               std::to_string(second) +
               " earlier in this process: run this test alone; "
               "skipped (not passed)";
    }
  }
  return "";
}

// The path cases aim at the rows kernel past the decode kernel's bounds: slot
// mapping's flat layout within four L2s (the launcher's rule on devices of
// low DRAM bandwidth a multiprocessor) is off in these tests.
class CudaMultiDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    gpu::Tuning t;
    t.flat_slots = -1;
    gpu::set_tuning(t);
  }
  void TearDown() override { gpu::set_tuning(gpu::Tuning{}); }
};

// First: the process's first launches of their kernels (see the top).
TEST_F(CudaMultiDevice, FirstCallOfEachPathOnDevice1AfterDevice0) {
  SKIP_WITHOUT_TWO_DEVICES();
  const std::string skipped = first_calls(0, 1, DType::kBFloat16);
  if (!skipped.empty()) GTEST_SKIP() << skipped;
}

// The reverse, with kernels of their own (fp16 inputs).
TEST_F(CudaMultiDevice, FirstCallOfEachPathOnDevice0AfterDevice1) {
  SKIP_WITHOUT_TWO_DEVICES();
  const std::string skipped = first_calls(1, 0, DType::kFloat16);
  if (!skipped.empty()) GTEST_SKIP() << skipped;
}

// The same problems (every path; e5m2 outputs: kernels no test above
// launches, so in a process of its own their first calls too are made on
// both devices at once) on devices 0 and 1 from two threads at once, each
// on its own stream, twice.
TEST_F(CudaMultiDevice, SameProblemsOnBothDevicesAtOnce) {
  SKIP_WITHOUT_TWO_DEVICES();
  const std::vector<Case> cases = path_cases_for_both(DType::kBFloat16, DType::kFloat8E5M2, 60);
  std::vector<Snapshot> want;
  for (const Case& c : cases) want.push_back(host_steps(c, 1)[0]);
  constexpr int kRounds = 2;
  std::vector<DeviceRun> runs[2];
  ropekv_test::run_together(2, [&](int dev) {
    if (cudaSetDevice(dev) != cudaSuccess) return;  // reported below: no runs
    DeviceStream s;
    for (int round = 0; round < kRounds; ++round)
      for (const Case& c : cases) runs[dev].push_back(run_on_device(c, s));
  });
  for (int dev = 0; dev < 2; ++dev) {
    ASSERT_EQ(runs[dev].size(), kRounds * cases.size()) << "device " << dev;
    for (std::size_t i = 0; i < runs[dev].size(); ++i)
      expect_run(runs[dev][i], cases[i % cases.size()], want[i % cases.size()], dev);
  }
}

// A graph captured on each device (both at once, thread-local capture mode)
// for each path, then replayed on both at once with new slots, positions and
// padding before every replay.
TEST_F(CudaMultiDevice, GraphsCapturedOnEachDeviceReplayAtOnce) {
  SKIP_WITHOUT_TWO_DEVICES();
  constexpr int kSteps = 3;
  for (const Case& c : path_cases_for_both(DType::kFloat16, DType::kFloat8E5M2, 80)) {
    const std::vector<Snapshot> want = host_steps(c, kSteps);
    struct Replays {
      Result captured;
      cudaError_t error = cudaSuccess;
      std::vector<Snapshot> steps;
      int device_after = -1;
    } got[2];
    ropekv_test::run_together(2, [&](int dev) {
      Replays& mine = got[dev];
      keep_first(&mine.error, cudaSetDevice(dev));
      if (mine.error != cudaSuccess) return;
      Buffers b(ropekv_test::cuda_memory());
      const Arguments a = c.build(b);
      const ropekv_test::CapturedCall call(b.on_backend(a), cudaStreamCaptureModeThreadLocal);
      mine.captured = call.result;
      keep_first(&mine.error, call.error);
      keep_first(&mine.error, cudaGetDevice(&mine.device_after));
      if (mine.error != cudaSuccess || !mine.captured.ok()) return;
      for (int step = 0; step < kSteps; ++step) {
        c.set_step(a, step);
        b.run_with(a, [&](const Arguments&) {
          keep_first(&mine.error, cudaDeviceSynchronize());  // the uploads first
          keep_first(&mine.error, cudaGraphLaunch(call.exec, call.stream));
          return Result{};
        });
        mine.steps.push_back(b.snapshot());
      }
    });
    for (int dev = 0; dev < 2; ++dev) {
      const std::string what = std::string(c.name) + " graph on device " + std::to_string(dev);
      ASSERT_EQ(got[dev].error, cudaSuccess) << what << ": " << cudaGetErrorString(got[dev].error);
      ASSERT_TRUE(got[dev].captured.ok()) << what << ": " << got[dev].captured.message;
      EXPECT_EQ(got[dev].device_after, dev) << what << ": the current device changed";
      ASSERT_EQ(got[dev].steps.size(), std::size_t(kSteps)) << what;
      for (int step = 0; step < kSteps; ++step)
        EXPECT_TRUE(got[dev].steps[std::size_t(step)] == want[std::size_t(step)])
            << what << ", replay " << step << ": buffers differ from the host backend";
    }
  }
}

// Checked mode on both devices at once: each device's calls have their own
// bad tokens, so their own counts, in counters of their own device's memory
// (a decode batch and a large launch per device).
TEST_F(CudaMultiDevice, CheckedModeCountersPerDevice) {
  SKIP_WITHOUT_TWO_DEVICES();
  std::vector<Case> cases[2];
  std::vector<Snapshot> want[2];
  for (int dev = 0; dev < 2; ++dev) {
    for (Case c : path_cases_for_both(DType::kBFloat16, DType::kFloat8E4M3FN, 100)) {
      if (c.path != gpu::Path::kDecode && c.path != gpu::Path::kStaged &&
          c.path != gpu::Path::kRows)
        continue;
      c.bad_every = 5 + 2 * dev;
      c.bad_offset = dev;
      c.counter_start = 1000ull * unsigned(dev + 1);
      cases[dev].push_back(c);
      want[dev].push_back(host_steps(c, 1)[0]);
    }
  }
  std::vector<DeviceRun> runs[2];
  ropekv_test::run_together(2, [&](int dev) {
    if (cudaSetDevice(dev) != cudaSuccess) return;  // reported below: no runs
    DeviceStream s;
    for (const Case& c : cases[dev]) runs[dev].push_back(run_on_device(c, s));
  });
  for (int dev = 0; dev < 2; ++dev) {
    ASSERT_EQ(runs[dev].size(), cases[dev].size()) << "device " << dev;
    for (std::size_t i = 0; i < runs[dev].size(); ++i) {
      EXPECT_GT(cases[dev][i].bad_tokens(), 0u);
      expect_run(runs[dev][i], cases[dev][i], want[dev][i], dev);
    }
  }
}

// The dynamic shared-memory opt-in of a kernel on a device only rises: the
// staged run-time-shape kernel with 256-thread blocks, then 232-thread
// blocks (a smaller opt-in), then 256 again (a cached answer whose launch
// needs the larger opt-in), on every device present. Only builds whose
// staged blocks need more than the default 48 KB have an opt-in at all
// (ROPEKV_VEC_STAGES=3); others skip.
TEST_F(CudaMultiDevice, SharedMemoryOptInOnlyRises) {
  SKIP_WITHOUT_DEVICES(1);
  constexpr std::size_t kDefaultShared = 48 * 1024;
  if (gpu::staged_shared_bytes(gpu::kVecBlock) <= kDefaultShared)
    GTEST_SKIP() << "the staged kernel's blocks fit the default 48 KB of shared memory in this "
                    "build (ROPEKV_VEC_STAGES="
                 << gpu::kStages << "): no opt-in to test; skipped (not passed)";
  const int devices = cuda_devices() < 2 ? 1 : 2;
  int sms_hi = 0;
  for (int dev = 0; dev < devices; ++dev) sms_hi = sms_of(dev) > sms_hi ? sms_of(dev) : sms_hi;
  // Over two waves of each device (past the decode kernel's bounds too): the
  // staged kernel; R 32, N 32: its run-time shape.
  auto staged = [&](std::int64_t hq, std::int64_t hk, std::uint64_t seed) {
    const Gqa g = shape(hq, hk, 32, 32, DType::kBFloat16, DType::kFloat8E4M3FN);
    return sized(Case{"staged, run-time shape", gpu::Path::kStaged, g, seed},
                 capacity(sms_hi) * 5 / 2 / decode_threads_per_token(g));
  };
  const Case wide = staged(8, 1, 120), narrow = staged(56, 8, 121);
  const Snapshot want_wide = host_steps(wide, 1)[0], want_narrow = host_steps(narrow, 1)[0];
  for (int dev = 0; dev < devices; ++dev) {
    CUDA_OK(cudaSetDevice(dev));
    DeviceStream s;
    const DeviceRun first = run_on_device(wide, s);
    expect_run(first, wide, want_wide, dev);
    const DeviceRun smaller = run_on_device(narrow, s);
    expect_run(smaller, narrow, want_narrow, dev);
    EXPECT_EQ(smaller.kernel, first.kernel) << "not the same kernel: nothing tested";
    ASSERT_GT(first.block, smaller.block) << "not a smaller block: nothing tested";
    ASSERT_GT(gpu::staged_shared_bytes(smaller.block), kDefaultShared)
        << "the smaller block needs no opt-in: nothing tested";
    expect_run(run_on_device(wide, s), wide, want_wide, dev);
    EXPECT_GE(gpu::probe_resident_cache(smaller.kernel, smaller.block, dev).shared,
              gpu::staged_shared_bytes(first.block))
        << "device " << dev << ": the smaller block's opt-in lowered the larger one's";
  }
}

}  // namespace
