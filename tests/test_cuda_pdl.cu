// Programmatic dependent launch, with and without
// indices_ready_before_previous_kernel: a producer kernel writes q, k and v
// just before the call, lets its dependents launch at once and writes only
// after a delay, so a call that read q, k or v before waiting for it would
// see the stale rows. Indices, positions, cos/sin and device scales are ready
// before the producer starts (the opt-in's contract). Both addressing forms,
// decode launches (the kernel's trigger at its start and after its wait),
// mid-size and large ones, in stream order and captured into a graph
// replayed with new data; every result is compared bit for bit with the host
// backend.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "oracle.hpp"
#include "ropekv/ropekv.hpp"

namespace {

using namespace ropekv;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Copies n 16-bit values from src to dst after ~delay_ns, having let the
// next kernel in the stream launch first.
__global__ void delayed_producer(const std::uint16_t* src, std::uint16_t* dst, std::int64_t n,
                                 unsigned delay_ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  for (unsigned waited = 0; waited < delay_ns; waited += 1000) __nanosleep(1000);
#endif
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

std::uint16_t bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// A GQA problem (bf16 fused QKV, e4m3fn NHD caches, fp32 cos/sin, device
// scales) with every token's entry given both as a slot and as a one-page
// sequence of a page table; a fifth of the tokens are padding.
struct PdlProblem {
  std::int64_t nnz, hq = 8, hk = 2, d = 128, r = 128, ps = 16, pages, max_pos = 1024;
  std::vector<std::uint16_t> qkv;
  std::vector<float> cos_sin;
  std::vector<std::int64_t> pos, slot;
  std::vector<std::int32_t> batch, kv_pos, indptr, indices;
  float scales[3] = {0.05f, 0.03f, 0.02f};

  PdlProblem(std::int64_t n, unsigned seed) : nnz(n), pages((n + 15) / 16 + 2) {
    std::mt19937 rng(seed);
    qkv.resize(std::size_t(nnz * row()));
    refill(seed);
    cos_sin = ropekv_oracle::rope_table(max_pos, r);
    std::vector<std::int64_t> all(std::size_t(pages * ps));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::uniform_int_distribution<std::int64_t> pd(0, max_pos - 1);
    std::uniform_real_distribution<double> coin(0, 1);
    indptr.push_back(0);
    for (std::int64_t t = 0; t < nnz; ++t) {
      const bool pad = coin(rng) < 0.2;
      const std::int64_t s = all[std::size_t(t)];
      pos.push_back(pd(rng));
      slot.push_back(pad ? -1 : s);
      batch.push_back(pad ? -1 : std::int32_t(t));
      kv_pos.push_back(std::int32_t(s % ps));
      indices.push_back(std::int32_t(s / ps));
      indptr.push_back(std::int32_t(indices.size()));
    }
  }
  std::int64_t row() const { return (hq + 2 * hk) * d; }
  void refill(unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-3.f, 3.f);
    for (auto& x : qkv) x = bf16(u(rng));
  }
  std::size_t cache_bytes() const { return std::size_t(pages * ps * hk * d); }
  std::size_t q_bytes() const { return std::size_t(nnz * hq * d); }
};

struct Ptrs {
  void *qkv, *cos, *pos, *slot, *batch, *kv_pos, *indptr, *indices, *q_out, *k_cache, *v_cache,
      *scales;
};

Arguments make_args(const PdlProblem& pb, const Ptrs& b, bool page_table, bool device_scales,
                    bool early = true) {
  Arguments a;
  set_inputs(a, fused_qkv_views(b.qkv, DType::kBFloat16, pb.nnz, pb.hq, pb.hk, pb.d, pb.r));
  set_query_output(a, split_heads(b.q_out, DType::kFloat8E4M3FN, pb.nnz, pb.hq, pb.d, pb.r));
  set_kv_cache(a, nhd_kv_cache(b.k_cache, b.v_cache, DType::kFloat8E4M3FN, pb.pages, pb.ps, pb.hk,
                               pb.d, pb.r));
  const std::int64_t cs_ext[2] = {pb.max_pos, pb.r};
  a.cos_sin_cache = make_contiguous(b.cos, DType::kFloat32, 2, cs_ext);
  a.positions = make_vector(b.pos, DType::kInt64, pb.nnz);
  if (page_table) {
    a.cache_index.form = Addressing::kPageTable;
    a.cache_index.batch_indices = make_vector(b.batch, DType::kInt32, pb.nnz);
    a.cache_index.kv_positions = make_vector(b.kv_pos, DType::kInt32, pb.nnz);
    a.cache_index.kv_indptr = make_vector(b.indptr, DType::kInt32, pb.nnz + 1);
    a.cache_index.kv_indices = make_vector(b.indices, DType::kInt32, pb.nnz);
  } else {
    a.cache_index.slot_mapping = make_vector(b.slot, DType::kInt64, pb.nnz);
  }
  const float* s = static_cast<const float*>(b.scales);
  a.q_scale = device_scales ? Scale::on_device(s) : Scale::host(pb.scales[0]);
  a.k_scale = device_scales ? Scale::on_device(s + 1) : Scale::host(pb.scales[1]);
  a.v_scale = device_scales ? Scale::on_device(s + 2) : Scale::host(pb.scales[2]);
  a.programmatic_dependent_launch = true;
  a.indices_ready_before_previous_kernel = early;
  return a;
}

struct Outputs {
  std::vector<std::uint8_t> q, k, v;
};

// tweak: applied to the call's arguments after make_args (the same on the
// device call under test).
Outputs host_reference(const PdlProblem& pb, bool page_table, void (*tweak)(Arguments&) = nullptr) {
  Outputs o;
  o.q.assign(pb.q_bytes(), 0xA5);
  o.k.assign(pb.cache_bytes(), 0xA5);
  o.v.assign(pb.cache_bytes(), 0xA5);
  PdlProblem h = pb;  // mutable host copies
  Ptrs b{h.qkv.data(),   h.cos_sin.data(), h.pos.data(),    h.slot.data(),
         h.batch.data(), h.kv_pos.data(),  h.indptr.data(), h.indices.data(),
         o.q.data(),     o.k.data(),       o.v.data(),      h.scales};
  Arguments a = make_args(h, b, page_table, true);
  if (tweak != nullptr) tweak(a);
  a.programmatic_dependent_launch = false;
  a.indices_ready_before_previous_kernel = false;
  const Result r = run(a, Backend::kHost);
  EXPECT_TRUE(r.ok()) << r.message;
  return o;
}

// Device copies: the problem's indices and tables, a staging copy of q/k/v
// (the producer's source) and the call's own q/k/v buffer, initially stale.
struct DevicePdl {
  Ptrs b{};
  void* staging = nullptr;
  const PdlProblem& pb;
  explicit DevicePdl(const PdlProblem& p) : pb(p) {
    auto up = [](void** d, const void* h, std::size_t n) {
      cudaMalloc(d, n);
      cudaMemcpy(*d, h, n, cudaMemcpyHostToDevice);
    };
    up(&b.cos, pb.cos_sin.data(), pb.cos_sin.size() * 4);
    up(&b.pos, pb.pos.data(), pb.pos.size() * 8);
    up(&b.slot, pb.slot.data(), pb.slot.size() * 8);
    up(&b.batch, pb.batch.data(), pb.batch.size() * 4);
    up(&b.kv_pos, pb.kv_pos.data(), pb.kv_pos.size() * 4);
    up(&b.indptr, pb.indptr.data(), pb.indptr.size() * 4);
    up(&b.indices, pb.indices.data(), pb.indices.size() * 4);
    up(&b.scales, pb.scales, sizeof pb.scales);
    cudaMalloc(&b.qkv, pb.qkv.size() * 2);
    cudaMalloc(&staging, pb.qkv.size() * 2);
    cudaMalloc(&b.q_out, pb.q_bytes());
    cudaMalloc(&b.k_cache, pb.cache_bytes());
    cudaMalloc(&b.v_cache, pb.cache_bytes());
  }
  ~DevicePdl() {
    for (void* p : {b.qkv, b.cos, b.pos, b.slot, b.batch, b.kv_pos, b.indptr, b.indices, b.q_out,
                    b.k_cache, b.v_cache, b.scales, staging})
      cudaFree(p);
  }
  // Stages the problem's q/k/v for the producer, makes the call's own q/k/v
  // stale (all 0x3f80: 1.0) and guard-fills the outputs.
  void reset() {
    cudaMemcpy(staging, pb.qkv.data(), pb.qkv.size() * 2, cudaMemcpyHostToDevice);
    std::vector<std::uint16_t> stale(pb.qkv.size(), 0x3f80);
    cudaMemcpy(b.qkv, stale.data(), stale.size() * 2, cudaMemcpyHostToDevice);
    cudaMemset(b.q_out, 0xA5, pb.q_bytes());
    cudaMemset(b.k_cache, 0xA5, pb.cache_bytes());
    cudaMemset(b.v_cache, 0xA5, pb.cache_bytes());
    cudaDeviceSynchronize();
  }
  cudaError_t produce(cudaStream_t s) {
    delayed_producer<<<64, 256, 0, s>>>(static_cast<const std::uint16_t*>(staging),
                                        static_cast<std::uint16_t*>(b.qkv),
                                        std::int64_t(pb.qkv.size()), 20000);
    return cudaGetLastError();
  }
  Outputs download() {
    Outputs o;
    o.q.resize(pb.q_bytes());
    o.k.resize(pb.cache_bytes());
    o.v.resize(pb.cache_bytes());
    cudaDeviceSynchronize();
    cudaMemcpy(o.q.data(), b.q_out, o.q.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(o.k.data(), b.k_cache, o.k.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(o.v.data(), b.v_cache, o.v.size(), cudaMemcpyDeviceToHost);
    return o;
  }
};

bool have_sm90() {
  if (!backend_available(Backend::kCuda)) return false;
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  return major >= 9;
}
#define SKIP_WITHOUT_SM90()                                                                     \
  if (!have_sm90())                                                                             \
  GTEST_SKIP() << "no CUDA device of compute capability 9.0+ (programmatic dependent launch): " \
                  "test skipped (not passed)"

// One call of a's kernel before the timed pair, then the buffers reset: a
// kernel's first launch may load its module (lazy loading), which can take
// longer than the producer's delay, and then the call starts after the
// producer's writes and cannot see stale rows.
void warm_up(const Arguments& a, DevicePdl& dp) {
  const Result r = run(a, Backend::kCuda);
  ASSERT_TRUE(r.ok()) << r.message;
  CUDA_OK(cudaStreamSynchronize(static_cast<cudaStream_t>(a.stream)));
  dp.reset();
}

void expect_identical(const Outputs& got, const Outputs& want, const char* what) {
  EXPECT_TRUE(got.q == want.q) << what << ": q output differs from the host backend";
  EXPECT_TRUE(got.k == want.k) << what << ": K cache differs from the host backend";
  EXPECT_TRUE(got.v == want.v) << what << ": V cache differs from the host backend";
}

// The producer, then the call a (tweaked; its kernel warmed up first), in
// stream order on a stream of its own; its outputs against the host backend's.
void produce_call_check(Arguments a, DevicePdl& dp, void (*tweak)(Arguments&),
                        const std::string& what) {
  const bool page_table = a.cache_index.form == Addressing::kPageTable;
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (tweak != nullptr) tweak(a);
  a.stream = s;
  warm_up(a, dp);
  CUDA_OK(dp.produce(s));
  const Result r = run(a, Backend::kCuda);
  ASSERT_TRUE(r.ok()) << r.message;
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaGetLastError());
  expect_identical(dp.download(), host_reference(dp.pb, page_table, tweak), what.c_str());
  cudaStreamDestroy(s);
}

// Producer then call, in stream order, for both addressing forms, with and
// without early indices, a decode batch of fewer tokens than
// kLateTriggerToken and one of more (without early indices, the decode
// kernel lets the next grid launch at its blocks' start and after their
// wait), a mid-size one (the decode kernel over more than one wave) and a
// large one (the vector kernels).
TEST(CudaPdl, CallsSeeTheProducersInputs) {
  SKIP_WITHOUT_SM90();
  for (std::int64_t nnz :
       {std::int64_t(7), std::int64_t(200), std::int64_t(2000), std::int64_t(20000)}) {
    for (int c = 0; c < 4; ++c) {
      const bool page_table = c & 1, early = c & 2;
      PdlProblem pb(nnz, unsigned(nnz) + (page_table ? 1u : 0u));
      DevicePdl dp(pb);
      dp.reset();
      const std::string what = "nnz " + std::to_string(nnz) +
                               (page_table ? " page table" : " slots") +
                               (early ? ", early indices" : ", PDL alone");
      produce_call_check(make_args(pb, dp.b, page_table, nnz != 200, early), dp, nullptr, what);
    }
  }
}

// Early indices with every body of the decode kernel and both addressing
// forms: GPT-J (interleaved) pairs, and a host scale outside the quick scale
// step's range (the general body). Every row's inputs must be read after the
// wait, whatever order the compiler gives the loads around it.
void interleaved(Arguments& a) { a.rope_style = RopeStyle::kInterleaved; }
void ieee_v_scale(Arguments& a) { a.v_scale = Scale::host(0x1p-61f); }  // (v / s saturates)
void interleaved_ieee(Arguments& a) {
  interleaved(a);
  ieee_v_scale(a);
}
TEST(CudaPdl, EarlyIndicesInEveryBody) {
  SKIP_WITHOUT_SM90();
  const struct {
    void (*tweak)(Arguments&);
    const char* name;
  } bodies[] = {{interleaved, "interleaved"},
                {ieee_v_scale, "IEEE-division scale"},
                {interleaved_ieee, "interleaved, IEEE-division scale"}};
  for (std::int64_t nnz : {std::int64_t(7), std::int64_t(200)})
    for (bool page_table : {false, true})
      for (const auto& body : bodies)
        for (bool device_scales : {false, true}) {
          PdlProblem pb(nnz, unsigned(nnz) + (page_table ? 3u : 4u));
          DevicePdl dp(pb);
          dp.reset();
          const std::string what = "nnz " + std::to_string(nnz) +
                                   (page_table ? " page table, " : " slots, ") + body.name +
                                   (device_scales ? ", device q/k scales" : ", host scales");
          produce_call_check(make_args(pb, dp.b, page_table, device_scales), dp, body.tweak, what);
        }
}

// The same pair captured into one graph (a programmatic edge between the two
// kernels), replayed with new q/k/v staged between replays.
TEST(CudaPdl, EarlyIndicesUnderGraphCapture) {
  SKIP_WITHOUT_SM90();
  for (bool page_table : {false, true}) {
    PdlProblem pb(64, page_table ? 5u : 6u);
    DevicePdl dp(pb);
    dp.reset();
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    Arguments a = make_args(pb, dp.b, page_table, true);
    a.stream = s;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CUDA_OK(dp.produce(s));
    const Result r = run(a, Backend::kCuda);
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    ASSERT_TRUE(r.ok()) << r.message;
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (unsigned replay = 0; replay < 3; ++replay) {
      pb.refill(100 + replay);
      dp.reset();
      CUDA_OK(cudaGraphLaunch(exec, s));
      CUDA_OK(cudaStreamSynchronize(s));
      CUDA_OK(cudaGetLastError());
      const std::string what =
          std::string(page_table ? "page table" : "slots") + ", replay " + std::to_string(replay);
      expect_identical(dp.download(), host_reference(pb, page_table), what.c_str());
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
  }
}

}  // namespace
