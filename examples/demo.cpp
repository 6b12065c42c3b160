// Runs the op once on the llama-3.1-8b shape (Hq 32, Hk 8, D = R = 128,
// bf16 in, e4m3fn out, NHD cache with 16-token pages) on the best backend
// present and prints what it did. Device backends get device memory through
// the perf suite and tests; this demo uses the host backend's host memory.
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ropekv/ropekv.hpp"

namespace {
std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
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

  Arguments a;
  const QkvViews in = fused_qkv_views(qkv.data(), DType::kBFloat16, nnz, hq, hk, d, r);
  a.q_rope = in.q_rope;
  a.k_rope = in.k_rope;
  a.v = in.v;
  const HeadViews qo = split_heads(q_out.data(), DType::kFloat8E4M3FN, nnz, hq, d, r);
  a.q_rope_out = qo.rope;
  const KvCacheViews c = nhd_kv_cache(k_cache.data(), v_cache.data(), DType::kFloat8E4M3FN,
                                      pages, ps, hk, d, r);
  a.k_cache_rope = c.k_rope;
  a.v_cache = c.v;
  const std::int64_t cs_ext[2] = {max_pos, r};
  a.cos_sin_cache = make_contiguous(cos_sin.data(), DType::kFloat32, 2, cs_ext);
  a.positions = make_vector(positions.data(), DType::kInt64, nnz);
  a.cache_index.slot_mapping = make_vector(slots.data(), DType::kInt64, nnz);
  a.q_scale = Scale::host(0.05f);
  a.k_scale = Scale::host(0.04f);
  a.v_scale = Scale::host(0.02f);

  const Result res = run(a, Backend::kHost);
  std::printf("ropekv demo: llama-3.1-8b shape, %lld tokens (1 padding), Hq %lld, Hk %lld, D %lld\n",
              static_cast<long long>(nnz), static_cast<long long>(hq), static_cast<long long>(hk),
              static_cast<long long>(d));
  std::printf("backend %s: %s %s\n", to_string(Backend::kHost), to_string(res.status), res.message);
  if (!res.ok()) return 1;
  std::int64_t written = 0;
  for (auto b : k_cache) written += b != 0;
  std::printf("q_out[0, 0, 0:8] = %02x %02x %02x %02x %02x %02x %02x %02x (e4m3fn)\n", q_out[0],
              q_out[1], q_out[2], q_out[3], q_out[4], q_out[5], q_out[6], q_out[7]);
  std::printf("non-zero K-cache bytes: %lld of %lld (63 tokens x %lld)\n",
              static_cast<long long>(written), static_cast<long long>(k_cache.size()),
              static_cast<long long>(hk * d));
  return 0;
}
