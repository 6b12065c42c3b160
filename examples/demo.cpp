// Runs the op once on the llama-3.1-8b shape (Hq 32, Hk 8, D = R = 128,
// bf16 in, e4m3fn out, NHD cache with 16-token pages) on the backend that
// Backend::kAuto picks: CUDA or HIP (device memory) when a GPU is present,
// else the host backend (host memory). In a build whose backends all lack a
// device it validates the call, says why it cannot run it and exits with 77
// (ctest's "skipped" code for the Example.Demo test).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "ropekv/ropekv.hpp"
#if ROPEKV_ENABLE_CUDA
#include <cuda_runtime_api.h>
#elif ROPEKV_ENABLE_HIP
#include <hip/hip_runtime_api.h>
#endif

namespace {

using ropekv::Backend;

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// A buffer in the memory of `backend`: device memory for CUDA/HIP, else host.
class Buffer {
 public:
  Buffer(Backend backend, const void* init, std::size_t bytes) : backend_(backend), bytes_(bytes) {
    bool ok = false;
#if ROPEKV_ENABLE_CUDA
    if (backend == Backend::kCuda)
      ok = cudaMalloc(&p_, bytes) == cudaSuccess &&
           cudaMemcpy(p_, init, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
#elif ROPEKV_ENABLE_HIP
    if (backend == Backend::kHip)
      ok = hipMalloc(&p_, bytes) == hipSuccess &&
           hipMemcpy(p_, init, bytes, hipMemcpyHostToDevice) == hipSuccess;
#endif
    if (backend == Backend::kHost) {
      p_ = std::malloc(bytes);
      ok = p_ != nullptr;
      if (ok) std::memcpy(p_, init, bytes);
    }
    if (!ok) {
      std::fprintf(stderr, "ropekv demo: cannot allocate %zu bytes on %s\n", bytes,
                   ropekv::to_string(backend));
      std::exit(1);
    }
  }
  ~Buffer() {
#if ROPEKV_ENABLE_CUDA
    if (backend_ == Backend::kCuda) cudaFree(p_);
#elif ROPEKV_ENABLE_HIP
    if (backend_ == Backend::kHip) (void)hipFree(p_);
#endif
    if (backend_ == Backend::kHost) std::free(p_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* get() const { return p_; }
  // Waits for the backend's work on the default stream, then copies back.
  template <class T>
  void read(std::vector<T>& out) const {
    bool ok = true;
#if ROPEKV_ENABLE_CUDA
    if (backend_ == Backend::kCuda)
      ok = cudaMemcpy(out.data(), p_, bytes_, cudaMemcpyDeviceToHost) == cudaSuccess;
#elif ROPEKV_ENABLE_HIP
    if (backend_ == Backend::kHip)
      ok = hipMemcpy(out.data(), p_, bytes_, hipMemcpyDeviceToHost) == hipSuccess;
#endif
    if (backend_ == Backend::kHost) std::memcpy(out.data(), p_, bytes_);
    if (!ok) {
      std::fprintf(stderr, "ropekv demo: copy from %s failed\n", ropekv::to_string(backend_));
      std::exit(1);
    }
  }

 private:
  Backend backend_;
  std::size_t bytes_;
  void* p_ = nullptr;
};

template <class T>
Buffer make_buffer(Backend b, const std::vector<T>& v) {
  return Buffer(b, v.data(), v.size() * sizeof(T));
}

}  // namespace

int main() {
  using namespace ropekv;
  const std::int64_t nnz = 64, hq = 32, hk = 8, d = 128, r = 128, ps = 16, pages = 64,
                     max_pos = 4096;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.f, 2.f);

  std::vector<std::uint16_t> qkv(nnz * (hq + 2 * hk) * d);
  for (auto& x : qkv) x = to_bf16(u(rng));
  std::vector<float> cos_sin(max_pos * r);
  for (std::int64_t p = 0; p < max_pos; ++p)
    for (std::int64_t i = 0; i < r / 2; ++i) {
      const double f = std::pow(500000.0, -2.0 * double(i) / double(r));
      cos_sin[p * r + i] = float(std::cos(double(p) * f));
      cos_sin[p * r + r / 2 + i] = float(std::sin(double(p) * f));
    }
  std::vector<std::int64_t> positions(nnz), slots(nnz);
  for (std::int64_t t = 0; t < nnz; ++t) {
    positions[t] = 100 + 37 * t;
    slots[t] = (t == 5) ? -1 : (pages - 1 - t % pages) * ps + t % ps;  // token 5 is padding
  }
  std::vector<std::uint8_t> q_out(nnz * hq * d, 0), k_cache(pages * ps * hk * d, 0),
      v_cache(pages * ps * hk * d, 0);

  const Backend backend = resolve_backend(Backend::kAuto);
  // The backend's memory when it can run here; else host memory, which is
  // enough to validate the call.
  const bool runnable = backend_available(backend);
  const Backend memory = runnable ? backend : Backend::kHost;
  Buffer d_qkv = make_buffer(memory, qkv), d_cos = make_buffer(memory, cos_sin),
         d_pos = make_buffer(memory, positions), d_slots = make_buffer(memory, slots),
         d_q_out = make_buffer(memory, q_out), d_k = make_buffer(memory, k_cache),
         d_v = make_buffer(memory, v_cache);

  Arguments a;
  const QkvViews in = fused_qkv_views(d_qkv.get(), DType::kBFloat16, nnz, hq, hk, d, r);
  a.q_rope = in.q_rope;
  a.k_rope = in.k_rope;
  a.v = in.v;
  const HeadViews qo = split_heads(d_q_out.get(), DType::kFloat8E4M3FN, nnz, hq, d, r);
  a.q_rope_out = qo.rope;
  const KvCacheViews c =
      nhd_kv_cache(d_k.get(), d_v.get(), DType::kFloat8E4M3FN, pages, ps, hk, d, r);
  a.k_cache_rope = c.k_rope;
  a.v_cache = c.v;
  const std::int64_t cs_ext[2] = {max_pos, r};
  a.cos_sin_cache = make_contiguous(d_cos.get(), DType::kFloat32, 2, cs_ext);
  a.positions = make_vector(d_pos.get(), DType::kInt64, nnz);
  a.cache_index = slot_mapping_index(d_slots.get(), DType::kInt64, nnz);
  a.q_scale = Scale::host(0.05f);
  a.k_scale = Scale::host(0.04f);
  a.v_scale = Scale::host(0.02f);

  std::printf(
      "ropekv demo: llama-3.1-8b shape, %lld tokens (1 padding), Hq %lld, Hk %lld, D %lld\n",
      static_cast<long long>(nnz), static_cast<long long>(hq), static_cast<long long>(hk),
      static_cast<long long>(d));
  const Result v = validate(a, backend);  // needs no device
  std::printf("validate on %s: %s %s\n", to_string(backend), to_string(v.status), v.message);
  if (!v.ok()) return 1;
  if (!runnable) {
    std::printf("backend %s has no device here: not run (skipped)\n", to_string(backend));
    return 77;
  }
  const Result res = run(a, backend);
  std::printf("run on %s: %s %s\n", to_string(backend), to_string(res.status), res.message);
  if (!res.ok()) return 1;
  d_q_out.read(q_out);
  d_k.read(k_cache);
  std::int64_t written = 0;
  for (auto b : k_cache) written += b != 0;
  std::printf("q_out[0, 0, 0:8] = %02x %02x %02x %02x %02x %02x %02x %02x (e4m3fn)\n", q_out[0],
              q_out[1], q_out[2], q_out[3], q_out[4], q_out[5], q_out[6], q_out[7]);
  std::printf("non-zero K-cache bytes: %lld of %lld (63 tokens x %lld)\n",
              static_cast<long long>(written), static_cast<long long>(k_cache.size()),
              static_cast<long long>(hk * d));
  return 0;
}
