// ropekv_perf: the perf suite (Google Benchmark) of the fused op and of the
// unfused baseline, for every compiled backend, over the canonical shapes
// (perf_problem.cpp). Run with --help for what it measures.
//
// stdout carries only Google Benchmark's output (so --benchmark_format=json
// stays valid JSON); the copy ceilings and notes go to stderr.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "perf_problem.hpp"
#include "ropekv/ropekv.hpp"
#include "unfused.hpp"
#if ROPEKV_ENABLE_KOKKOS
#include "host/threads.hpp"
#endif
#if ROPEKV_ENABLE_CUDA
#include "cuda_perf.hpp"
#endif

namespace ropekv_perf {
namespace {

void print_help() {
  std::printf(
      "ropekv_perf: fused RoPE + FP8 quantize + paged KV-cache append vs the unfused\n"
      "baseline (RoPE in bf16, then quantize q, then reshape_and_cache), per backend.\n"
      "\n"
      "Benchmarks are named BACKEND/SHAPE/nnz:TOKENS, BACKEND one of\n"
      "  host, host-unfused         Kokkos host backend / plain host loops\n"
      "  cuda[-KIND][-hot][-pdl[-early]][-pt]  CUDA: KIND none = the fused op,\n"
      "    unfused = three simple kernels, floor = the floor of the op's chain of\n"
      "    dependent loads (index entries, cos/sin row, page-table entries, one\n"
      "    byte stored per output row), copy = cudaMemcpyAsync of the op's bytes,\n"
      "    cpu-run / cpu-launch = CPU time per call of run() / of a bare launch of\n"
      "    the kernel run() launches (cpu-run's counters: the bare launch, each\n"
      "    step of run() and PreparedCall::run(), timed in alternating batches);\n"
      "    -hot = one buffer set; -pdl = programmatic\n"
      "    dependent launch; -early = with indices_ready_before_previous_kernel;\n"
      "    -pt = page-table addressing (int32 arrays), else slot mapping (int64).\n"
      "Shapes (bf16 in, e4m3fn out, fp32 cos/sin, NHD cache, page size 16, NeoX,\n"
      "slot mapping, k/v scale equal unless noted):\n"
      "  gpt-oss-120b-tp8 (Hq 8, Hk 1, D 64, R 64), gpt-oss-120b-tp1 (64/8/64/64),\n"
      "  llama-3.1-8b (32/8/128/128), llama-3.1-70b-tp8 (8/1/128/128),\n"
      "  partial-rotary (32/8/128, R 64), deepseek-v3-mla-tp8 (MLA: Hq 16, q 64 rope +\n"
      "  512 nope, k 64 rope + 512 latent, no V, interleaved, vLLM [latent|rope] cache);\n"
      "  variants of llama-3.1-8b: -hnd (HND cache), -ps64 (page size 64), -kvscales\n"
      "  (k scale != v scale), -generic (token stride odd: every row misaligned, so\n"
      "  the generic path runs; compare with llama-3.1-8b for the vector path),\n"
      "  -fp16 (fp16 in; no unfused rows).\n"
      "Token counts: decode 1, 8, 64, 256, 1024 (one token per sequence, random\n"
      "positions < 4016, shuffled pages), prefill 8192, 32768 (4 sequences).\n"
      "HOST SET IS TRIMMED (2-core CI machine, full run in a few minutes): nnz 1, 64,\n"
      "1024, 8192 per shape, 32768 for llama-3.1-8b only, variants at 64 and 8192.\n"
      "GPU set: every shape and variant at every token count.\n"
      "\n"
      "Counters: us_per_call; GBps = byte-model bytes / time (per token: read q,k,v\n"
      "bf16, the fp32 cos/sin row, int64 position + slot; write q,k,v e4m3fn; the\n"
      "unfused baseline is charged the same bytes, i.e. its effective bandwidth);\n"
      "pct_of_copy = GBps / copy_GBps, the copy ceiling measured in this run (host:\n"
      "memcpy of 256 MiB split over as many threads as the host backend runs a large\n"
      "call on (ROPEKV_HOST_THREADS, default: the CPUs available), GPU:\n"
      "cudaMemcpyAsync device-to-device of 1 GiB, both counting bytes read + written,\n"
      "median of several); speedup_vs_unfused = unfused time / fused time, both\n"
      "measured in this run (the host unfused baseline runs each pass on the host\n"
      "backend's threads).\n"
      "Host timing: median wall time per call over back-to-back calls (decode sizes\n"
      "are cache-warm); the median, like the ceiling's, discounts calls slowed by\n"
      "other tenants of a shared machine.\n"
      "GPU timing: CUDA events around a graph of >= 100 back-to-back calls rotating\n"
      "over enough buffer sets that the data set exceeds 240 MB (4x the H200's L2;\n"
      "label 'l2-resident' when 1000 calls cannot reach that), 2 warm-up replays,\n"
      "median of 9 timed replays; the fused output is checked bit for bit against\n"
      "the host backend first (nnz <= 1024, when the host backend is compiled).\n"
      "-hot rows (nnz <= 256): every call on one buffer set, so inputs, outputs\n"
      "and their pages stay in the L2 and the TLBs (as when q, k, v come straight\n"
      "from the previous kernel); label 'hot'.\n"
      "cuda-copy (every nnz, -hot too): cudaMemcpyAsync D2D moving the op's byte count (half\n"
      "read, half written) in the same graph method; the fused rows then report\n"
      "pct_of_same_size_copy = copy time / fused time. Fused decode rows report\n"
      "x_floor = fused time / floor time (same addressing, hot or rotated).\n"
      "cuda-move / cuda-mathfloor (decode sizes with and without PDL, larger sizes\n"
      "rotated without): a kernel moving the q, k, v bytes, and the same with the\n"
      "op's arithmetic (-bN: blocks of N threads a token; -flatbN: one 1D grid).\n"
      "cuda-movearith (decode sizes): the move kernel with less arithmetic than the\n"
      "op needs (one cos/sin pair, scale folded in, as many units rotated).\n"
      "-pdl rows of the movearith and math floors let the next launch in as the fused\n"
      "kernel does without early indices, -hot-pdl-early rows as it does with them.\n"
      "cuda-chainfloor-bN (-pt too; decode sizes -hot too): the math floor behind the\n"
      "floor's index chain (inputs with the index entries, then cos/sin at the position;\n"
      "contiguous output, no page look-up).\n"
      "cuda-opfloor-b128[-uU] (64-256 tokens, -hot too; larger sizes -uU): the op's\n"
      "whole work one unit (U units) a thread, with its own index entries, cos/sin at\n"
      "the position and destinations.\n"
      "ROPEKV_PERF_TUNING='decode=-1|1|2|3|4,pdl_trigger=-1|1,bulk=1,rows=1,decode_warps=-1|N,"
      "flat_tables=-1|N,flat_slots=-1|N,rows_blocks=-1|N,rows_dynamic=1,"
      "rows_guided=-1|N,flat_pair=1'\n"
      "overrides the launcher's rules for measurements (cuda/launcher.hpp);\n"
      "ROPEKV_PERF_GPU_NNZ='512,2048' replaces the GPU rows' token counts.\n"
      "The ceilings are printed on stderr. Run only the GPU part with\n"
      "--benchmark_filter='^cuda'.\n"
      "\n");
  benchmark::PrintDefaultHelp();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string bench_name(const char* backend, const Shape& s, std::int64_t nnz) {
  return std::string(backend) + "/" + s.name + "/nnz:" + std::to_string(nnz);
}

// Unfused times measured in this run, by "backend/shape/nnz" (fused name).
std::map<std::string, double>& unfused_us() {
  static std::map<std::string, double> m;
  return m;
}

void set_counters(benchmark::State& st, const Shape& s, std::int64_t nnz, double us,
                  double copy_gbps) {
  const double gbps = model_bytes(s, nnz) / (us * 1e-6) / 1e9;
  st.counters["us_per_call"] = us;
  st.counters["GBps"] = gbps;
  st.counters["copy_GBps"] = copy_gbps;
  st.counters["pct_of_copy"] = copy_gbps > 0 ? 100.0 * gbps / copy_gbps : 0.0;
  st.counters["MB_per_call"] = model_bytes(s, nnz) / 1e6;
}

// ------------------------------------------------------------------ host
// memcpy of 256 MiB, bytes read + written, median of 7, split into as many
// contiguous parts and threads as the host backend uses for a large call
// (like for like: the fused op's figure on n threads against n threads'
// copy bandwidth).
int host_threads() {
#if ROPEKV_ENABLE_KOKKOS
  return ropekv::detail::host_backend_threads();
#else
  return 1;
#endif
}

double host_copy_gbps() {
  static const double gbps = [] {
    const std::size_t n = std::size_t(256) << 20;
    const int threads = host_threads();
    std::vector<char> a(n, 1), b(n, 2);
    auto copy_part = [&](int i) {
      const std::size_t lo = n * std::size_t(i) / std::size_t(threads),
                        hi = n * std::size_t(i + 1) / std::size_t(threads);
      std::memcpy(b.data() + lo, a.data() + lo, hi - lo);
    };
    std::vector<double> t;
    for (int i = 0; i < 8; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> workers;
      for (int w = 0; w + 1 < threads; ++w) workers.emplace_back(copy_part, w);
      copy_part(threads - 1);
      for (std::thread& w : workers) w.join();
      benchmark::ClobberMemory();
      if (i > 0) t.push_back(seconds_since(t0));
    }
    std::sort(t.begin(), t.end());
    const double g = 2.0 * double(n) / t[t.size() / 2] / 1e9;
    std::fprintf(stderr,
                 "ropekv_perf: host copy ceiling %.2f GB/s (memcpy 256 MiB on %d thread%s, the "
                 "host backend's thread count; read + write, median of 7)\n",
                 g, threads, threads == 1 ? "" : "s");
    return g;
  }();
  return gbps;
}

struct HostProblem {
  std::string key;
  Batch batch;
  std::vector<std::uint16_t> in, q_rot, k_rot;
  std::vector<std::uint8_t> q_out, k_cache, v_cache;
  ropekv::Arguments args;
};

// The buffers of (shape, nnz), shared by the fused and unfused benchmarks
// that run one after the other; one problem is kept at a time.
HostProblem& host_problem(const Shape& s, std::int64_t nnz) {
  static std::unique_ptr<HostProblem> cur;
  const std::string key = s.name + "/" + std::to_string(nnz);
  if (cur && cur->key == key) return *cur;
  cur.reset();
  cur = std::make_unique<HostProblem>();
  HostProblem& p = *cur;
  p.key = key;
  const std::uint64_t seed = std::hash<std::string>{}(key);
  p.batch = make_batch(s, nnz, seed);
  const Sizes z = sizes_of(s, p.batch);
  p.in.resize(std::size_t(z.in_elems));
  fill_random_bf16(p.in.data(), z.in_elems, seed);
  p.q_rot.resize(std::size_t(z.q_rot_elems));
  p.k_rot.resize(std::size_t(z.k_rot_elems));
  p.q_out.resize(std::size_t(z.q_out_bytes));
  p.k_cache.resize(std::size_t(z.k_cache_bytes));
  p.v_cache.resize(std::size_t(z.v_cache_bytes));
  Buffers b;
  b.in = p.in.data();
  b.q_out = p.q_out.data();
  b.k_cache = p.k_cache.data();
  b.v_cache = z.v_cache_bytes > 0 ? p.v_cache.data() : nullptr;
  b.cos_sin = const_cast<float*>(cos_sin_table(s.rotary, p.batch.max_pos).data());
  b.positions = p.batch.positions.data();
  b.slots = p.batch.slots.data();
  p.args = make_arguments(s, p.batch, b);
  return p;
}

ropekv::Result host_call(HostProblem& p, bool fused) {
  return fused ? ropekv::run(p.args, ropekv::Backend::kHost)
               : unfused_host(p.args, p.q_rot.data(), p.k_rot.data());
}

// The shapes the unfused baselines take (their input dtype; the perf shapes'
// cos/sin and outputs are theirs).
bool has_unfused(const Shape& s) { return s.in == kUnfusedInput; }

// Median time per call over at least `min_s` seconds (fallback when the
// matching unfused benchmark was filtered out).
double host_time_us(HostProblem& p, bool fused, double min_s) {
  std::vector<double> t;
  const auto t0 = std::chrono::steady_clock::now();
  do {
    const auto c0 = std::chrono::steady_clock::now();
    host_call(p, fused);
    t.push_back(seconds_since(c0));
  } while (seconds_since(t0) < min_s || t.size() < 3);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2] * 1e6;
}

void bm_host(benchmark::State& st, const Shape* s, std::int64_t nnz, bool fused) {
  const double ceiling = host_copy_gbps();
  HostProblem& p = host_problem(*s, nnz);
  const ropekv::Result r = host_call(p, fused);  // checks success, touches every page
  if (!r.ok()) {
    st.SkipWithError((std::string(ropekv::to_string(r.status)) + ": " + r.message).c_str());
    return;
  }
  std::vector<double> t;
  for (auto _ : st) {
    const auto c0 = std::chrono::steady_clock::now();
    host_call(p, fused);
    benchmark::ClobberMemory();
    t.push_back(seconds_since(c0));
  }
  std::sort(t.begin(), t.end());
  const double us = t[t.size() / 2] * 1e6;  // median per call
  set_counters(st, *s, nnz, us, ceiling);
  const std::string key = bench_name("host", *s, nnz);
  if (!fused) {
    unfused_us()[key] = us;
  } else if (has_unfused(*s)) {
    auto it = unfused_us().find(key);
    const double uf = it != unfused_us().end() ? it->second : host_time_us(p, false, 0.05);
    st.counters["speedup_vs_unfused"] = uf / us;
  }
}

// ------------------------------------------------------------------ CUDA
#if ROPEKV_ENABLE_CUDA
double gpu_copy_gbps(std::string* err) {
  static std::string error;
  static const double gbps = [] {
    const double g = cuda_copy_gbps(&error);
    if (g > 0)
      std::fprintf(stderr,
                   "ropekv_perf: GPU copy ceiling %.1f GB/s (cudaMemcpyAsync D2D 1 GiB, "
                   "read + write, median of 9)\n",
                   g);
    else
      std::fprintf(stderr, "ropekv_perf: GPU copy ceiling failed: %s\n", error.c_str());
    return g;
  }();
  *err = error;
  return gbps;
}

// Same-size copy times measured in this run, keyed like the others.
std::map<std::string, double>& copy_us() {
  static std::map<std::string, double> m;
  return m;
}
// Reference times of this run, by shape/nnz and (hot, page table).
std::string ref_key(const Shape& s, std::int64_t nnz, bool hot, bool page_table) {
  return s.name + "/" + std::to_string(nnz) + (hot ? "/hot" : "") + (page_table ? "/pt" : "");
}
std::map<std::string, double>& floor_us() {
  static std::map<std::string, double> m;
  return m;
}
std::map<std::string, double>& data_floor_us() {
  static std::map<std::string, double> m;
  return m;
}

void bm_cuda(benchmark::State& st, const Shape* s, std::int64_t nnz, GpuCase c) {
  std::string err;
  const double ceiling = gpu_copy_gbps(&err);
  if (ceiling <= 0) {
    st.SkipWithError(("copy ceiling: " + err).c_str());
    return;
  }
  const GpuTiming t = cuda_time(*s, nnz, c);
  if (!t.ok) {
    st.SkipWithError(t.error.c_str());
    return;
  }
  for (auto _ : st) st.SetIterationTime(t.us_per_call * 1e-6);
  set_counters(st, *s, nnz, t.us_per_call, ceiling);
  st.counters["spread_pct"] = t.spread_pct;
  st.counters["working_set_MB"] = t.working_set_mb;
  st.counters["graph_calls"] = t.calls;
  for (const auto& kv : t.counters) st.counters[kv.first] = kv.second;
  std::string label = t.check;
  if (!t.path.empty()) label = "path " + t.path + "; " + label;
  if (c.hot)
    label = "hot: one buffer set; " + label;
  else if (t.working_set_mb < 240.0 && c.kind != GpuKind::kCpuRun &&
           c.kind != GpuKind::kCpuBareLaunch)
    label = "l2-resident; " + label;
  st.SetLabel(label);
  const std::string key = ref_key(*s, nnz, c.hot, c.page_table);
  switch (c.kind) {
    case GpuKind::kCopy: copy_us()[key] = t.us_per_call; break;
    case GpuKind::kMove:
    case GpuKind::kMathFloor: break;
    case GpuKind::kUnfused: unfused_us()[key] = t.us_per_call; break;
    case GpuKind::kFloor: floor_us()[key] = t.us_per_call; break;
    case GpuKind::kDataFloor: data_floor_us()[key] = t.us_per_call; break;
    case GpuKind::kCpuBareLaunch:
    case GpuKind::kCpuRun: break;  // kCpuRun's counters come from its own rounds
    case GpuKind::kFused: {
      const std::string sm_key = ref_key(*s, nnz, c.hot, false);
      auto u = unfused_us().find(sm_key);
      if (u != unfused_us().end()) st.counters["speedup_vs_unfused"] = u->second / t.us_per_call;
      auto f = floor_us().find(key);
      if (f != floor_us().end()) st.counters["x_floor"] = t.us_per_call / f->second;
      auto df = data_floor_us().find(key);
      if (df != data_floor_us().end()) st.counters["x_data_floor"] = t.us_per_call / df->second;
      auto cp = copy_us().find(ref_key(*s, nnz, c.hot, false));
      if (cp != copy_us().end()) {
        st.counters["pct_of_same_size_copy"] = 100.0 * cp->second / t.us_per_call;
        if (nnz <= 256) st.counters["x_same_size_copy"] = t.us_per_call / cp->second;
      }
      break;
    }
  }
}

void register_cuda(const Shape& s, std::int64_t nnz, const GpuCase& c) {
  benchmark::RegisterBenchmark(bench_name(case_name(c).c_str(), s, nnz).c_str(), bm_cuda, &s, nnz,
                               c)
      ->Iterations(1)
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

// The GPU rows of one (shape, nnz), references first (floor, unfused, copy,
// bare launch) so that the fused rows can report their ratios.
//  * decode sizes (nnz <= 256), canonical shapes: both addressing forms,
//    rotated and hot, with and without PDL and the early-index opt-in, each
//    with its floor; unfused for slot mapping; a same-size copy (rotated
//    and hot: what moving the op's bytes alone costs at that size) and the
//    move floor (a kernel moving the q, k, v bytes) and the math floor (the
//    same with the op's arithmetic), with and without PDL (hot, PDL: also with
//    the early-index path's trigger); from 64 tokens the
//    op floor in both forms, rotated and hot, without PDL;
//  * larger sizes: slot mapping with and without PDL (and early indices),
//    page table, unfused, same-size copy, and for the canonical shapes the
//    move and math floors and the op floor in both forms (rotated, no PDL);
//  * the llama-3.1-8b variants: slot mapping, fewer rows;
//  * CPU time per call (nnz 8, and 8192 for llama-3.1-8b): run() and the
//    bare launch of its kernel.
void register_cuda_rows(const Shape& s, std::int64_t nnz, bool canonical) {
  auto mk = [](GpuKind kind, bool pt, bool hot, bool pdl, bool early) {
    GpuCase c;
    c.kind = kind;
    c.page_table = pt;
    c.hot = hot;
    c.pdl = pdl;
    c.early = early;
    return c;
  };
  // The op floor (one 1D grid, blocks of 128, `units` units a thread).
  auto op_floor = [&](bool pt, bool hot, int units) {
    GpuCase c = mk(GpuKind::kMathFloor, pt, hot, false, false);
    c.block = 128;
    c.flat = c.op = true;
    c.units = units;
    return c;
  };
  // The chain floor (blocks of `block` threads a token).
  auto chain_floor = [&](bool pt, bool hot, int block) {
    GpuCase c = mk(GpuKind::kMathFloor, pt, hot, false, false);
    c.block = block;
    c.chain = true;
    return c;
  };
  const bool decode = nnz <= 256;
  if (decode && canonical) {
    for (bool pt : {false, true})
      for (bool hot : {false, true})
        register_cuda(s, nnz, mk(GpuKind::kFloor, pt, hot, false, false));
    for (bool pt : {false, true})
      for (bool hot : {false, true})
        register_cuda(s, nnz, mk(GpuKind::kDataFloor, pt, hot, false, false));
    for (bool hot : {false, true})
      register_cuda(s, nnz, mk(GpuKind::kUnfused, false, hot, false, false));
    for (bool hot : {false, true})
      register_cuda(s, nnz, mk(GpuKind::kCopy, false, hot, false, false));
    // The arith and math floors (early, with PDL: every unit lets the next launch
    // in at its start, as the fused kernel does with early indices).
    auto arith_math_floors = [&](bool hot, bool pdl, bool early) {
      GpuCase arith = mk(GpuKind::kMove, false, hot, pdl, early);
      arith.arith = true;
      register_cuda(s, nnz, arith);
      for (int block : {64, 128, 256}) {
        GpuCase c = mk(GpuKind::kMathFloor, false, hot, pdl, early);
        c.block = block;
        register_cuda(s, nnz, c);
      }
      GpuCase flat = mk(GpuKind::kMathFloor, false, hot, pdl, early);
      flat.block = 128;
      flat.flat = true;
      register_cuda(s, nnz, flat);
    };
    for (bool hot : {false, true})
      for (bool pdl : {false, true}) {
        register_cuda(s, nnz, mk(GpuKind::kMove, false, hot, pdl, false));
        arith_math_floors(hot, pdl, false);
      }
    arith_math_floors(true, true, true);  // (hot: that target's rows)
    // The chain floor: the math floor behind the floor's index chain (both forms).
    for (bool pt : {false, true})
      for (bool hot : {false, true})
        for (int block : {64, 128, 256}) register_cuda(s, nnz, chain_floor(pt, hot, block));
    // The op floor from 64 tokens, where a call is the index chain followed by
    // one warp's arithmetic (perf/RESULTS.md).
    if (nnz >= 64)
      for (bool pt : {false, true})
        for (bool hot : {false, true}) register_cuda(s, nnz, op_floor(pt, hot, 1));
    for (bool pt : {false, true})
      for (bool hot : {false, true}) {
        register_cuda(s, nnz, mk(GpuKind::kFused, pt, hot, false, false));
        register_cuda(s, nnz, mk(GpuKind::kFused, pt, hot, true, false));
        register_cuda(s, nnz, mk(GpuKind::kFused, pt, hot, true, true));
      }
  } else if (decode) {
    for (bool hot : {false, true}) {
      if (has_unfused(s)) register_cuda(s, nnz, mk(GpuKind::kUnfused, false, hot, false, false));
      register_cuda(s, nnz, mk(GpuKind::kFused, false, hot, false, false));
    }
    register_cuda(s, nnz, mk(GpuKind::kFused, false, false, true, false));
  } else {
    register_cuda(s, nnz, mk(GpuKind::kCopy, false, false, false, false));
    if (has_unfused(s)) register_cuda(s, nnz, mk(GpuKind::kUnfused, false, false, false, false));
    register_cuda(s, nnz, mk(GpuKind::kFused, false, false, false, false));
    register_cuda(s, nnz, mk(GpuKind::kFused, false, false, true, false));
    if (canonical) {
      register_cuda(s, nnz, mk(GpuKind::kMove, false, false, false, false));
      for (int block : {128, 256}) {
        GpuCase c = mk(GpuKind::kMathFloor, false, false, false, false);
        c.block = block;
        register_cuda(s, nnz, c);
        c.flat = true;
        register_cuda(s, nnz, c);
      }
      for (bool pt : {false, true}) {
        for (int units : {1, 2, 4}) register_cuda(s, nnz, op_floor(pt, false, units));
        for (int block : {128, 256}) register_cuda(s, nnz, chain_floor(pt, false, block));
      }
      register_cuda(s, nnz, mk(GpuKind::kFused, false, false, true, true));
      register_cuda(s, nnz, mk(GpuKind::kFused, true, false, false, false));
    }
  }
  if (canonical && (nnz == 8 || (nnz == 8192 && s.name == "llama-3.1-8b"))) {
    register_cuda(s, nnz, mk(GpuKind::kCpuBareLaunch, false, false, false, false));
    register_cuda(s, nnz, mk(GpuKind::kCpuRun, false, false, false, false));
  }
}
#endif

void register_all() {
  const bool host = ropekv::backend_compiled(ropekv::Backend::kHost);
  if (host) {
    for (const Shape& s : shapes()) {
      for (std::int64_t nnz : s.host_nnz) {
        if (has_unfused(s))
          benchmark::RegisterBenchmark(bench_name("host-unfused", s, nnz).c_str(), bm_host, &s, nnz,
                                       false)
              ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(bench_name("host", s, nnz).c_str(), bm_host, &s, nnz, true)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  } else {
    std::fprintf(stderr,
                 "ropekv_perf: host backend not compiled: host benchmarks not registered\n");
  }
#if ROPEKV_ENABLE_CUDA
  std::string dev;
  if (!cuda_present(&dev)) {
    std::fprintf(stderr,
                 "ropekv_perf: no usable CUDA device (%s): CUDA benchmarks not registered\n",
                 dev.c_str());
    return;
  }
  std::fprintf(stderr, "ropekv_perf: CUDA device: %s\n", dev.c_str());
  if (const char* tune = std::getenv("ROPEKV_PERF_TUNING")) {
    if (!set_cuda_tuning(tune)) {
      std::fprintf(stderr, "ropekv_perf: malformed ROPEKV_PERF_TUNING '%s'\n", tune);
      std::exit(2);
    }
    std::fprintf(stderr, "ropekv_perf: launcher overrides for measurement: %s\n", tune);
  }
  for (const Shape& s : shapes())
    for (std::int64_t nnz : s.gpu_nnz) register_cuda_rows(s, nnz, s.canonical);
#else
  std::fprintf(stderr,
               "ropekv_perf: CUDA backend not compiled in this build: no CUDA benchmarks\n");
#endif
}

}  // namespace
}  // namespace ropekv_perf

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv, &ropekv_perf::print_help);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  ropekv_perf::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
#if ROPEKV_ENABLE_CUDA
  ropekv_perf::cuda_release();
#endif
  return 0;
}
