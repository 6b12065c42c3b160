// CPU time per call of the perf suite's kCpuRun and kCpuBareLaunch rows: run() and the steps
// under it, timed with the thread's CPU clock over batches of calls, no graph.
#include <cuda_runtime.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "cuda/launcher.hpp"
#include "cuda_problem.hpp"
#include "detail/lower.hpp"

namespace ropekv_perf {

namespace {

// CPU work of a fixed length (a dependent chain the compiler cannot fold),
// about 0.1 µs: the control for launches spaced by a short host step.
void spin() {
  static volatile std::uint32_t seed = 1;
  std::uint32_t x = seed;
  for (int i = 0; i < 64; ++i) x = x * 1664525u + 1013904223u;
  seed = x;
}

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace

// CPU time per call, no graph: the median over batches of calls (the stream
// drained between batches, so that no call waits for room in the launch
// queue). kCpuBareLaunch: a bare launch of the kernel run() launches.
// kCpuRun: run(), with, in the same rounds of batches (one batch of each in
// turn, the first variant of a round rotating, so that a drift of the shared
// host CPU and the place in a round hit all alike), the bare
// launch, the steps between and PreparedCall::run(): its counters are
// medians of the per-round differences. "moving": the calls alternate
// between two buffer sets of the same shape (every data pointer changes, as
// in an engine whose activations move between steps).
bool time_cpu(DeviceProblem& dp, const GpuCase& c, GpuTiming* out, std::string* error) {
  namespace gpu = ropekv::detail::gpu;
  namespace detail = ropekv::detail;
  constexpr int kRounds = 21, kPerBatch = 200;
  OwnedStream owned;
  PERF_CUDA_TRY(cudaStreamCreateWithFlags(&owned.s, cudaStreamNonBlocking));
  cudaStream_t stream = owned.s;
  GpuCase fused = c;
  fused.kind = GpuKind::kFused;
  if (!check_output(dp, fused, stream, &out->check, error)) return false;
  const ropekv::Arguments a = case_arguments(dp, 0, c, stream);
  const ropekv::Arguments a1 = case_arguments(dp, dp.sets > 1 ? 1 : 0, c, stream);
  const ropekv::Arguments* moving[2] = {&a, &a1};
  gpu::PreparedLaunch l, l1;
  detail::LaunchParams p, p1;
  ropekv::PreparedCall prepared(ropekv::Backend::kCuda), prepared_moving(ropekv::Backend::kCuda),
      prepared_fields(ropekv::Backend::kCuda), prepared_fields_moving(ropekv::Backend::kCuda);
  const ropekv::Step fields[2] = {ropekv::step_of(a), ropekv::step_of(a1)};
  std::unique_ptr<detail::StepPlan, void (*)(detail::StepPlan*)> plan(detail::new_step_plan(),
                                                                      &detail::delete_step_plan);
  if (!detail::lower(a, &p).ok() || !gpu::prepare_launch(p, &l).ok() ||
      !detail::lower(a1, &p1).ok() || !gpu::prepare_launch(p1, &l1).ok() ||
      !prepared.prepare(a).ok() || !prepared_moving.prepare(a).ok() ||
      !prepared_fields.prepare(a).ok() || !prepared_fields_moving.prepare(a).ok() ||
      plan == nullptr) {
    *error = "lowering or preparing the launch failed";
    return false;
  }
  detail::fill_step_plan(plan.get(), a);
  const detail::BackendOps* gpu_ops = detail::find_backend(ropekv::Backend::kCuda);
  const gpu::PreparedLaunch* bare_moving[2] = {&l, &l1};
  out->path = gpu::path_name(l);
  enum Variant {
    kBare,
    kDecide,
    kLower,
    kRun,
    kStepLower,
    kStateLaunch,
    kPrepared,
    kPreparedMoving,
    kFields,        // kPrepared given the step fields alone (PreparedCall::run(Step)), repeated
    kFieldsMoving,  // kPreparedMoving given the step fields alone
    kBareMoving,    // the bare launches a moving prepared call makes: the two sets in turn
    kSpin,          // the control's CPU work alone: about as long as a repeated step's check
    kSpinLaunch,    // that work, then the bare launch: a launch spaced as in kStepLower
    kVariants
  };
  const int variants = c.kind == GpuKind::kCpuRun ? kVariants : 1;
  std::vector<double> us[kVariants];
  for (int round = 0; round < kRounds + 1; ++round) {
    for (int k = 0; k < variants; ++k) {
      const int v = (k + round) % variants;  // each variant in each place of a round alike
      bool ok = true;
      const double t0 = thread_cpu_seconds();
      for (int i = 0; i < kPerBatch && ok; ++i) {
        switch (v) {
          case kBare: ok = gpu::launch_prepared(l) == cudaSuccess; break;
          case kDecide: {
            gpu::PreparedLaunch l2;
            ok = gpu::prepare_launch(p, &l2).ok() && gpu::launch_prepared(l2) == cudaSuccess;
            break;
          }
          case kLower: {
            detail::LaunchParams p2;
            gpu::PreparedLaunch l2;
            ok = detail::lower(a, &p2).ok() && gpu::prepare_launch(p2, &l2).ok() &&
                 gpu::launch_prepared(l2) == cudaSuccess;
            break;
          }
          case kRun: ok = ropekv::run(a, ropekv::Backend::kCuda).ok(); break;
          case kStepLower:
            ok = detail::lower_step(*plan, a) && gpu::launch_prepared(l) == cudaSuccess;
            break;
          case kStateLaunch: ok = gpu_ops->launch(plan->lowered, &plan->launch_state).ok(); break;
          case kPrepared: ok = prepared.run(a).ok() && prepared.last_run_was_step(); break;
          case kPreparedMoving:
            ok = prepared_moving.run(*moving[i & 1]).ok() && prepared_moving.last_run_was_step();
            break;
          case kFields:
            ok = prepared_fields.run(fields[0]).ok() && prepared_fields.last_run_was_step();
            break;
          case kFieldsMoving:
            ok = prepared_fields_moving.run(fields[i & 1]).ok() &&
                 prepared_fields_moving.last_run_was_step();
            break;
          case kBareMoving: ok = gpu::launch_prepared(*bare_moving[i & 1]) == cudaSuccess; break;
          case kSpin: spin(); break;
          case kSpinLaunch:
            spin();
            ok = gpu::launch_prepared(l) == cudaSuccess;
            break;
        }
      }
      const double t1 = thread_cpu_seconds();
      if (!ok) {
        *error = "a timed call failed (or a prepared call did not take the step path)";
        return false;
      }
      PERF_CUDA_TRY(cudaStreamSynchronize(stream));
      PERF_CUDA_TRY(cudaGetLastError());
      if (round > 0) us[v].push_back((t1 - t0) / kPerBatch * 1e6);  // round 0 warms up
    }
  }
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  // Median over rounds of (variant hi - variant lo).
  auto step = [&](int hi, int lo) {
    std::vector<double> d;
    for (std::size_t r = 0; r < us[hi].size(); ++r) d.push_back(us[hi][r] - us[lo][r]);
    return median(d);
  };
  const int main_variant = c.kind == GpuKind::kCpuRun ? kRun : kBare;
  const std::vector<double>& m = us[main_variant];
  out->us_per_call = median(m);
  out->spread_pct =
      100.0 * (*std::max_element(m.begin(), m.end()) - *std::min_element(m.begin(), m.end())) /
      out->us_per_call;
  if (c.kind == GpuKind::kCpuRun) {
    out->counters = {
        {"launch_us", median(us[kBare])},
        {"decide_us", step(kDecide, kBare)},
        {"lower_us", step(kLower, kDecide)},
        {"api_us", step(kRun, kLower)},
        {"cpu_over_launch_us", step(kRun, kBare)},
        {"step_lower_us", step(kStepLower, kBare)},
        {"state_decide_us", step(kStateLaunch, kBare)},
        {"prepared_us", median(us[kPrepared])},
        {"prepared_over_launch_us", step(kPrepared, kBare)},
        {"prepared_moving_over_launch_us", step(kPreparedMoving, kBare)},
        {"moving_launch_over_launch_us", step(kBareMoving, kBare)},
        {"prepared_moving_over_moving_launch_us", step(kPreparedMoving, kBareMoving)},
        {"fields_over_launch_us", step(kFields, kBare)},
        {"fields_moving_over_moving_launch_us", step(kFieldsMoving, kBareMoving)},
        {"moving_sets", dp.sets > 1 ? 2.0 : 1.0},
        {"spin_us", median(us[kSpin])},
        {"spaced_launch_over_launch_us", step(kSpinLaunch, kBare) - median(us[kSpin])}};
  }
  out->working_set_mb = dp.set_bytes / 1e6;
  out->sets = 1;
  out->calls = kPerBatch;
  out->replays = kRounds;
  out->check = "CPU time per call, no graph; " + out->check;
  return true;
}

}  // namespace ropekv_perf
