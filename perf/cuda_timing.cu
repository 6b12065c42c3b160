// GPU timing of the perf suite: device buffers of (shape, nnz), a CUDA graph
// of back-to-back calls rotating over enough buffer sets to leave the L2,
// replayed and timed with events (median per call). See cuda_perf.hpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda_perf.hpp"
#include "unfused.hpp"

namespace ropekv_perf {

namespace {

constexpr double kTargetWorkingSet = 240e6;  // bytes: 4x the H200's 60 MB L2
constexpr int kMinCalls = 100;               // calls per graph
constexpr int kMaxSets = 1000;               // buffer sets (= calls when above kMinCalls)
constexpr int kWarmupReplays = 2;
constexpr int kTimedReplays = 9;

std::string cuda_error(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}
#define PERF_CUDA_TRY(expr)           \
  do {                                \
    const cudaError_t e_ = (expr);    \
    if (e_ != cudaSuccess) {          \
      *error = cuda_error(#expr, e_); \
      return false;                   \
    }                                 \
  } while (0)

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

// A device allocation freed on destruction.
struct DeviceBuffer {
  void* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

// The device side of one (shape, nnz): `sets` copies of the input and output
// buffers (and the unfused scratch), one copy of the tables and indices.
struct DeviceProblem {
  std::string key;
  const Shape* shape = nullptr;
  Batch batch;
  Sizes sizes;
  int sets = 0;
  double set_bytes = 0;  // byte-model bytes of one call
  DeviceBuffer pool, shared;
  DeviceBuffer copy_src, copy_dst;  // kCopySameSize: `sets` slices of copy_bytes each
  std::size_t copy_bytes = 0;
  std::vector<Buffers> bufs;
  std::vector<void*> q_rot, k_rot;
  std::vector<ropekv::Arguments> args;
  bool checked = false;  // the fused output was compared with the host backend

  ~DeviceProblem() { cudaDeviceSynchronize(); }
};

std::unique_ptr<DeviceProblem>& current() {
  static std::unique_ptr<DeviceProblem> p;
  return p;
}

bool build_problem(const Shape& s, std::int64_t nnz, DeviceProblem* dp, std::string* error) {
  dp->shape = &s;
  const std::uint64_t seed = std::hash<std::string>{}(dp->key);
  dp->batch = make_batch(s, nnz, seed);
  dp->sizes = sizes_of(s, dp->batch);
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
  const std::vector<float>& table = cos_sin_table(s.rotary, dp->batch.max_pos);
  const std::size_t cs_b = align_up(table.size() * sizeof(float));
  const std::size_t idx_b = align_up(std::size_t(nnz) * sizeof(std::int64_t));
  PERF_CUDA_TRY(cudaMalloc(&dp->shared.ptr, cs_b + 2 * idx_b));
  char* sh = static_cast<char*>(dp->shared.ptr);
  PERF_CUDA_TRY(cudaMemcpy(sh, table.data(), table.size() * sizeof(float), cudaMemcpyHostToDevice));
  PERF_CUDA_TRY(cudaMemcpy(sh + cs_b, dp->batch.positions.data(), std::size_t(nnz) * 8,
                           cudaMemcpyHostToDevice));
  PERF_CUDA_TRY(cudaMemcpy(sh + cs_b + idx_b, dp->batch.slots.data(), std::size_t(nnz) * 8,
                           cudaMemcpyHostToDevice));
  char* base = static_cast<char*>(dp->pool.ptr);
  for (int i = 0; i < dp->sets; ++i) {
    char* b = base + per_set * std::size_t(i);
    Buffers buf;
    buf.in = b;
    buf.q_out = b + in_b;
    buf.k_cache = b + in_b + q_b;
    buf.v_cache = z.v_cache_bytes > 0 ? b + in_b + q_b + k_b : nullptr;
    buf.cos_sin = sh;
    buf.positions = sh + cs_b;
    buf.slots = sh + cs_b + idx_b;
    dp->bufs.push_back(buf);
    dp->q_rot.push_back(b + in_b + q_b + k_b + v_b);
    dp->k_rot.push_back(b + in_b + q_b + k_b + v_b + qr_b);
    dp->args.push_back(make_arguments(s, dp->batch, buf));
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

ropekv::Result call(DeviceProblem& dp, int set, GpuVariant v, cudaStream_t stream) {
  if (v == GpuVariant::kCopySameSize) {
    const std::size_t off = dp.copy_bytes * std::size_t(set);
    const cudaError_t e = cudaMemcpyAsync(static_cast<char*>(dp.copy_dst.ptr) + off,
                                          static_cast<char*>(dp.copy_src.ptr) + off, dp.copy_bytes,
                                          cudaMemcpyDeviceToDevice, stream);
    if (e == cudaSuccess) return ropekv::Result{};
    ropekv::Result r;
    r.status = ropekv::Status::kErrorLaunchFailed;
    std::snprintf(r.message, sizeof r.message, "cudaMemcpyAsync: %s", cudaGetErrorString(e));
    return r;
  }
  ropekv::Arguments a = dp.args[std::size_t(set)];
  a.stream = stream;
  a.programmatic_dependent_launch = v == GpuVariant::kFusedPdl;
  if (is_unfused(v)) return unfused_cuda(a, dp.q_rot[std::size_t(set)], dp.k_rot[std::size_t(set)]);
  return ropekv::run(a, ropekv::Backend::kCuda);
}

std::string message(const ropekv::Result& r) {
  return std::string(ropekv::to_string(r.status)) + ": " + r.message;
}

// Runs set 0 once on zeroed outputs and, when the host backend is compiled
// and nnz is small, compares q_out and both caches byte for byte with the
// host backend on the same input. The same-size copy only gets its buffers.
bool check_output(DeviceProblem& dp, GpuVariant v, cudaStream_t stream, std::string* label,
                  std::string* error) {
  if (v == GpuVariant::kCopySameSize) {
    *label = "plain copy";
    return ensure_copy_buffers(dp, error);
  }
  const Sizes& z = dp.sizes;
  const Buffers& b = dp.bufs[0];
  PERF_CUDA_TRY(cudaMemsetAsync(b.q_out, 0, std::size_t(z.q_out_bytes), stream));
  PERF_CUDA_TRY(cudaMemsetAsync(b.k_cache, 0, std::size_t(z.k_cache_bytes), stream));
  if (b.v_cache != nullptr)
    PERF_CUDA_TRY(cudaMemsetAsync(b.v_cache, 0, std::size_t(z.v_cache_bytes), stream));
  const ropekv::Result r = call(dp, 0, v, stream);
  if (!r.ok()) {
    *error = "first call failed: " + message(r);
    return false;
  }
  PERF_CUDA_TRY(cudaStreamSynchronize(stream));
  PERF_CUDA_TRY(cudaGetLastError());
  *label = "first call succeeded";
  if (is_unfused(v)) return true;
  if (dp.checked) {
    *label = "bit-identical to host";
    return true;
  }
#if ROPEKV_ENABLE_KOKKOS
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
    Buffers hb;
    hb.in = in.data();
    hb.q_out = q_ref.data();
    hb.k_cache = kc_ref.data();
    hb.v_cache = vc_ref.empty() ? nullptr : vc_ref.data();
    hb.cos_sin = const_cast<float*>(cos_sin_table(dp.shape->rotary, dp.batch.max_pos).data());
    hb.positions = dp.batch.positions.data();
    hb.slots = dp.batch.slots.data();
    const ropekv::Result hr =
        ropekv::run(make_arguments(*dp.shape, dp.batch, hb), ropekv::Backend::kHost);
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
    dp.checked = true;
    return true;
  }
#endif
  *label = "first call succeeded (output not compared)";
  return true;
}

bool time_graph(DeviceProblem& dp, GpuVariant v, GpuTiming* out, std::string* error) {
  cudaStream_t stream = nullptr;
  PERF_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } stream_guard{stream};
  std::string label;
  if (!check_output(dp, v, stream, &label, error)) return false;

  const int sets = is_hot(v) ? 1 : dp.sets;
  const int calls = std::max(kMinCalls, sets);
  cudaGraph_t graph = nullptr;
  PERF_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  ropekv::Result failed;
  for (int i = 0; i < calls && failed.ok(); ++i) failed = call(dp, i % sets, v, stream);
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

GpuTiming cuda_time(const Shape& s, std::int64_t nnz, GpuVariant variant) {
  GpuTiming t;
  DeviceProblem* dp = device_problem(s, nnz, &t.error);
  if (dp == nullptr) {
    current().reset();
    return t;
  }
  t.ok = time_graph(*dp, variant, &t, &t.error);
  if (!t.ok) cudaGetLastError();
  return t;
}

void cuda_release() { current().reset(); }

}  // namespace ropekv_perf
