// The host backend splits a large call over threads when Kokkos' host space
// is serial (host/host_backend.cpp). Each token must come out the same
// whichever thread runs it: a large call (split) is compared bit for bit with
// the same tokens run as many small calls (each below the split threshold,
// so on the calling thread alone), on the fast path and on the generic row
// path, with padding tokens, saturating values and NaN inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "detail/params.hpp"
#include "host/threads.hpp"
#include "host_split.hpp"
#include "oracle.hpp"
#include "ropekv/ropekv.hpp"

namespace {

using namespace ropekv;

std::uint16_t to_half_bits(float f, DType dtype) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if (dtype == DType::kBFloat16) return std::uint16_t(u >> 16);  // truncation: any bf16 will do
  // fp16 of a value in [-8, 8): sign, rebiased exponent, truncated mantissa.
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const int e = int((u >> 23) & 0xff) - 127 + 15;
  if (e <= 0) return std::uint16_t(sign);
  return std::uint16_t(sign | (std::uint32_t(e) << 10) | ((u >> 13) & 0x3ffu));
}

struct Case {
  const char* name;
  DType in, out;
  RopeStyle style;
  std::int64_t hq, hk, d, r;
};

// Runs tokens [t0, t0 + n) of the problem as one call.
class Problem {
 public:
  Problem(const Case& c, std::int64_t nnz) : c_(c), nnz_(nnz) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-6.f, 6.f);
    qkv_.resize(std::size_t(nnz * (c.hq + 2 * c.hk) * c.d));
    for (std::size_t i = 0; i < qkv_.size(); ++i) {
      float v = u(rng);
      if (i % 997 == 0) v *= 4096.f;  // saturates every FP8 format
      qkv_[i] = to_half_bits(v, c.in);
      if (i % 1999 == 0) qkv_[i] = c.in == DType::kBFloat16 ? 0xffc1u : 0xfe01u;  // -NaN
    }
    cos_sin_ = ropekv_oracle::rope_table(kMaxPos, c.r);
    positions_.resize(std::size_t(nnz));
    slots_.resize(std::size_t(nnz));
    const std::int64_t slots_total = pages() * kPageSize;
    for (std::int64_t t = 0; t < nnz; ++t) {
      positions_[std::size_t(t)] = (t * 37) % kMaxPos;
      // A permutation of the slots; every 61st token is padding.
      slots_[std::size_t(t)] = t % 61 == 7 ? -1 : (t * 7919) % slots_total;
    }
  }
  std::int64_t pages() const { return (nnz_ + kPageSize - 1) / kPageSize; }

  struct Outputs {
    std::vector<std::uint8_t> q, k, v;
  };
  Outputs make_outputs() const {
    Outputs o;
    const std::size_t cache = std::size_t(pages() * kPageSize * c_.hk * c_.d);
    o.q.assign(std::size_t(nnz_ * c_.hq * c_.d), 0xa5);
    o.k.assign(cache, 0xa5);
    o.v.assign(cache, 0xa5);
    return o;
  }

  Result run_tokens(Outputs& o, std::int64_t t0, std::int64_t n) {
    Arguments a;
    a.rope_style = c_.style;
    const std::int64_t row = (c_.hq + 2 * c_.hk) * c_.d;
    const QkvViews in = fused_qkv_views(qkv_.data() + t0 * row, c_.in, n, c_.hq, c_.hk, c_.d, c_.r);
    a.q_rope = in.q_rope;
    a.q_nope = in.q_nope;
    a.k_rope = in.k_rope;
    a.k_nope = in.k_nope;
    a.v = in.v;
    const HeadViews qo = split_heads(o.q.data() + t0 * c_.hq * c_.d, c_.out, n, c_.hq, c_.d, c_.r);
    a.q_rope_out = qo.rope;
    a.q_nope_out = qo.nope;
    const KvCacheViews kv =
        nhd_kv_cache(o.k.data(), o.v.data(), c_.out, pages(), kPageSize, c_.hk, c_.d, c_.r);
    a.k_cache_rope = kv.k_rope;
    a.k_cache_nope = kv.k_nope;
    a.v_cache = kv.v;
    const std::int64_t cs_ext[2] = {kMaxPos, c_.r};
    a.cos_sin_cache = make_contiguous(cos_sin_.data(), DType::kFloat32, 2, cs_ext);
    a.positions = make_vector(positions_.data() + t0, DType::kInt64, n);
    a.cache_index.slot_mapping = make_vector(slots_.data() + t0, DType::kInt64, n);
    a.q_scale = Scale::host(0.05f);
    a.k_scale = Scale::host(0.03f);
    a.v_scale = Scale::host(0.7f);
    return run(a, Backend::kHost);
  }

 private:
  static constexpr std::int64_t kMaxPos = 4096, kPageSize = 16;
  Case c_;
  std::int64_t nnz_;
  std::vector<std::uint16_t> qkv_;
  std::vector<float> cos_sin_;
  std::vector<std::int64_t> positions_, slots_;
};

std::size_t count_diff(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

void check_split_equals_chunked(const Case& c) {
  // Several threads even on a small machine; the call is cut into chunks of
  // 32 tokens that the threads take in whatever order they get them.
  ropekv_test::request_host_threads("3");
  const std::string no_split = ropekv_test::no_split_reason(detail::host_backend_threads());
  if (!no_split.empty()) GTEST_SKIP() << no_split << ": no split to compare";
  constexpr std::int64_t kNnz = 1536, kChunk = 32;  // about 15 MB in one call; 300 KB a chunk
  Problem prob(c, kNnz);
  Problem::Outputs whole = prob.make_outputs(), chunked = prob.make_outputs();
  const Result r = prob.run_tokens(whole, 0, kNnz);
  ASSERT_TRUE(r.ok()) << r.message;
  // The premise: the large call was split over threads.
  const int whole_threads = detail::host_last_call_threads();
  ASSERT_GE(whole_threads, 2) << c.name << ": the " << kNnz << "-token call ran on one thread";
  int chunk_threads = 0;
  for (std::int64_t t0 = 0; t0 < kNnz; t0 += kChunk) {
    const Result rc = prob.run_tokens(chunked, t0, kChunk);
    ASSERT_TRUE(rc.ok()) << rc.message;
    chunk_threads = std::max(chunk_threads, detail::host_last_call_threads());
  }
  EXPECT_EQ(count_diff(whole.q, chunked.q), 0u) << c.name << ": q_out";
  EXPECT_EQ(count_diff(whole.k, chunked.k), 0u) << c.name << ": k cache";
  EXPECT_EQ(count_diff(whole.v, chunked.v), 0u) << c.name << ": v cache";
  std::printf(
      "[ threads ] %s: %lld tokens in one call on %d threads == %lld calls of %lld (on <= %d "
      "thread(s) each)\n",
      c.name, static_cast<long long>(kNnz), whole_threads, static_cast<long long>(kNnz / kChunk),
      static_cast<long long>(kChunk), chunk_threads);
}

TEST(HostThreads, FastPathSplitEqualsChunked) {
  check_split_equals_chunked({"bf16->e4m3fn NeoX R 128", DType::kBFloat16, DType::kFloat8E4M3FN,
                              RopeStyle::kNeox, 16, 4, 128, 128});
}

TEST(HostThreads, RowPathSplitEqualsChunked) {
  check_split_equals_chunked({"fp16->e5m2 interleaved R 96 + N 32", DType::kFloat16,
                              DType::kFloat8E5M2, RopeStyle::kInterleaved, 16, 4, 128, 96});
}

// A body that throws on one chunk (on whichever thread takes it): the
// exception reaches the caller, not std::terminate, once every thread is done.
TEST(HostThreads, BodyExceptionReachesTheCaller) {
  ropekv_test::request_host_threads("3");
  const std::string no_split = ropekv_test::no_split_reason(detail::host_backend_threads());
  if (!no_split.empty()) GTEST_SKIP() << no_split << ": no worker to throw on";
  // Only the sizes host_for_tokens reads: about 128 MB in the byte model, so split.
  detail::LaunchParams p;
  p.nnz = 4096;
  p.num_q_heads = 64;
  p.num_kv_heads = 8;
  p.rotary_dim = p.v_dim = 128;
  p.in.bytes = 2;
  p.q_out.bytes = p.cache.bytes = 1;
  p.cos.bytes = 4;
  std::atomic<int> running{0};
  std::atomic<bool> thrown{false};
  auto body = [&](std::int64_t t0, std::int64_t) {
    running.fetch_add(1);
    if (t0 >= 512 && !thrown.exchange(true)) {
      running.fetch_sub(1);
      throw std::runtime_error("chunk failed");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // others are busy at the throw
    running.fetch_sub(1);
  };
  EXPECT_THROW(
      {
        try {
          detail::host_for_tokens(p, body);
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "chunk failed");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_GE(detail::host_last_call_threads(), 2) << "the call was not split";
  EXPECT_EQ(running.load(), 0) << "a thread was still in the body when the call returned";
}

}  // namespace
