// ropekv_api_cost: the CPU cost of the API around a launch (Google Benchmark),
// on any machine: no device is needed.
//
//   api/validate/SHAPE       validate(): backend selection + every host-side rule
//   api/lower/SHAPE          the rules alone (detail::lower, Arguments -> LaunchParams)
//   api/run/host/SHAPE       run() on the host backend, and beside it
//   api/launch/host/SHAPE    the host backend's launch of the same lowered call:
//                            run() - launch = what the API adds to a call
//   api/prepared/host/SHAPE  PreparedCall::run() of the same call (a step with
//                            the prepared shapes)
//   api/step/SHAPE           a prepared call's step alone (detail::lower_step)
//                            with the last step's arguments: nothing to re-check
//   api/step-changed/SHAPE   the same with a step field changed every call (the
//                            stream): the re-check and lowering
//   api/step-moving/SHAPE    the same alternating between two buffer sets (every
//                            data pointer moves, as the perf suite's moving
//                            prepared call)
//   api/step-moving-cold/SHAPE  the same with the caches cold: between steps
//                            ROPEKV_API_COLD_MB (default 2) of memory written,
//                            only the step timed (what a launch's eviction of
//                            the step's code and data costs it); 20000
//                            iterations unless --iterations=N says otherwise
//   api/stepfields-moving[-cold]/SHAPE  the same two given only the step's
//                            fields (ropekv::Step: PreparedCall::run(step))
//   api/stepfields-sized[-cold]/SHAPE  the same with every other step at half
//                            the token count: each step changes a size (no
//                            moving step)
//   api/stepfields-layers/SHAPE  one prepared call for 8 layers: the token
//                            count changes at every 8th step, the pointers at
//                            every step (time per step)
//   api/run-nodevice/B/SHAPE run() on a device backend B without a device: its
//                            whole path up to the launch (selection, rules, the
//                            device check), which then reports kErrorNoDevice
//   api/backend_available/B  backend_available(B) (remembered per process), and
//   api/device_query/B       the backend's own device query (CUDA:
//                            cudaGetDeviceCount), which run() no longer makes per call
//
// SHAPE: perf-suite shapes (perf_problem.hpp) at decode sizes, slot mapping;
// llama-3.1-8b-ptable is the same call addressed by a page table.
//
// --iterations=N runs every benchmark exactly N times, for counting
// instructions on a busy machine: with `perf stat -e instructions:u`, the
// difference between runs with 2N and N, divided by N, is the count per call.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "detail/lower.hpp"
#include "perf_problem.hpp"
#include "ropekv/ropekv.hpp"

namespace {

using namespace ropekv;

std::int64_t g_iterations = 0;  // --iterations=N; 0: Google Benchmark decides

// manual_time: the benchmark times what it measures itself (SetIterationTime),
// 20000 iterations unless --iterations says otherwise (its untimed work is long).
void reg(const std::string& name, std::function<void(benchmark::State&)> fn,
         bool manual_time = false) {
  benchmark::internal::Benchmark* b = benchmark::RegisterBenchmark(name.c_str(), std::move(fn));
  if (g_iterations > 0 || manual_time) b->Iterations(g_iterations > 0 ? g_iterations : 20000);
  if (manual_time) b->UseManualTime();
}
using ropekv_perf::Batch;
using ropekv_perf::Shape;

// One call's host buffers and arguments.
struct Call {
  std::string name;
  Batch batch;
  std::vector<std::uint16_t> in;
  std::vector<std::uint8_t> q_out, k_cache, v_cache;
  std::vector<float> cos_sin;
  std::vector<std::int64_t> positions, slots;
  std::vector<std::int32_t> kv_indices, kv_indptr, batch_indices, kv_positions;
  Arguments args;
};

const Shape& shape_named(const std::string& name) {
  for (const Shape& s : ropekv_perf::shapes())
    if (s.name == name) return s;
  std::fprintf(stderr, "api_cost: no shape %s\n", name.c_str());
  std::abort();
}

std::unique_ptr<Call> make_call(const std::string& shape, std::int64_t nnz, bool page_table) {
  const Shape& s = shape_named(shape);
  auto c = std::make_unique<Call>();
  c->name = shape + (page_table ? "-ptable" : "") + "/nnz:" + std::to_string(nnz);
  c->batch = ropekv_perf::make_batch(s, nnz, 1);
  const ropekv_perf::Sizes z = ropekv_perf::sizes_of(s, c->batch);
  c->in.resize(std::size_t(z.in_elems));
  ropekv_perf::fill_random_bf16(c->in.data(), z.in_elems, 1);
  c->q_out.resize(std::size_t(z.q_out_bytes));
  c->k_cache.resize(std::size_t(z.k_cache_bytes));
  c->v_cache.resize(std::size_t(z.v_cache_bytes));
  c->cos_sin = ropekv_perf::cos_sin_table(s.rotary, c->batch.max_pos);
  c->positions = c->batch.positions;
  c->slots = c->batch.slots;
  ropekv_perf::Buffers b;
  b.in = c->in.data();
  b.q_out = c->q_out.data();
  b.k_cache = c->k_cache.data();
  b.v_cache = c->v_cache.empty() ? nullptr : c->v_cache.data();
  b.cos_sin = c->cos_sin.data();
  b.positions = c->positions.data();
  b.slots = c->slots.data();
  c->args = ropekv_perf::make_arguments(s, c->batch, b);
  if (page_table) {
    // Every token its own sequence of one page: the page of its slot.
    for (std::int64_t t = 0; t < nnz; ++t) {
      c->kv_indices.push_back(std::int32_t(c->slots[std::size_t(t)] / s.page_size));
      c->kv_indptr.push_back(std::int32_t(t));
      c->batch_indices.push_back(std::int32_t(t));
      c->kv_positions.push_back(std::int32_t(c->slots[std::size_t(t)] % s.page_size));
    }
    c->kv_indptr.push_back(std::int32_t(nnz));
    c->args.cache_index = page_table_index(
        c->kv_indices.data(), DType::kInt32, nnz, c->kv_indptr.data(), DType::kInt32, nnz + 1,
        c->batch_indices.data(), DType::kInt32, c->kv_positions.data(), DType::kInt32, nnz);
  }
  const Result r = validate(c->args, Backend::kAuto);
  if (!r.ok()) {
    std::fprintf(stderr, "api_cost: %s does not validate: %s\n", c->name.c_str(), r.message);
    std::abort();
  }
  return c;
}

// A prepared call's steps (detail::lower_step) on x's plan, alternating
// between x and y. cold: ROPEKV_API_COLD_MB (default 2: more than a core's
// L2, as a launch's driver work evicts; more reaches the L3) of memory
// written between steps, and only the step timed (manual time).
// Step: Arguments (the whole arguments compared) or ropekv::Step (their step
// fields alone, step_of).
template <class Step>
void time_steps(benchmark::State& st, const Arguments& x, const Step& sx, const Step& sy,
                bool cold) {
  detail::StepPlan* plan = detail::new_step_plan();
  if (plan == nullptr) std::abort();
  detail::fill_step_plan(plan, x);
  const Step* a[2] = {&sx, &sy};
  const char* mb = std::getenv("ROPEKV_API_COLD_MB");
  std::vector<std::uint64_t> junk(cold ? std::size_t(mb ? std::atoi(mb) : 2) << 17 : 0);
  std::size_t i = 0;
  for (auto _ : st) {
    std::chrono::steady_clock::time_point t0;
    if (cold) {
      for (std::size_t k = 0; k < junk.size(); k += 8) junk[k] += k;
      t0 = std::chrono::steady_clock::now();
    }
    bool ok = detail::lower_step(*plan, *a[++i & 1]);
    benchmark::DoNotOptimize(ok);
    benchmark::DoNotOptimize(plan->lowered);
    if (cold) {
      const auto t1 = std::chrono::steady_clock::now();
      st.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    }
  }
  detail::delete_step_plan(plan);
}

// One prepared call shared by the layers of a model (an engine's eager
// step): cycles of kLayers steps, every data pointer moving from step to
// step and the token count changing at each cycle's first step (between
// x's count and half of it), so that one step in kLayers changes a size and
// the next one is the first moving step at the new size. Time per step.
void time_layers(benchmark::State& st, const Arguments& x, const Arguments& y) {
  constexpr int kLayers = 8;
  detail::StepPlan* plan = detail::new_step_plan();
  if (plan == nullptr) std::abort();
  detail::fill_step_plan(plan, x);
  Step steps[2][2] = {{step_of(x), step_of(y)}, {step_of(x), step_of(y)}};
  for (Step& s : steps[1]) s.nnz /= 2;
  std::size_t i = 0;
  for (auto _ : st) {
    const std::size_t cycle = i / kLayers;
    bool ok = detail::lower_step(*plan, steps[cycle & 1][i & 1]);
    ++i;
    benchmark::DoNotOptimize(ok);
    benchmark::DoNotOptimize(plan->lowered);
  }
  detail::delete_step_plan(plan);
}

void register_call(const Call* c, const Call* twin) {
  reg(("api/validate/" + c->name).c_str(), [c](benchmark::State& st) {
    const Backend b = resolve_backend(Backend::kAuto);
    for (auto _ : st) {
      Result r = validate(c->args, b);
      benchmark::DoNotOptimize(r);
    }
  });
  reg(("api/lower/" + c->name).c_str(), [c](benchmark::State& st) {
    for (auto _ : st) {
      detail::LaunchParams p;
      Result r = detail::lower(c->args, &p);
      benchmark::DoNotOptimize(r);
      benchmark::DoNotOptimize(p);
    }
  });
  const Arguments &x = c->args, &y = twin->args;
  reg(("api/step/" + c->name).c_str(),
      [&x](benchmark::State& st) { time_steps(st, x, x, x, false); });
  reg(("api/step-changed/" + c->name).c_str(), [&x](benchmark::State& st) {
    Arguments changed = x;
    changed.stream = reinterpret_cast<void*>(std::uintptr_t(0x100));  // never launched on
    time_steps(st, x, x, changed, false);
  });
  reg(("api/step-moving/" + c->name).c_str(),
      [&x, &y](benchmark::State& st) { time_steps(st, x, x, y, false); });
  reg(("api/step-moving-cold/" + c->name).c_str(),
      [&x, &y](benchmark::State& st) { time_steps(st, x, x, y, true); }, true);
  reg(("api/stepfields-moving/" + c->name).c_str(),
      [&x, &y](benchmark::State& st) { time_steps(st, x, step_of(x), step_of(y), false); });
  reg(("api/stepfields-moving-cold/" + c->name).c_str(),
      [&x, &y](benchmark::State& st) { time_steps(st, x, step_of(x), step_of(y), true); }, true);
  // Every other step at half the tokens (none for one token): every step changes a size.
  const auto halved = [](const Arguments& a) {
    Step s = step_of(a);
    s.nnz /= 2;
    return s;
  };
  reg(("api/stepfields-sized/" + c->name).c_str(),
      [&x, &y, halved](benchmark::State& st) { time_steps(st, x, step_of(x), halved(y), false); });
  reg(("api/stepfields-sized-cold/" + c->name).c_str(),
      [&x, &y, halved](benchmark::State& st) { time_steps(st, x, step_of(x), halved(y), true); },
      true);
  reg(("api/stepfields-layers/" + c->name).c_str(),
      [&x, &y](benchmark::State& st) { time_layers(st, x, y); });
  if (backend_compiled(Backend::kHost)) {
    reg(("api/prepared/host/" + c->name).c_str(), [c](benchmark::State& st) {
      PreparedCall call(Backend::kHost);
      if (!call.prepare(c->args).ok()) std::abort();
      for (auto _ : st) {
        Result r = call.run(c->args);
        benchmark::DoNotOptimize(r);
      }
    });
    reg(("api/run/host/" + c->name).c_str(), [c](benchmark::State& st) {
      for (auto _ : st) {
        Result r = run(c->args, Backend::kHost);
        benchmark::DoNotOptimize(r);
      }
    });
    reg(("api/launch/host/" + c->name).c_str(), [c](benchmark::State& st) {
      const detail::BackendOps* ops = detail::find_backend(Backend::kHost);
      detail::LaunchParams p;
      if (!detail::lower(c->args, &p).ok()) std::abort();
      for (auto _ : st) {
        Result r = ops->launch(p, nullptr);
        benchmark::DoNotOptimize(r);
      }
    });
  }
  for (Backend b : {Backend::kCuda, Backend::kHip}) {
    if (!backend_compiled(b) || backend_available(b)) continue;
    const std::string name = std::string("api/run-nodevice/") + to_string(b) + "/" + c->name;
    reg(name.c_str(), [c, b](benchmark::State& st) {
      for (auto _ : st) {
        Result r = run(c->args, b);
        benchmark::DoNotOptimize(r);
      }
    });
  }
}

void register_backend_queries() {
  for (Backend b : {Backend::kHost, Backend::kCuda, Backend::kHip}) {
    const detail::BackendOps* ops = detail::find_backend(b);
    if (ops == nullptr) continue;
    reg((std::string("api/backend_available/") + to_string(b)).c_str(), [b](benchmark::State& st) {
      for (auto _ : st) {
        bool a = backend_available(b);
        benchmark::DoNotOptimize(a);
      }
    });
    reg((std::string("api/device_query/") + to_string(b)).c_str(), [ops](benchmark::State& st) {
      for (auto _ : st) {
        bool a = ops->available();
        benchmark::DoNotOptimize(a);
      }
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--iterations=", 13) == 0) {
      g_iterations = std::atoll(argv[i] + 13);
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc;
      --i;
    }
  }
  // Each call with a twin of its own buffers (api/step-moving).
  static std::vector<std::unique_ptr<Call>> calls, twins;
  const struct {
    const char* shape;
    std::int64_t nnz;
    bool page_table;
  } kCalls[] = {{"llama-3.1-8b", 8, false},
                {"llama-3.1-8b", 8, true},
                {"deepseek-v3-mla-tp8", 8, false},
                {"partial-rotary", 8, false},
                {"gpt-oss-120b-tp8", 1, false}};
  for (const auto& k : kCalls) {
    calls.push_back(make_call(k.shape, k.nnz, k.page_table));
    twins.push_back(make_call(k.shape, k.nnz, k.page_table));
    register_call(calls.back().get(), twins.back().get());
  }
  register_backend_queries();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
