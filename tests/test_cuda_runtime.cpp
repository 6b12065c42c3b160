// CUDA runtime behaviour: graph capture and replay with indices, positions,
// padding and device scales changed between replays of ONE captured graph;
// several streams at once; programmatic dependent launch; vector and generic
// paths. Every result is compared bit for bit with the host backend.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_capture.hpp"
#include "oracle.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv_test {  // tests/test_cuda_launcher.cu
void set_bulk_tuning(bool on);
// 1: wherever it can, 0: the rule, -1: never; order 1: the dynamic token
// order, 2: the guided order with a quarter of the tokens in its blocks of one
// token a team, 3: one wave alone (measurement overrides), 0: the rule's order
void set_rows_tuning(int rows, int order = 0);
// Tuning::decode (2: the flat decode layout wherever it can) and flat_pair.
void set_decode_tuning(int decode, int flat_pair = 0);
std::string launch_path(const ropekv::Arguments& a);
bool slots_flat_by_device();  // slot mapping flat within four L2s on this device
}  // namespace ropekv_test

namespace {

using namespace ropekv;
using ropekv_test::CapturedCall;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

bool have_cuda() { return backend_available(Backend::kCuda); }
// Every test here compares with the host backend: it skips without either.
#define SKIP_WITHOUT_CUDA()                                                                      \
  do {                                                                                           \
    if (!have_cuda()) GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)"; \
    if (!backend_compiled(Backend::kHost))                                                       \
      GTEST_SKIP() << "compares with the host backend, which this build lacks "                  \
                      "(ROPEKV_ENABLE_KOKKOS=OFF): skipped (not passed)";                        \
  } while (0)

std::uint16_t bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// One problem: fused bf16 QKV input, NHD e4m3fn caches, fp32 cos/sin,
// int64 slots and positions, scales in device memory. `token_pad` > 0 makes
// the input rows misaligned for the vector path (generic path).
struct Problem {
  std::int64_t nnz, hq, hk, d, r, ps = 16, pages = 40, max_pos = 512, token_pad = 0;
  std::vector<std::uint16_t> qkv;
  std::vector<float> cos_sin;
  std::vector<std::int64_t> pos, slot;
  float scales[3] = {0.05f, 0.03f, 0.02f};
  RopeStyle style = RopeStyle::kNeox;

  Problem(std::int64_t n, std::int64_t hq_, std::int64_t hk_, std::int64_t d_, std::int64_t r_,
          std::int64_t pad, unsigned seed)
      : nnz(n), hq(hq_), hk(hk_), d(d_), r(r_), token_pad(pad) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-3.f, 3.f);
    qkv.resize(std::size_t(nnz * row()));
    for (auto& x : qkv) x = bf16(u(rng));
    cos_sin = ropekv_oracle::rope_table(max_pos, r);
    pos.resize(std::size_t(nnz));
    slot.resize(std::size_t(nnz));
    pages = std::max(pages, (nnz + ps - 1) / ps);  // a distinct slot for every token
    reindex(seed + 1, 0.2);
  }
  std::int64_t row() const { return (hq + 2 * hk) * d + token_pad; }
  // New positions and a new permutation of slots; `pad_frac` of tokens padding.
  void reindex(unsigned seed, double pad_frac) {
    ASSERT_GE(pages * ps, nnz) << "fewer cache slots than tokens";
    std::mt19937 rng(seed);
    std::vector<std::int64_t> all(std::size_t(pages * ps));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::uniform_int_distribution<std::int64_t> pd(0, max_pos - 1);
    std::uniform_real_distribution<double> coin(0, 1);
    for (std::int64_t t = 0; t < nnz; ++t) {
      pos[std::size_t(t)] = pd(rng);
      slot[std::size_t(t)] = coin(rng) < pad_frac ? -1 : all[std::size_t(t)];
    }
  }
  std::size_t cache_bytes() const { return std::size_t(pages * ps * hk * d); }
  std::size_t q_bytes() const { return std::size_t(nnz * hq * d); }
};

// Buffers of one problem in one memory (host or CUDA device).
struct Buffers {
  void *qkv, *cos, *pos, *slot, *q_out, *k_cache, *v_cache, *scales;
};

Arguments make_args(const Problem& pb, const Buffers& b, bool device_scales) {
  Arguments a;
  set_inputs(a,
             fused_qkv_views(b.qkv, DType::kBFloat16, pb.nnz, pb.hq, pb.hk, pb.d, pb.r, pb.row()));
  set_query_output(a, split_heads(b.q_out, DType::kFloat8E4M3FN, pb.nnz, pb.hq, pb.d, pb.r));
  set_kv_cache(a, nhd_kv_cache(b.k_cache, b.v_cache, DType::kFloat8E4M3FN, pb.pages, pb.ps, pb.hk,
                               pb.d, pb.r));
  const std::int64_t cs_ext[2] = {pb.max_pos, pb.r};
  a.cos_sin_cache = make_contiguous(b.cos, DType::kFloat32, 2, cs_ext);
  a.rope_style = pb.style;
  a.positions = make_vector(b.pos, DType::kInt64, pb.nnz);
  a.cache_index.slot_mapping = make_vector(b.slot, DType::kInt64, pb.nnz);
  const float* s = static_cast<const float*>(b.scales);
  if (device_scales) {
    a.q_scale = Scale::on_device(s);
    a.k_scale = Scale::on_device(s + 1);
    a.v_scale = Scale::on_device(s + 2);
  } else {
    a.q_scale = Scale::host(pb.scales[0]);
    a.k_scale = Scale::host(pb.scales[1]);
    a.v_scale = Scale::host(pb.scales[2]);
  }
  return a;
}

struct Outputs {
  std::vector<std::uint8_t> q, k, v;
};

// The host backend's answer for the problem as it stands.
Outputs host_reference(const Problem& pb) {
  Outputs o;
  o.q.assign(pb.q_bytes(), 0xA5);
  o.k.assign(pb.cache_bytes(), 0xA5);
  o.v.assign(pb.cache_bytes(), 0xA5);
  std::vector<std::uint16_t> qkv = pb.qkv;
  std::vector<float> cos = pb.cos_sin;
  std::vector<std::int64_t> pos = pb.pos, slot = pb.slot;
  float scales[3] = {pb.scales[0], pb.scales[1], pb.scales[2]};
  Buffers b{qkv.data(), cos.data(), pos.data(), slot.data(),
            o.q.data(), o.k.data(), o.v.data(), scales};
  const Result r = run(make_args(pb, b, true), Backend::kHost);
  EXPECT_TRUE(r.ok()) << r.message;
  return o;
}

// The same problem in device memory.
struct DeviceProblem {
  Buffers b{};
  const Problem& pb;
  explicit DeviceProblem(const Problem& p) : pb(p) {
    cudaMalloc(&b.qkv, pb.qkv.size() * 2);
    cudaMalloc(&b.cos, pb.cos_sin.size() * 4);
    cudaMalloc(&b.pos, std::size_t(pb.nnz) * 8);
    cudaMalloc(&b.slot, std::size_t(pb.nnz) * 8);
    cudaMalloc(&b.q_out, pb.q_bytes());
    cudaMalloc(&b.k_cache, pb.cache_bytes());
    cudaMalloc(&b.v_cache, pb.cache_bytes());
    cudaMalloc(&b.scales, 3 * sizeof(float));
    cudaMemcpy(b.qkv, pb.qkv.data(), pb.qkv.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(b.cos, pb.cos_sin.data(), pb.cos_sin.size() * 4, cudaMemcpyHostToDevice);
    upload_indices(nullptr);
  }
  ~DeviceProblem() {
    for (void* p : {b.qkv, b.cos, b.pos, b.slot, b.q_out, b.k_cache, b.v_cache, b.scales})
      cudaFree(p);
  }
  // Indices, scales and guard-filled outputs, ordered on `stream`.
  void upload_indices(cudaStream_t stream) {
    cudaMemcpyAsync(b.pos, pb.pos.data(), std::size_t(pb.nnz) * 8, cudaMemcpyHostToDevice, stream);
    cudaMemcpyAsync(b.slot, pb.slot.data(), std::size_t(pb.nnz) * 8, cudaMemcpyHostToDevice,
                    stream);
    cudaMemcpyAsync(b.scales, pb.scales, 3 * sizeof(float), cudaMemcpyHostToDevice, stream);
    cudaMemsetAsync(b.q_out, 0xA5, pb.q_bytes(), stream);
    cudaMemsetAsync(b.k_cache, 0xA5, pb.cache_bytes(), stream);
    cudaMemsetAsync(b.v_cache, 0xA5, pb.cache_bytes(), stream);
    cudaStreamSynchronize(stream);
  }
  Outputs download(cudaStream_t stream) {
    Outputs o;
    o.q.resize(pb.q_bytes());
    o.k.resize(pb.cache_bytes());
    o.v.resize(pb.cache_bytes());
    cudaStreamSynchronize(stream);
    cudaMemcpy(o.q.data(), b.q_out, o.q.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(o.k.data(), b.k_cache, o.k.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(o.v.data(), b.v_cache, o.v.size(), cudaMemcpyDeviceToHost);
    return o;
  }
};

void expect_identical(const Outputs& got, const Outputs& want, const char* what) {
  EXPECT_TRUE(got.q == want.q) << what << ": q output differs from the host backend";
  EXPECT_TRUE(got.k == want.k) << what << ": K cache differs from the host backend";
  EXPECT_TRUE(got.v == want.v) << what << ": V cache differs from the host backend";
  std::size_t written = 0;
  for (auto x : got.k) written += x != 0xA5;
  EXPECT_GT(written, got.k.size() / 100) << what << ": K cache looks unwritten";
}

// Runs pb once on the CUDA backend (default stream) and compares the result
// with the host backend's.
void expect_matches_host(const Problem& pb, bool device_scales, const char* what) {
  DeviceProblem dp(pb);
  const Result r = run(make_args(pb, dp.b, device_scales), Backend::kCuda);
  ASSERT_TRUE(r.ok()) << what << ": " << r.message;
  expect_identical(dp.download(nullptr), host_reference(pb), what);
}

TEST(CudaRuntime, GraphReplaySeesNewIndicesPositionsPaddingAndScales) {
  SKIP_WITHOUT_CUDA();
  Problem pb(48, 8, 2, 128, 128, 0, 11);
  DeviceProblem dp(pb);
  const CapturedCall call(make_args(pb, dp.b, true));
  ASSERT_EQ(call.error, cudaSuccess) << cudaGetErrorString(call.error);
  ASSERT_TRUE(call.result.ok()) << call.result.message;
  cudaStream_t s = call.stream;
  cudaGraphExec_t exec = call.exec;
  for (unsigned replay = 0; replay < 4; ++replay) {
    pb.reindex(100 + replay, replay == 3 ? 1.0 : 0.1 * replay);  // last: all padding
    pb.scales[0] = 0.01f * float(replay + 1);
    pb.scales[1] = 0.02f + 0.01f * float(replay);
    pb.scales[2] = 0.05f / float(replay + 1);
    dp.upload_indices(s);
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaGetLastError());
    const Outputs got = dp.download(s), want = host_reference(pb);
    EXPECT_TRUE(got.q == want.q) << "replay " << replay;
    EXPECT_TRUE(got.k == want.k) << "replay " << replay;
    EXPECT_TRUE(got.v == want.v) << "replay " << replay;
    if (replay == 3) {  // all padding: nothing at all written
      EXPECT_TRUE(
          std::all_of(got.q.begin(), got.q.end(), [](std::uint8_t x) { return x == 0xA5; }));
      EXPECT_TRUE(
          std::all_of(got.k.begin(), got.k.end(), [](std::uint8_t x) { return x == 0xA5; }));
    }
  }
}

TEST(CudaRuntime, ConcurrentStreams) {
  SKIP_WITHOUT_CUDA();
  Problem p1(300, 8, 1, 64, 64, 0, 21), p2(77, 16, 4, 128, 64, 0, 22);
  DeviceProblem d1(p1), d2(p2);
  cudaStream_t s1, s2;
  CUDA_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  Arguments a1 = make_args(p1, d1.b, false), a2 = make_args(p2, d2.b, true);
  a1.stream = s1;
  a2.stream = s2;
  for (int i = 0; i < 3; ++i) {  // repeated calls are idempotent
    ASSERT_TRUE(run(a1, Backend::kCuda).ok());
    ASSERT_TRUE(run(a2, Backend::kCuda).ok());
  }
  expect_identical(d1.download(s1), host_reference(p1), "stream 1");
  expect_identical(d2.download(s2), host_reference(p2), "stream 2");
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

TEST(CudaRuntime, ProgrammaticDependentLaunch) {
  SKIP_WITHOUT_CUDA();
  Problem pb(256, 32, 8, 128, 128, 0, 31);
  DeviceProblem dp(pb);
  Arguments a = make_args(pb, dp.b, true);
  a.programmatic_dependent_launch = true;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(run(a, Backend::kCuda).ok());
  expect_identical(dp.download(nullptr), host_reference(pb), "PDL");
}

TEST(CudaRuntime, GenericPathMisalignedRows) {
  SKIP_WITHOUT_CUDA();
  Problem pb(200, 8, 2, 128, 128, 3, 41);  // token stride not a multiple of 8 elements
  expect_matches_host(pb, false, "generic");
}

TEST(CudaRuntime, LargeBatchGridStride) {
  SKIP_WITHOUT_CUDA();
  Problem pb(20000, 8, 1, 64, 64, 0, 51);
  pb.pages = 1300;
  pb.reindex(52, 0.05);
  expect_matches_host(pb, false, "large");
}

// A large batch through the run-time-shape vector kernel (R 32, N 64: no
// specialisation), with a third of the tokens padding and device scales:
// teams loop over several tokens each and prefetch the next token's indices,
// padding or not.
TEST(CudaRuntime, LargeBatchRuntimeShapeWithPadding) {
  SKIP_WITHOUT_CUDA();
  Problem pb(12000, 16, 2, 96, 32, 0, 61);
  pb.pages = 800;
  pb.reindex(62, 0.3);
  expect_matches_host(pb, true, "large, run-time shape");
}

// Large batches of the specialised shapes (llama-3.1-8b: R = D = 128;
// partial rotary: R 64 of D 128; gpt-oss: R = D = 64) with padding, host and
// device scales. On the H200 all four take the rows kernel (beyond the decode
// kernel's bounds).
TEST(CudaRuntime, LargeBatchSpecialisedShapesWithPadding) {
  SKIP_WITHOUT_CUDA();
  struct Shape {
    std::int64_t nnz, hq, hk, d, r;
    double pad;
  };
  const Shape shapes[] = {{5000, 32, 8, 128, 128, 0.2},
                          {4000, 32, 8, 128, 64, 0.1},
                          {9000, 64, 8, 64, 64, 0.0},
                          {7001, 8, 1, 128, 128, 0.5}};
  unsigned seed = 71;
  for (const Shape& sh : shapes) {
    Problem pb(sh.nnz, sh.hq, sh.hk, sh.d, sh.r, 0, seed++);
    pb.pages = (sh.nnz + pb.ps - 1) / pb.ps + 3;
    pb.reindex(seed++, sh.pad);
    expect_matches_host(pb, (seed & 2) != 0, "large, specialised shape");
  }
}

// The decode kernel's bodies (cuda/kernels/decode.cuh): the lean one for
// scales the Markstein form takes, on the host or the device; the general one
// where a host scale needs IEEE division; and a lean thread whose device
// scale needs it (here a subnormal one, with inputs scaled alike so that the
// quotients are in range) starting again in the general body. Both RoPE
// styles, two specialised shapes, padding; bit for bit with the host backend.
TEST(CudaRuntime, DecodeBodiesMatchHost) {
  SKIP_WITHOUT_CUDA();
  const float tiny = 0x1.16c2p-133f;  // subnormal: IEEE division
  struct Case {
    float scale;  // 0: the problem's own (0.05, 0.03, 0.02)
    bool device;
    const char* what;
  };
  const Case cases[] = {{0.f, false, "lean body, host scales"},
                        {0.f, true, "lean body, device scales"},
                        {tiny, false, "general body (host scales need IEEE division)"},
                        {tiny, true, "lean body, device scales that need IEEE division"}};
  unsigned seed = 91;
  for (const std::int64_t d : {64, 128})
    for (const RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved})
      for (const Case& c : cases) {
        SCOPED_TRACE(std::string(c.what) + ", D " + std::to_string(d) +
                     (style == RopeStyle::kNeox ? ", NeoX" : ", interleaved"));
        Problem pb(7, 8, 1, d, d, 0, seed++);
        pb.pages = 1;  // 16 slots: the written share of the cache is checked
        pb.reindex(seed++, 0.25);
        pb.style = style;
        if (c.scale != 0.f) {
          for (float& s : pb.scales) s = c.scale;
          for (std::uint16_t& x : pb.qkv) {
            std::uint32_t u = std::uint32_t(x) << 16;
            float f;
            std::memcpy(&f, &u, 4);
            x = bf16(f * c.scale);
          }
        }
        DeviceProblem dp(pb);
        const Arguments a = make_args(pb, dp.b, c.device);
        EXPECT_EQ(ropekv_test::launch_path(a), "decode");
        const Result r = run(a, Backend::kCuda);
        ASSERT_TRUE(r.ok()) << r.message;
        expect_identical(dp.download(nullptr), host_reference(pb), c.what);
      }
}

// A problem for a kernel chosen by a measurement override, and the check
// that the launcher takes that kernel's path and matches the host backend
// bit for bit (seed: two draws, the second's bit 1 picking device scales).
struct OverrideShape {
  std::int64_t nnz, hq, hk, d, r, token_pad;
  double pad;
};
// The override tests' first cases: the three specialised GQA shapes, one
// token to thousands, padding.
constexpr OverrideShape kCommonShapes[] = {{1, 8, 1, 64, 64, 0, 0.0},
                                           {7, 32, 8, 128, 128, 0, 0.3},
                                           {300, 64, 8, 64, 64, 0, 0.1},
                                           {5000, 32, 8, 128, 128, 0, 0.2},
                                           {3000, 32, 8, 128, 64, 0, 0.1}};
void expect_path_matches_host(const OverrideShape& sh, unsigned& seed, const char* path) {
  Problem pb(sh.nnz, sh.hq, sh.hk, sh.d, sh.r, sh.token_pad, seed++);
  pb.pages = (sh.nnz + pb.ps - 1) / pb.ps + 3;
  pb.reindex(seed++, sh.pad);
  DeviceProblem dp(pb);
  const bool device_scales = (seed & 2) != 0;
  const Arguments a = make_args(pb, dp.b, device_scales);
  EXPECT_EQ(ropekv_test::launch_path(a), path) << "nnz " << sh.nnz << " D " << sh.d;
  const Result r = run(a, Backend::kCuda);
  ASSERT_TRUE(r.ok()) << r.message;
  expect_identical(dp.download(nullptr), host_reference(pb), path);
}

// The bulk-copy vector kernel (a measurement override for now: every vector
// launch whose token rows it can copy whole): the specialised and run-time
// shapes, one token to many, padding, host and device scales, and rows with a
// gap after them (token_pad: a copy per token instead of one per group).
TEST(CudaRuntime, BulkKernelMatchesHost) {
  SKIP_WITHOUT_CUDA();
  const OverrideShape more[] = {
      {2001, 16, 2, 96, 32, 0, 0.3}, {1500, 8, 1, 128, 128, 8, 0.5}, {4000, 8, 1, 64, 64, 0, 0.0}};
  unsigned seed = 91;
  ropekv_test::set_bulk_tuning(true);
  for (const OverrideShape& sh : kCommonShapes) expect_path_matches_host(sh, seed, "bulk");
  for (const OverrideShape& sh : more) expect_path_matches_host(sh, seed, "bulk");
  ropekv_test::set_bulk_tuning(false);
}

// The row-loop vector kernel, under the measurement override that gives it
// every vector launch of a specialised shape: the three GQA shapes, one
// token to many (teams of 8 to 64 lanes), padding, host and device scales.
TEST(CudaRuntime, RowsKernelMatchesHost) {
  SKIP_WITHOUT_CUDA();
  const OverrideShape more[] = {{9, 8, 1, 128, 64, 0, 0.0},
                                {1500, 8, 1, 128, 128, 0, 0.5},
                                {4000, 8, 1, 64, 64, 0, 0.0},
                                {333, 12, 4, 64, 64, 0, 0.2}};
  unsigned seed = 131;
  ropekv_test::set_rows_tuning(1);
  for (const OverrideShape& sh : kCommonShapes) expect_path_matches_host(sh, seed, "rows");
  for (const OverrideShape& sh : more) expect_path_matches_host(sh, seed, "rows");
  ropekv_test::set_rows_tuning(0);
}

// Runs sh's problem in four index forms: int64 slots, the same checked (the
// run-time form), an int32 page table of the same slots (every token its own
// one-page sequence) and the same checked; each must take path paths[form]
// (nullptr: not checked here) and write what the host backend writes.
void expect_forms_match_host(const OverrideShape& sh, unsigned& seed,
                             const char* const (&paths)[4]) {
  Problem pb(sh.nnz, sh.hq, sh.hk, sh.d, sh.r, sh.token_pad, seed++);
  pb.pages = (sh.nnz + pb.ps - 1) / pb.ps + 3;
  pb.reindex(seed++, sh.pad);
  const Outputs want = host_reference(pb);
  const std::size_t n = std::size_t(pb.nnz);
  std::vector<std::int32_t> table(5 * n + 1);  // batch, kv_pos, pos, indices [n]; indptr [n + 1]
  for (std::size_t t = 0; t < n; ++t) {
    const std::int64_t slot = pb.slot[t];
    table[t] = slot < 0 ? -1 : std::int32_t(t);
    table[n + t] = std::int32_t(slot < 0 ? 0 : slot % pb.ps);
    table[2 * n + t] = std::int32_t(pb.pos[t]);
    table[3 * n + t] = std::int32_t(slot < 0 ? 0 : slot / pb.ps);
  }
  for (std::size_t t = 0; t <= n; ++t) table[4 * n + t] = std::int32_t(t);
  void* dev_table = nullptr;
  ASSERT_EQ(cudaMalloc(&dev_table, table.size() * 4), cudaSuccess);
  cudaMemcpy(dev_table, table.data(), table.size() * 4, cudaMemcpyHostToDevice);
  std::int32_t* d = static_cast<std::int32_t*>(dev_table);
  for (int form = 0; form < 4; ++form) {
    const bool page_table = form >= 2, checked = (form & 1) != 0;
    DeviceProblem dp(pb);
    Arguments a = make_args(pb, dp.b, (seed & 1) != 0);
    if (page_table) {
      a.positions = make_vector(d + 2 * n, DType::kInt32, pb.nnz);
      a.cache_index = page_table_index(d + 3 * n, DType::kInt32, pb.nnz, d + 4 * n, DType::kInt32,
                                       pb.nnz + 1, d, DType::kInt32, d + n, DType::kInt32, pb.nnz);
    }
    a.checked.enabled = checked;
    const std::string what = std::string(page_table ? "int32 page table" : "int64 slots") +
                             (checked ? ", checked" : "") + ", nnz " + std::to_string(sh.nnz);
    if (paths[form] != nullptr) {
      EXPECT_EQ(ropekv_test::launch_path(a), paths[form]) << what;
    }
    const Result r = run(a, Backend::kCuda);
    ASSERT_TRUE(r.ok()) << what << ": " << r.message;
    expect_identical(dp.download(nullptr), want, what.c_str());
  }
  cudaFree(dev_table);
}

// The rows kernel in each index form it is specialised on (and the run-time
// form); then in the dynamic token order (a measurement override: every
// token once in both fixed forms, the run-time form keeping the static
// order, launch after launch as the counter goes back to 0 at each launch's
// end), at sizes past three tokens a team, teams of 64 lanes (two warps: the
// named barrier), 32 (a warp) and 4 (part of a warp); in the guided order
// with a quarter of the tokens in its blocks of one token a team (every
// device; the rule's share on some), and one wave alone.
TEST(CudaRuntime, RowsKernelIndexForms) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    OverrideShape sh;
    int order;  // set_rows_tuning's
  };
  const Case cases[] = {{{3000, 32, 8, 128, 128, 0, 0.2}, 0}, {{4000, 8, 1, 64, 64, 0, 0.1}, 0},
                        {{2500, 32, 8, 128, 64, 0, 0.3}, 0},  {{9000, 32, 8, 128, 128, 0, 0.2}, 1},
                        {{12001, 32, 8, 128, 64, 0, 0.1}, 1}, {{70000, 8, 1, 64, 64, 0, 0.1}, 1},
                        {{9000, 32, 8, 128, 128, 0, 0.2}, 2}, {{12001, 32, 8, 128, 64, 0, 0.3}, 2},
                        {{70001, 8, 1, 64, 64, 0, 0.1}, 2},   {{5000, 16, 2, 128, 128, 0, 0.2}, 3}};
  unsigned seed = 171;
  for (const Case& c : cases) {
    ropekv_test::set_rows_tuning(1, c.order);
    if (c.order == 1)
      expect_forms_match_host(c.sh, seed, {"rows-dynamic", "rows", "rows-dynamic", "rows"});
    else
      expect_forms_match_host(c.sh, seed, {"rows", "rows", "rows", "rows"});
  }
  ropekv_test::set_rows_tuning(0);
}

// The decode kernel's flat layout (a measurement override: the tokens' units
// back to back over a 1D grid, blocks spanning tokens; the specialised shapes
// in both fixed index forms): one token to more than a 2D grid's 65535,
// padding, host and device scales.
TEST(CudaRuntime, DecodeFlatLayoutMatchesHost) {
  SKIP_WITHOUT_CUDA();
  const OverrideShape more[] = {{70000, 8, 1, 64, 64, 0, 0.2}, {333, 12, 4, 64, 64, 0, 0.2}};
  unsigned seed = 191;
  ropekv_test::set_decode_tuning(2);
  for (const OverrideShape& sh : kCommonShapes) expect_path_matches_host(sh, seed, "decode-flat");
  for (const OverrideShape& sh : more) expect_path_matches_host(sh, seed, "decode-flat");
  // Both fixed forms flat (page tables by role: the query's units first,
  // with and without non-rotary parts); the run-time form (checked) keeps
  // the 2D grid.
  for (const OverrideShape& sh : kCommonShapes)
    expect_forms_match_host(sh, seed, {"decode-flat", "decode", "decode-flat", "decode"});
  // The by-role layout's kernel with evict-first inputs (the rule's past one
  // L2), forced at these sizes.
  ropekv_test::set_decode_tuning(4);
  for (const OverrideShape& sh : kCommonShapes)
    expect_forms_match_host(sh, seed, {"decode-flat", "decode", "decode-flat", "decode"});
  ropekv_test::set_decode_tuning(0);
}

// The flat layout with two units a thread (a measurement override), both
// kernels (cached and evict-first inputs): a block's second units past the
// last token, and by role the block whose units lie in both roles, in every
// shape here (their unit counts are not multiples of a block's 256).
TEST(CudaRuntime, DecodeFlatPairMatchesHost) {
  SKIP_WITHOUT_CUDA();
  const OverrideShape more[] = {{70000, 8, 1, 64, 64, 0, 0.2}, {333, 12, 4, 64, 64, 0, 0.2}};
  unsigned seed = 193;
  for (int decode : {2, 4}) {
    ropekv_test::set_decode_tuning(decode, 1);
    for (const OverrideShape& sh : kCommonShapes)
      expect_forms_match_host(sh, seed,
                              {"decode-flat-pair", "decode", "decode-flat-pair", "decode"});
    for (const OverrideShape& sh : more) expect_path_matches_host(sh, seed, "decode-flat-pair");
  }
  ropekv_test::set_decode_tuning(0);
}

// Page tables past the decode kernel's grid: the flat layout by role up to
// four L2s of bytes a launch (llama-3.1-8b's shape at 4096 tokens: 75 MB,
// evict-first inputs on a device of 50 MB of L2), with padding, host and
// device scales; slot mapping the same (packed) on devices of low DRAM
// bandwidth a multiprocessor, else the rows kernel; the run-time forms'
// paths are other tests' (nullptr).
TEST(CudaRuntime, PageTablesFlatWithinFourL2s) {
  SKIP_WITHOUT_CUDA();
  unsigned seed = 227;
  const char* slots = ropekv_test::slots_flat_by_device() ? "decode-flat" : "rows";
  expect_forms_match_host({4096, 32, 8, 128, 128, 0, 0.2}, seed,
                          {slots, nullptr, "decode-flat", nullptr});
}

// The launcher's own choice of the flat layout: where the rows kernel's
// teams would take one token each (a grid of at most one wave). gpt-oss
// TP8's shape (teams of 4, 64 tokens a block) at 64 tokens a multiprocessor,
// with padding, in all four index forms (the run-time form keeps the rows
// kernel); llama-3.1-8b's shape there (155 MB) takes the rows kernel, or the
// flat layout within four L2s on devices of low DRAM bandwidth a
// multiprocessor.
TEST(CudaRuntime, FlatDecodeLayoutWhereRowsTeamsTakeOneToken) {
  SKIP_WITHOUT_CUDA();
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  unsigned seed = 211;
  const OverrideShape small_heads = {64 * std::int64_t(sms), 8, 1, 64, 64, 0, 0.2};
  expect_forms_match_host(small_heads, seed, {"decode-flat", "rows", "decode-flat", "rows"});
  expect_path_matches_host({64 * std::int64_t(sms), 32, 8, 128, 128, 0, 0.2}, seed,
                           ropekv_test::slots_flat_by_device() ? "decode-flat" : "rows");
}

// And where the decode kernel's 2D grid would take more than one wave (on
// the H200: llama-3.1-8b's shape past about 350 tokens, gpt-oss TP8's past
// about 2100): flat with slot mapping; with page tables only where an eighth
// or more of a token's lanes in the 2D grid are idle (gpt-oss TP8's 40 units
// on 3 warps by part, not llama-3.1-8b's 384 on 12); the run-time form
// (checked) keeps the 2D grid.
TEST(CudaRuntime, FlatDecodeLayoutBeyondOneWaveOfTheDecodeGrid) {
  SKIP_WITHOUT_CUDA();
  unsigned seed = 223;
  expect_forms_match_host({3000, 8, 1, 64, 64, 0, 0.2}, seed,
                          {"decode-flat", "decode", "decode-flat", "decode"});
  expect_forms_match_host({2000, 32, 8, 128, 128, 0, 0.2}, seed,
                          {"decode-flat", "decode", "decode", "decode"});
  // gpt-oss TP1's 320 units by part: 10 warps, none idle (3 blocks of 4 warps).
  expect_forms_match_host({1024, 64, 8, 64, 64, 0, 0.2}, seed,
                          {"decode-flat", "decode", "decode", "decode"});
  expect_path_matches_host({200, 32, 8, 128, 128, 0, 0.2}, seed, "decode");  // one wave
}

// Mid-size batches in the decode kernel over more than one wave of its
// blocks (on the H200: llama-3.1-8b's shape about 350 tokens a wave, gpt-oss
// TP8's about 2100, R 32 of D 96 about 1300), with padding, host and
// device scales.
TEST(CudaRuntime, MidBatchDecodeKernelOverSeveralWaves) {
  SKIP_WITHOUT_CUDA();
  const OverrideShape shapes[] = {{2000, 32, 8, 128, 128, 0, 0.2},
                                  {3000, 8, 1, 64, 64, 0, 0.1},
                                  {1200, 32, 8, 128, 64, 0, 0.3},
                                  {2500, 16, 2, 96, 32, 0, 0.2}};
  unsigned seed = 151;
  ropekv_test::set_decode_tuning(1);  // the 2D grid (the rule takes the flat layout for most)
  for (const OverrideShape& sh : shapes) expect_path_matches_host(sh, seed, "decode");
  ropekv_test::set_decode_tuning(0);
}

// The launcher asks the runtime once per (kernel, block size, device) how
// many blocks fit on a multiprocessor. Here that first query happens inside
// a stream capture: no other test launches this kernel (the staged kernel of
// R = D = 128, the rows kernel turned off) with this block size (Hq 20, Hk 4:
// 224 units, teams of 56, blocks of 224 threads). The captured graph then
// replays with new slots, positions and padding.
TEST(CudaRuntime, FirstLaunchOfAKernelInsideGraphCapture) {
  SKIP_WITHOUT_CUDA();
  Problem pb(6000, 20, 4, 128, 128, 0, 81);
  DeviceProblem dp(pb);
  ropekv_test::set_rows_tuning(-1);
  const CapturedCall call(make_args(pb, dp.b, false));
  ropekv_test::set_rows_tuning(0);
  ASSERT_EQ(call.error, cudaSuccess) << cudaGetErrorString(call.error);
  ASSERT_TRUE(call.result.ok()) << call.result.message;
  cudaStream_t s = call.stream;
  cudaGraphExec_t exec = call.exec;
  for (unsigned replay = 0; replay < 2; ++replay) {
    pb.reindex(200 + replay, replay == 0 ? 0.0 : 0.4);
    dp.upload_indices(s);
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaGetLastError());
    expect_identical(dp.download(s), host_reference(pb), "first launch captured");
  }
}

// Between half a wave and one wave of decode-sized teams on the H200 (132
// SMs: 10000 tokens of 40 units, 200000 two-round threads against 270336
// resident): the direct vector kernel with large-launch teams (8 threads, at
// least 5 rounds per token, each lane looping over several units and tokens),
// with padding and device scales.
TEST(CudaRuntime, MidBatchDirectKernelLargeTeams) {
  SKIP_WITHOUT_CUDA();
  Problem pb(10000, 8, 1, 64, 64, 0, 91);
  pb.reindex(92, 0.2);
  expect_matches_host(pb, true, "mid batch, direct kernel");
}

}  // namespace
