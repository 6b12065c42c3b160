// Building test calls in host memory and running them on any backend: the
// buffers of one call (host mirrors and their copies in the backend's
// memory) and a small GQA call over them. Used by the regression suite and
// the host concurrency test.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "argument_views.hpp"
#include "backend_memory.hpp"
#include "oracle.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv_test {

constexpr unsigned char kGuard = 0xA5;

// The buffers of one call: host mirrors and their copies in the backend's
// memory. Arguments are built with mirror pointers; run() moves every pointer
// that lies in a mirror to the backend's copy (others, e.g. a deliberately
// wild pointer, stay as they are).
class Buffers {
 public:
  explicit Buffers(const BackendMemory& mem) : mem_(mem) {}
  ~Buffers() {
    for (Entry& e : entries_) mem_.release(e.dev);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  // A zero-filled input or guard-filled output buffer (256-byte aligned).
  unsigned char* add(const char* name, std::size_t bytes, bool output) {
    Entry e;
    e.name = name;
    e.bytes = bytes;
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (p == nullptr) std::abort();
    e.host.reset(static_cast<unsigned char*>(p), [](unsigned char* q) { std::free(q); });
    std::memset(p, output ? kGuard : 0, bytes);
    e.dev = mem_.alloc(bytes);
    entries_.push_back(e);
    return static_cast<unsigned char*>(p);
  }

  // Arguments with every mirror pointer moved to the backend's copy.
  ropekv::Arguments on_backend(const ropekv::Arguments& host_args) const {
    ropekv::Arguments a = host_args;
    rebase_pointers(a, [this](const void* p) { return move(p); });
    return a;
  }

  ropekv::Result validate(const ropekv::Arguments& host_args, ropekv::Backend backend) const {
    return ropekv::validate(on_backend(host_args), backend);
  }

  // Uploads every mirror, runs, downloads every buffer into its mirror.
  ropekv::Result run(const ropekv::Arguments& host_args) {
    return run_with(host_args,
                    [this](const ropekv::Arguments& a) { return ropekv::run(a, mem_.backend); });
  }
  // The same with `call(arguments on the backend)` in place of ropekv::run.
  template <class Call>
  ropekv::Result run_with(const ropekv::Arguments& host_args, Call&& call) {
    for (Entry& e : entries_) mem_.upload(e.dev, e.host.get(), e.bytes);
    const ropekv::Result r = call(on_backend(host_args));
    mem_.synchronize();
    for (Entry& e : entries_) mem_.download(e.host.get(), e.dev, e.bytes);
    return r;
  }

  std::vector<std::vector<unsigned char>> snapshot() const {
    std::vector<std::vector<unsigned char>> s;
    for (const Entry& e : entries_) s.emplace_back(e.host.get(), e.host.get() + e.bytes);
    return s;
  }
  // The first byte that differs from a snapshot, described; empty if none.
  std::string first_change(const std::vector<std::vector<unsigned char>>& before) const {
    for (std::size_t i = 0; i < entries_.size(); ++i)
      for (std::size_t k = 0; k < entries_[i].bytes; ++k)
        if (entries_[i].host.get()[k] != before[i][k])
          return entries_[i].name + " byte " + std::to_string(k) + " changed";
    return std::string();
  }

 private:
  struct Entry {
    std::string name;
    std::size_t bytes = 0;
    std::shared_ptr<unsigned char> host;
    void* dev = nullptr;
  };
  const void* move(const void* p) const {
    const unsigned char* q = static_cast<const unsigned char*>(p);
    for (const Entry& e : entries_)
      if (p != nullptr && q >= e.host.get() && q < e.host.get() + e.bytes)
        return static_cast<unsigned char*>(e.dev) + (q - e.host.get());
    return p;
  }

  const BackendMemory& mem_;
  std::vector<Entry> entries_;
};

inline void store_code(unsigned char* p, ropekv::DType dtype, std::uint32_t code) {
  std::memcpy(p, &code, std::size_t(ropekv_oracle::bits_of(dtype) / 8));  // little-endian
}

// ------------------------------------------------------------------ a GQA call
struct Gqa {
  using DType = ropekv::DType;
  std::int64_t nnz = 6, hq = 4, hk = 2, r = 16, n = 16, page_size = 16, pages = 4, max_pos = 64;
  DType in = DType::kBFloat16, q_out = DType::kFloat8E4M3FN, cache = DType::kFloat8E4M3FN;
  bool one_input_row = false;  // every token reads the same q, k, v row (token stride 0)
  std::int64_t d() const { return r + n; }
};

// A GQA call in `b`: a fused QKV input with values value(rng) (default:
// uniform in [-4, 4]), a query output [nnz, Hq, D], NHD K and V caches, an
// fp32 cos/sin table, int64 positions t % max_pos and slots `slots[t]`; host
// scales 0.05, 0.03 and 0.02.
inline ropekv::Arguments gqa_call(Buffers& b, const Gqa& g, const std::vector<std::int64_t>& slots,
                                  std::uint64_t seed, double (*value)(std::mt19937_64&) = nullptr) {
  using ropekv::DType;
  ropekv::Arguments a;
  const std::int64_t d = g.d(), in_es = std::int64_t(ropekv::size_of(g.in));
  const std::int64_t row = (g.hq + 2 * g.hk) * d, rows = g.one_input_row ? 1 : g.nnz;
  unsigned char* qkv = b.add("qkv", std::size_t(rows * row * in_es), false);
  std::mt19937_64 rng(seed);
  for (std::int64_t i = 0; i < rows * row; ++i) {
    const double v = value != nullptr ? value(rng) : double(rng() % 8001) / 1000.0 - 4.0;
    store_code(qkv + i * in_es, g.in, ropekv_oracle::encode(g.in, v));
  }
  const ropekv::QkvViews in = ropekv::fused_qkv_views(qkv, g.in, g.nnz, g.hq, g.hk, d, g.r);
  a.q_rope = in.q_rope;
  a.q_nope = in.q_nope;
  a.k_rope = in.k_rope;
  a.k_nope = in.k_nope;
  a.v = in.v;
  if (g.one_input_row)
    for (ropekv::TensorView* v : {&a.q_rope, &a.q_nope, &a.k_rope, &a.k_nope, &a.v})
      v->stride[0] = 0;
  unsigned char* q_out =
      b.add("q_out", std::size_t(g.nnz * g.hq * d) * ropekv::size_of(g.q_out), true);
  const ropekv::HeadViews qo = ropekv::split_heads(q_out, g.q_out, g.nnz, g.hq, d, g.r);
  a.q_rope_out = qo.rope;
  a.q_nope_out = qo.nope;
  const std::size_t cache_bytes =
      std::size_t(g.pages * g.page_size * g.hk * d) * ropekv::size_of(g.cache);
  unsigned char* k_cache = b.add("k_cache", cache_bytes, true);
  unsigned char* v_cache = b.add("v_cache", cache_bytes, true);
  const ropekv::KvCacheViews c =
      ropekv::nhd_kv_cache(k_cache, v_cache, g.cache, g.pages, g.page_size, g.hk, d, g.r);
  a.k_cache_rope = c.k_rope;
  a.k_cache_nope = c.k_nope;
  a.v_cache = c.v;
  float* cs = reinterpret_cast<float*>(b.add("cos_sin", std::size_t(g.max_pos * g.r * 4), false));
  ropekv_oracle::fill_rope_table(cs, g.max_pos, g.r);
  const std::int64_t cs_ext[2] = {g.max_pos, g.r};
  a.cos_sin_cache = ropekv::make_contiguous(cs, DType::kFloat32, 2, cs_ext);
  std::int64_t* pos =
      reinterpret_cast<std::int64_t*>(b.add("positions", std::size_t(g.nnz * 8), false));
  std::int64_t* slot =
      reinterpret_cast<std::int64_t*>(b.add("slots", std::size_t(g.nnz * 8), false));
  for (std::int64_t t = 0; t < g.nnz; ++t) {
    pos[t] = t % g.max_pos;
    slot[t] = slots[std::size_t(t)];
  }
  a.positions = ropekv::make_vector(pos, DType::kInt64, g.nnz);
  a.cache_index.slot_mapping = ropekv::make_vector(slot, DType::kInt64, g.nnz);
  a.q_scale = ropekv::Scale::host(0.05f);
  a.k_scale = ropekv::Scale::host(0.03f);
  a.v_scale = ropekv::Scale::host(0.02f);
  return a;
}

inline std::vector<std::int64_t> identity_slots(std::int64_t n) {
  std::vector<std::int64_t> s(static_cast<std::size_t>(n));
  for (std::int64_t t = 0; t < n; ++t) s[std::size_t(t)] = t;
  return s;
}

// A checked-mode counter (in an output buffer) starting at `initial`.
inline unsigned long long* add_counter(Buffers& b, unsigned long long initial) {
  auto* c = reinterpret_cast<unsigned long long*>(b.add("skipped_tokens", 8, true));
  *c = initial;
  return c;
}

}  // namespace ropekv_test
