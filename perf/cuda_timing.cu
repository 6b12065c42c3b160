// GPU timing of the perf suite (cuda_perf.hpp): device buffers of (shape, nnz), the calls and
// their output check, and CUDA graphs of back-to-back calls replayed and timed with events.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/launcher.hpp"
#include "cuda_perf.hpp"
#include "cuda_problem.hpp"
#include "detail/lower.hpp"
#include "unfused.hpp"

namespace ropekv_perf {

namespace {

constexpr double kTargetWorkingSet = 240e6;  // bytes: 4x the H200's 60 MB L2
constexpr int kMinCalls = 100;               // calls per graph
constexpr int kMaxSets = 1000;               // buffer sets (= calls when above kMinCalls)
constexpr int kWarmupReplays = 2;
constexpr int kTimedReplays = 9;

// Random bf16 values, never zero: the recipe of fill_random_bf16 (host).
__global__ void fill_bf16_kernel(std::uint16_t* data, std::int64_t n, std::uint64_t seed) {
  const std::int64_t chunks = (n + 3) / 4;
  for (std::int64_t c = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; c < chunks;
       c += std::int64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t h = fill_hash(seed, std::uint64_t(c));
    for (int k = 0; k < 4 && 4 * c + k < n; ++k) data[4 * c + k] = random_bf16(h >> (16 * k));
  }
}

std::size_t align_up(std::size_t n) { return (n + 255) & ~std::size_t(255); }

std::unique_ptr<DeviceProblem>& current() {
  static std::unique_ptr<DeviceProblem> p;
  return p;
}

bool build_problem(const Shape& s, std::int64_t nnz, DeviceProblem* dp, std::string* error) {
  dp->shape = &s;
  const std::uint64_t seed = std::hash<std::string>{}(dp->key);
  dp->batch = make_batch(s, nnz, seed);
  const Batch& bt = dp->batch;
  dp->sizes = sizes_of(s, bt);
  dp->set_bytes = model_bytes(s, nnz);
  dp->sets =
      int(std::min<double>(kMaxSets, std::max(1.0, std::ceil(kTargetWorkingSet / dp->set_bytes))));
  const Sizes& z = dp->sizes;
  const std::size_t in_b = align_up(std::size_t(z.in_elems) * 2);
  const std::size_t q_b = align_up(std::size_t(z.q_out_bytes));
  const std::size_t k_b = align_up(std::size_t(z.k_cache_bytes));
  const std::size_t v_b = align_up(std::size_t(z.v_cache_bytes));
  const std::size_t qr_b = align_up(std::size_t(z.q_rot_elems) * 2);
  const std::size_t kr_b = align_up(std::size_t(z.k_rot_elems) * 2);
  const std::size_t per_set = in_b + q_b + k_b + v_b + qr_b + kr_b;
  PERF_CUDA_TRY(cudaMalloc(&dp->pool.ptr, per_set * std::size_t(dp->sets)));
  PERF_CUDA_TRY(cudaMemset(dp->pool.ptr, 0, per_set * std::size_t(dp->sets)));
  // Shared by every set: the cos/sin table and both forms of the indices.
  const std::vector<float>& table = cos_sin_table(s.rotary, bt.max_pos);
  struct Part {
    const void* host;
    std::size_t bytes;
    std::size_t offset;
  };
  Part parts[] = {{table.data(), table.size() * sizeof(float), 0},
                  {bt.positions.data(), bt.positions.size() * 8, 0},
                  {bt.slots.data(), bt.slots.size() * 8, 0},
                  {bt.batch_indices.data(), bt.batch_indices.size() * 4, 0},
                  {bt.kv_positions.data(), bt.kv_positions.size() * 4, 0},
                  {bt.kv_indptr.data(), bt.kv_indptr.size() * 4, 0},
                  {bt.kv_indices.data(), bt.kv_indices.size() * 4, 0}};
  std::size_t shared_bytes = 0;
  for (Part& part : parts) {
    part.offset = shared_bytes;
    shared_bytes += align_up(part.bytes);
  }
  PERF_CUDA_TRY(cudaMalloc(&dp->shared.ptr, shared_bytes));
  char* sh = static_cast<char*>(dp->shared.ptr);
  for (const Part& part : parts)
    PERF_CUDA_TRY(cudaMemcpy(sh + part.offset, part.host, part.bytes, cudaMemcpyHostToDevice));
  char* base = static_cast<char*>(dp->pool.ptr);
  for (int i = 0; i < dp->sets; ++i) {
    char* b = base + per_set * std::size_t(i);
    Buffers buf;
    buf.in = b;
    buf.q_out = b + in_b;
    buf.k_cache = b + in_b + q_b;
    buf.v_cache = z.v_cache_bytes > 0 ? b + in_b + q_b + k_b : nullptr;
    buf.cos_sin = sh + parts[0].offset;
    buf.positions = sh + parts[1].offset;
    buf.slots = sh + parts[2].offset;
    buf.batch_indices = sh + parts[3].offset;
    buf.kv_positions = sh + parts[4].offset;
    buf.kv_indptr = sh + parts[5].offset;
    buf.kv_indices = sh + parts[6].offset;
    dp->bufs.push_back(buf);
    dp->q_rot.push_back(b + in_b + q_b + k_b + v_b);
    dp->k_rot.push_back(b + in_b + q_b + k_b + v_b + qr_b);
    dp->args[0].push_back(make_arguments(s, bt, buf, false));
    dp->args[1].push_back(make_arguments(s, bt, buf, true));
    fill_bf16_kernel<<<1024, 256>>>(static_cast<std::uint16_t*>(buf.in), z.in_elems,
                                    seed + std::uint64_t(i));
    PERF_CUDA_TRY(cudaGetLastError());
  }
  PERF_CUDA_TRY(cudaDeviceSynchronize());
  return true;
}

DeviceProblem* device_problem(const Shape& s, std::int64_t nnz, std::string* error) {
  const std::string key = s.name + "/" + std::to_string(nnz);
  std::unique_ptr<DeviceProblem>& cur = current();
  if (cur && cur->key == key) return cur.get();
  cur.reset();
  auto dp = std::make_unique<DeviceProblem>();
  dp->key = key;
  if (!build_problem(s, nnz, dp.get(), error)) return nullptr;
  cur = std::move(dp);
  return cur.get();
}

// Source and destination buffers of the same-size copy, made on first use.
bool ensure_copy_buffers(DeviceProblem& dp, std::string* error) {
  if (dp.copy_src.ptr != nullptr) return true;
  dp.copy_bytes = align_up(std::size_t(dp.set_bytes / 2));
  const std::size_t n = dp.copy_bytes * std::size_t(dp.sets);
  PERF_CUDA_TRY(cudaMalloc(&dp.copy_src.ptr, n));
  PERF_CUDA_TRY(cudaMalloc(&dp.copy_dst.ptr, n));
  PERF_CUDA_TRY(cudaMemset(dp.copy_src.ptr, 1, n));
  PERF_CUDA_TRY(cudaMemset(dp.copy_dst.ptr, 2, n));
  return true;
}

}  // namespace

// ------------------------------------------------------------------ calls
ropekv::Arguments case_arguments(const DeviceProblem& dp, int set, const GpuCase& c,
                                 cudaStream_t stream) {
  ropekv::Arguments a = dp.args[c.page_table ? 1 : 0][std::size_t(set)];
  a.stream = stream;
  a.programmatic_dependent_launch = c.pdl;
  a.indices_ready_before_previous_kernel = c.early;
  return a;
}

namespace {

ropekv::Result call(DeviceProblem& dp, int set, const GpuCase& c, cudaStream_t stream) {
  if (c.kind == GpuKind::kCopy) {
    const std::size_t off = dp.copy_bytes * std::size_t(set);
    return error_result("cudaMemcpyAsync",
                        cudaMemcpyAsync(static_cast<char*>(dp.copy_dst.ptr) + off,
                                        static_cast<char*>(dp.copy_src.ptr) + off, dp.copy_bytes,
                                        cudaMemcpyDeviceToDevice, stream));
  }
  if (c.kind == GpuKind::kMove) return launch_move(dp, set, c, stream);
  const ropekv::Arguments a = case_arguments(dp, set, c, stream);
  if (c.kind == GpuKind::kFloor) return launch_floor(a, *dp.shape, stream);
  if (c.kind == GpuKind::kDataFloor) return launch_data_floor(a, *dp.shape, dp.sizes, stream);
  if (c.kind == GpuKind::kMathFloor) return launch_math_floor(a, dp, set, c, stream);
  if (c.kind == GpuKind::kUnfused)
    return unfused_cuda(a, dp.q_rot[std::size_t(set)], dp.k_rot[std::size_t(set)]);
  return ropekv::run(a, ropekv::Backend::kCuda);
}

std::string message(const ropekv::Result& r) {
  return std::string(ropekv::to_string(r.status)) + ": " + r.message;
}

// The kernel path the launcher takes for a fused case.
std::string launch_path(const DeviceProblem& dp, const GpuCase& c) {
  namespace gpu = ropekv::detail::gpu;
  ropekv::detail::LaunchParams p;
  if (!ropekv::detail::lower(case_arguments(dp, 0, c, nullptr), &p).ok()) return "?";
  gpu::PreparedLaunch l;
  if (!gpu::prepare_launch(p, &l).ok()) return "?";
  return gpu::path_name(l);
}

}  // namespace

// Runs set 0 once on zeroed outputs and, when the host backend is compiled
// and nnz is small, compares q_out and both caches byte for byte with the
// host backend on the same input (once per addressing form). The copy only
// gets its buffers.
bool check_output(DeviceProblem& dp, const GpuCase& c, cudaStream_t stream, std::string* label,
                  std::string* error) {
  if (c.kind == GpuKind::kCopy || c.kind == GpuKind::kMove || c.kind == GpuKind::kMathFloor) {
    *label = c.kind == GpuKind::kCopy   ? "plain copy"
             : c.kind == GpuKind::kMove ? "moves the q, k, v bytes"
                                        : "the op's arithmetic on the q, k, v bytes";
    if (!ensure_copy_buffers(dp, error)) return false;
    if (c.kind != GpuKind::kCopy && dp.copy_bytes < std::size_t(dp.sizes.in_elems)) {
      *error = "move / math floor: the copy buffers are smaller than the input's element count";
      return false;
    }
    return true;
  }
  const Sizes& z = dp.sizes;
  const Buffers& b = dp.bufs[0];
  PERF_CUDA_TRY(cudaMemsetAsync(b.q_out, 0, std::size_t(z.q_out_bytes), stream));
  PERF_CUDA_TRY(cudaMemsetAsync(b.k_cache, 0, std::size_t(z.k_cache_bytes), stream));
  if (b.v_cache != nullptr)
    PERF_CUDA_TRY(cudaMemsetAsync(b.v_cache, 0, std::size_t(z.v_cache_bytes), stream));
  const ropekv::Result r = call(dp, 0, c, stream);
  if (!r.ok()) {
    *error = "first call failed: " + message(r);
    return false;
  }
  PERF_CUDA_TRY(cudaStreamSynchronize(stream));
  PERF_CUDA_TRY(cudaGetLastError());
  *label = "first call succeeded";
  if (c.kind != GpuKind::kFused && c.kind != GpuKind::kCpuRun) return true;
  bool& checked = dp.checked[c.page_table ? 1 : 0];
  if (checked) {
    *label = "bit-identical to host";
    return true;
  }
#if ROPEKV_ENABLE_KOKKOS && !defined(ROPEKV_EXPERIMENT_NO_MATH)
  if (dp.batch.nnz <= 1024) {
    std::vector<std::uint16_t> in(std::size_t(z.in_elems));
    std::vector<std::uint8_t> q(std::size_t(z.q_out_bytes)), kc(std::size_t(z.k_cache_bytes)),
        vc(std::size_t(z.v_cache_bytes));
    std::vector<std::uint8_t> q_ref(q.size(), 0), kc_ref(kc.size(), 0), vc_ref(vc.size(), 0);
    PERF_CUDA_TRY(cudaMemcpy(in.data(), b.in, in.size() * 2, cudaMemcpyDeviceToHost));
    PERF_CUDA_TRY(cudaMemcpy(q.data(), b.q_out, q.size(), cudaMemcpyDeviceToHost));
    PERF_CUDA_TRY(cudaMemcpy(kc.data(), b.k_cache, kc.size(), cudaMemcpyDeviceToHost));
    if (!vc.empty())
      PERF_CUDA_TRY(cudaMemcpy(vc.data(), b.v_cache, vc.size(), cudaMemcpyDeviceToHost));
    Batch& bt = dp.batch;
    Buffers hb;
    hb.in = in.data();
    hb.q_out = q_ref.data();
    hb.k_cache = kc_ref.data();
    hb.v_cache = vc_ref.empty() ? nullptr : vc_ref.data();
    hb.cos_sin = const_cast<float*>(cos_sin_table(dp.shape->rotary, bt.max_pos).data());
    hb.positions = bt.positions.data();
    hb.slots = bt.slots.data();
    hb.batch_indices = bt.batch_indices.data();
    hb.kv_positions = bt.kv_positions.data();
    hb.kv_indptr = bt.kv_indptr.data();
    hb.kv_indices = bt.kv_indices.data();
    const ropekv::Result hr =
        ropekv::run(make_arguments(*dp.shape, bt, hb, c.page_table), ropekv::Backend::kHost);
    if (!hr.ok()) {
      *error = "host reference failed: " + message(hr);
      return false;
    }
    std::size_t diff = 0;
    for (std::size_t i = 0; i < q.size(); ++i) diff += q[i] != q_ref[i];
    for (std::size_t i = 0; i < kc.size(); ++i) diff += kc[i] != kc_ref[i];
    for (std::size_t i = 0; i < vc.size(); ++i) diff += vc[i] != vc_ref[i];
    if (diff != 0) {
      *error = "output differs from the host backend in " + std::to_string(diff) + " of " +
               std::to_string(q.size() + kc.size() + vc.size()) + " bytes";
      return false;
    }
    *label = "bit-identical to host";
    checked = true;
    return true;
  }
#endif
  *label = "first call succeeded (output not compared)";
  return true;
}

namespace {

bool time_graph(DeviceProblem& dp, const GpuCase& c, GpuTiming* out, std::string* error) {
  if (c.kind == GpuKind::kCpuRun || c.kind == GpuKind::kCpuBareLaunch)
    return time_cpu(dp, c, out, error);
  OwnedStream owned;
  PERF_CUDA_TRY(cudaStreamCreateWithFlags(&owned.s, cudaStreamNonBlocking));
  cudaStream_t stream = owned.s;
  std::string label;
  if (!check_output(dp, c, stream, &label, error)) return false;
  if (c.kind == GpuKind::kFused) out->path = launch_path(dp, c);

  const int sets = c.hot ? 1 : dp.sets;
  const int calls = std::max(kMinCalls, sets);
  cudaGraph_t graph = nullptr;
  PERF_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  ropekv::Result failed;
  for (int i = 0; i < calls && failed.ok(); ++i) failed = call(dp, i % sets, c, stream);
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  struct GraphGuard {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t e = nullptr;
    ~GraphGuard() {
      if (e != nullptr) cudaGraphExecDestroy(e);
      if (g != nullptr) cudaGraphDestroy(g);
    }
  } graph_guard{graph, nullptr};
  if (!failed.ok()) {
    cudaGetLastError();
    *error = "call during capture failed: " + message(failed);
    return false;
  }
  if (end != cudaSuccess) {
    *error = cuda_error("cudaStreamEndCapture", end);
    return false;
  }
  PERF_CUDA_TRY(cudaGetLastError());
  PERF_CUDA_TRY(cudaGraphInstantiate(&graph_guard.e, graph, 0));

  cudaEvent_t start = nullptr, stop = nullptr;
  PERF_CUDA_TRY(cudaEventCreate(&start));
  PERF_CUDA_TRY(cudaEventCreate(&stop));
  struct EventGuard {
    cudaEvent_t a, b;
    ~EventGuard() {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  } event_guard{start, stop};
  for (int i = 0; i < kWarmupReplays; ++i) PERF_CUDA_TRY(cudaGraphLaunch(graph_guard.e, stream));
  PERF_CUDA_TRY(cudaStreamSynchronize(stream));
  PERF_CUDA_TRY(cudaGetLastError());
  std::vector<double> ms;
  for (int i = 0; i < kTimedReplays; ++i) {
    PERF_CUDA_TRY(cudaEventRecord(start, stream));
    PERF_CUDA_TRY(cudaGraphLaunch(graph_guard.e, stream));
    PERF_CUDA_TRY(cudaEventRecord(stop, stream));
    PERF_CUDA_TRY(cudaEventSynchronize(stop));
    float t = 0;
    PERF_CUDA_TRY(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(double(t));
  }
  PERF_CUDA_TRY(cudaGetLastError());
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  out->us_per_call = median * 1e3 / calls;
  out->spread_pct = median > 0 ? 100.0 * (sorted.back() - sorted.front()) / median : 0.0;
  out->working_set_mb = dp.set_bytes * sets / 1e6;
  out->sets = sets;
  out->calls = calls;
  out->replays = kTimedReplays;
  out->check = label;
  return true;
}

}  // namespace

bool cuda_present(std::string* description) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    *description = e != cudaSuccess ? cuda_error("cudaGetDeviceCount", e) : "no CUDA device";
    cudaGetLastError();
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    *description = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                   std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) +
                   " SMs, " + std::to_string(prop.l2CacheSize >> 20) + " MiB L2)";
  }
  if (!ropekv::backend_available(ropekv::Backend::kCuda)) {
    *description += ": ropekv's CUDA backend reports no device";
    return false;
  }
  return true;
}

double cuda_copy_gbps(std::string* error) {
  const std::size_t n = std::size_t(1) << 30;
  DeviceBuffer a, b;
  cudaError_t e = cudaMalloc(&a.ptr, n);
  if (e == cudaSuccess) e = cudaMalloc(&b.ptr, n);
  if (e == cudaSuccess) e = cudaMemset(a.ptr, 1, n);
  if (e == cudaSuccess) e = cudaMemset(b.ptr, 2, n);
  cudaStream_t s = nullptr;
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  if (e == cudaSuccess) e = cudaEventCreate(&t0);
  if (e == cudaSuccess) e = cudaEventCreate(&t1);
  std::vector<double> ms;
  for (int i = 0; i < 10 && e == cudaSuccess; ++i) {
    e = cudaEventRecord(t0, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(b.ptr, a.ptr, n, cudaMemcpyDeviceToDevice, s);
    if (e == cudaSuccess) e = cudaEventRecord(t1, s);
    if (e == cudaSuccess) e = cudaEventSynchronize(t1);
    float t = 0;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&t, t0, t1);
    if (i > 0) ms.push_back(double(t));  // the first is a warm-up
  }
  if (t0 != nullptr) cudaEventDestroy(t0);
  if (t1 != nullptr) cudaEventDestroy(t1);
  if (s != nullptr) cudaStreamDestroy(s);
  if (e != cudaSuccess) {
    *error = cuda_error("device-to-device copy", e);
    return -1;
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * double(n) / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

std::string case_name(const GpuCase& c) {
  std::string n = "cuda";
  switch (c.kind) {
    case GpuKind::kFused: break;
    case GpuKind::kUnfused: n += "-unfused"; break;
    case GpuKind::kFloor: n += "-floor"; break;
    case GpuKind::kDataFloor: n += "-datafloor"; break;
    case GpuKind::kCopy: n += "-copy"; break;
    case GpuKind::kMove: n += c.arith ? "-movearith" : "-move"; break;
    case GpuKind::kMathFloor:
      n += std::string(c.op      ? "-opfloor-b"
                       : c.chain ? "-chainfloor-b"
                                 : (c.flat ? "-mathfloor-flatb" : "-mathfloor-b")) +
           std::to_string(c.block) + (c.units > 1 ? "-u" + std::to_string(c.units) : "");
      break;
    case GpuKind::kCpuRun: n += "-cpu-run"; break;
    case GpuKind::kCpuBareLaunch: n += "-cpu-launch"; break;
  }
  if (c.hot) n += "-hot";
  if (c.pdl) n += c.early ? "-pdl-early" : "-pdl";
  if (c.page_table) n += "-pt";
  return n;
}

GpuTiming cuda_time(const Shape& s, std::int64_t nnz, const GpuCase& c) {
  GpuTiming t;
  DeviceProblem* dp = device_problem(s, nnz, &t.error);
  if (dp == nullptr) {
    current().reset();
    return t;
  }
  t.ok = time_graph(*dp, c, &t, &t.error);
  if (!t.ok) cudaGetLastError();
  return t;
}

void cuda_release() {
#ifdef ROPEKV_ROWS_TRACE
  // The last rows launch's trace (a measurement build: scripts/gpu_rows_trace.sh).
  if (const char* out = std::getenv("ROPEKV_ROWS_TRACE_OUT")) {
    namespace gpu = ropekv::detail::gpu;
    std::vector<unsigned long long> trace(std::size_t(gpu::kRowsTraceTeams) * gpu::kRowsTraceSlots);
    gpu::rows_trace_copy(trace.data());
    if (std::FILE* f = std::fopen(out, "wb")) {
      std::fwrite(trace.data(), sizeof trace[0], trace.size(), f);
      std::fclose(f);
    }
  }
#endif
  current().reset();
}

bool set_cuda_tuning(const std::string& spec) {
  ropekv::detail::gpu::Tuning t;
  std::size_t i = 0;
  while (i < spec.size()) {
    const std::size_t comma = std::min(spec.find(',', i), spec.size());
    const std::string item = spec.substr(i, comma - i);
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = item.substr(0, eq);
    const int value = std::atoi(item.c_str() + eq + 1);
    if (key == "decode")
      t.decode = value;
    else if (key == "pdl_trigger")
      t.pdl_trigger = value;
    else if (key == "rows")
      t.rows = value;
    else if (key == "bulk")
      t.bulk = value;
    else if (key == "decode_warps")
      t.decode_warps = value;
    else if (key == "flat_tables")
      t.flat_tables = value;
    else if (key == "flat_slots")
      t.flat_slots = value;
    else if (key == "rows_blocks")
      t.rows_blocks = value;
    else if (key == "rows_dynamic")
      t.rows_dynamic = value;
    else if (key == "rows_guided")
      t.rows_guided = value;
    else if (key == "flat_pair")
      t.flat_pair = value;
    else
      return false;
    i = comma + 1;
  }
  ropekv::detail::gpu::set_tuning(t);
  return true;
}

}  // namespace ropekv_perf
