// Host calls whose element offsets pass 2^31 (and byte offsets 2^32): the
// contract's 64-bit index arithmetic, run, not only validated. The cache and
// the query output live in mmap'ed virtual memory (MAP_NORESERVE) of a few
// GiB: only the OS pages the test fills with guard bytes, and those the call
// writes, become resident.
//
//  * HostLargeOffsets.CachePagesPastTwoToThe31: a cache whose page stride is
//    2^31 + 64 elements (e4m3fn, so pages 1 and 2 start past 2^31 and 2^32
//    bytes), written through an int64 slot mapping and through a page table
//    whose kv_indices name pages 2 and 1, by the fast path and the row path,
//    with a packed query output and one whose token stride passes 2^31.
//
// Every element the oracle names must be a code it allows and the float32
// formula's code; every other byte of the OS pages around them keeps its
// guard; and no other OS page of the mappings becomes resident (mincore): a
// write anywhere else, e.g. at an offset narrowed to 32 bits, is found. 2 GiB+
// of mapping below each view's base catch a narrowed offset that wraps
// negative, instead of a crash.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "oracle.hpp"
#include "ropekv/ropekv.hpp"

namespace {

using namespace ropekv;
namespace orc = ropekv_oracle;

constexpr unsigned char kGuard = 0xC3;
constexpr std::int64_t kTwo31 = std::int64_t(1) << 31;

// Anonymous private memory, MAP_NORESERVE: `below` bytes of never-touched
// margin, then the view's bytes from `base`.
struct Reserved {
  Reserved(std::size_t below, std::size_t size) : len(below + size) {
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      error = std::strerror(errno);
      return;
    }
    map = static_cast<unsigned char*>(p);
    base = map + below;
    // 4 KiB pages: a transparent huge page would make 2 MiB resident per touch.
    madvise(map, len, MADV_NOHUGEPAGE);
  }
  ~Reserved() {
    if (map != nullptr) munmap(map, len);
  }
  Reserved(const Reserved&) = delete;
  Reserved& operator=(const Reserved&) = delete;
  bool contains(const unsigned char* p) const { return p >= map && p < map + len; }

  std::size_t len;
  unsigned char* map = nullptr;
  unsigned char* base = nullptr;
  std::string error;
};

const std::size_t kOsPage = std::size_t(sysconf(_SC_PAGESIZE));

// The OS pages of `m` resident now (mincore), as addresses.
std::vector<unsigned char*> resident_pages(const Reserved& m) {
  std::vector<unsigned char> vec((m.len + kOsPage - 1) / kOsPage);
  std::vector<unsigned char*> out;
  if (mincore(m.map, m.len, vec.data()) != 0) {
    ADD_FAILURE() << "mincore failed: " << std::strerror(errno);
    return out;
  }
  for (std::size_t i = 0; i < vec.size(); ++i)
    if (vec[i] & 1) out.push_back(m.map + i * kOsPage);
  return out;
}

unsigned char* page_of(const unsigned char* p) {
  return reinterpret_cast<unsigned char*>(reinterpret_cast<std::uintptr_t>(p) &
                                          ~std::uintptr_t(kOsPage - 1));
}

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Runs `a` on the host backend: the oracle's elements (all inside `maps`)
// allowed and the float32 formula's code, every other byte of the OS pages
// around them (filled with guard bytes first) unchanged, and no other page of
// `maps` resident.
void expect_large_call_matches_oracle(const Arguments& a, const std::vector<const Reserved*>& maps,
                                      std::int64_t want_written) {
  const orc::Reference ref = orc::reference(a);
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  ASSERT_EQ(ref.written_tokens, want_written);
  ASSERT_FALSE(ref.elements.empty());
  // The pages holding named elements and one page either side: guard bytes.
  std::set<unsigned char*> filled;
  std::set<const unsigned char*> named;
  for (const orc::ExpectedElement& e : ref.elements) {
    const int bytes = orc::bits_of(e.dtype) / 8;
    bool inside = false;
    for (const Reserved* m : maps) inside = inside || m->contains(e.address);
    ASSERT_TRUE(inside) << "element outside the mappings: " << e.describe();
    for (int k = 0; k < bytes; ++k) named.insert(e.address + k);
    for (unsigned char* pg : {page_of(e.address) - kOsPage, page_of(e.address),
                              page_of(e.address + bytes - 1) + kOsPage})
      for (const Reserved* m : maps)
        if (m->contains(pg)) filled.insert(pg);
  }
  for (unsigned char* pg : filled) std::memset(pg, kGuard, kOsPage);

  const Result r = run(a, Backend::kHost);
  ASSERT_TRUE(r.ok()) << to_string(r.status) << ": " << r.message;

  std::size_t bad = 0;
  for (const orc::ExpectedElement& e : ref.elements) {
    const std::uint32_t code = orc::load_code(e.address, orc::bits_of(e.dtype));
    if (!e.matches(code) && bad++ < 5)
      ADD_FAILURE() << e.describe() << "; library wrote 0x" << std::hex << code;
  }
  EXPECT_EQ(bad, 0u);
  std::size_t stray = 0;
  for (unsigned char* pg : filled)
    for (std::size_t k = 0; k < kOsPage; ++k)
      if (pg[k] != kGuard && named.count(pg + k) == 0 && stray++ < 5)
        ADD_FAILURE() << "byte written outside the views, in a page around them";
  EXPECT_EQ(stray, 0u);
  std::size_t filled_resident = 0;
  for (const Reserved* m : maps)
    for (unsigned char* pg : resident_pages(*m)) {
      if (filled.count(pg) != 0)
        ++filled_resident;
      else if (stray++ < 5)
        ADD_FAILURE() << "a page the call should not touch is resident: " << (pg - m->base)
                      << " bytes from the view's base";
    }
  EXPECT_EQ(stray, 0u);
  // mincore sees the pages filled above: the check above is not vacuous.
  EXPECT_EQ(filled_resident, filled.size());
}

TEST(HostLargeOffsets, CachePagesPastTwoToThe31) {
  if (sizeof(void*) < 8) GTEST_SKIP() << "skipped (not passed): needs a 64-bit address space";
  // GQA, Hq 2, Hk 1, D = R = 64 (the fast path's R), 4 tokens (one padding).
  constexpr std::int64_t nnz = 4, hq = 2, hk = 1, d = 64, ps = 4, pages = 3, max_pos = 16;
  // Each cache page: its K rows, then its V rows, then the rest of 2^31 + 64.
  constexpr std::int64_t page_stride = kTwo31 + 64, kv_rows = ps * hk * d;
  constexpr std::int64_t q_stride_big = kTwo31 + 256;  // query output token stride, elements

  std::vector<std::uint16_t> q(nnz * hq * d), k(nnz * hk * d), v(nnz * hk * d);
  std::uint32_t s = 7;
  for (auto* buf : {&q, &k, &v})
    for (std::uint16_t& x : *buf) {
      s = s * 1664525u + 1013904223u;
      x = to_bf16(float((s >> 8) & 0xFFFF) / 16384.0f - 2.0f + 1.0f / 128);
    }
  const std::vector<float> cos = orc::rope_table(max_pos, d);
  const std::int64_t positions[nnz] = {3, 9, 0, 15};
  // The same three cache entries both ways: (page 2, entry 1), (page 1,
  // entry 2), (page 2, entry 3); token 2 is padding.
  const std::int64_t slots[nnz] = {2 * ps + 1, 1 * ps + 2, -1, 2 * ps + 3};
  const std::int64_t kv_indices[2] = {2, 1}, kv_indptr[2] = {0, 2};
  const std::int64_t batch[nnz] = {0, 0, -1, 0}, kv_pos[nnz] = {1, 6, 0, 3};

  // The cache: 2 GiB + 1 MiB below its base, its span above.
  Reserved cache(std::size_t(kTwo31) + (1u << 20),
                 std::size_t((pages - 1) * page_stride + 2 * kv_rows));
  if (cache.map == nullptr)
    GTEST_SKIP() << "skipped (not passed): mmap of " << (cache.len >> 20)
                 << " MiB (MAP_NORESERVE) failed: " << cache.error;

  int runs = 0;
  for (bool page_table : {false, true})
    for (DType q_dtype : {DType::kFloat8E4M3FN, DType::kBFloat16}) {
      // Every pair of addressing form, query output dtype (e4m3fn: the fast
      // path; bf16: the row path) and query output stride, in 4 calls.
      const bool q_big = page_table == (q_dtype == DType::kFloat8E4M3FN);
      SCOPED_TRACE(std::string(page_table ? "page table" : "slot mapping") + ", q_out " +
                   to_string(q_dtype) + (q_big ? ", token stride 2^31 + 256" : ", packed"));
      // The query output: with the big stride, tokens 1-3 start past 2^31
      // elements; 2^31 elements + 1 MiB below its base.
      const std::int64_t eb = std::int64_t(size_of(q_dtype));
      const std::int64_t q_ts = q_big ? q_stride_big : hq * d;
      Reserved q_out(std::size_t(kTwo31 * eb) + (1u << 20),
                     std::size_t(((nnz - 1) * q_ts + hq * d) * eb));
      if (q_out.map == nullptr)
        GTEST_SKIP() << "skipped (not passed): mmap of " << (q_out.len >> 20)
                     << " MiB (MAP_NORESERVE) failed: " << q_out.error;

      Arguments a;
      const std::int64_t qe[3] = {nnz, hq, d}, ke[3] = {nnz, hk, d};
      a.q_rope = make_contiguous(q.data(), DType::kBFloat16, 3, qe);
      a.k_rope = make_contiguous(k.data(), DType::kBFloat16, 3, ke);
      a.v = make_contiguous(v.data(), DType::kBFloat16, 3, ke);
      const std::int64_t qs[3] = {q_ts, d, 1};
      a.q_rope_out = make_strided(q_out.base, q_dtype, 3, qe, qs);
      const std::int64_t ce[4] = {pages, ps, hk, d}, cs[4] = {page_stride, hk * d, d, 1};
      a.k_cache_rope = make_strided(cache.base, DType::kFloat8E4M3FN, 4, ce, cs);
      a.v_cache = make_strided(cache.base + kv_rows, DType::kFloat8E4M3FN, 4, ce, cs);
      const std::int64_t te[2] = {max_pos, d};
      a.cos_sin_cache = make_contiguous(const_cast<float*>(cos.data()), DType::kFloat32, 2, te);
      a.positions = make_vector(const_cast<std::int64_t*>(positions), DType::kInt64, nnz);
      a.cache_index = page_table
                          ? page_table_index(kv_indices, DType::kInt64, 2, kv_indptr, DType::kInt64,
                                             2, batch, DType::kInt64, kv_pos, DType::kInt64, nnz)
                          : slot_mapping_index(slots, DType::kInt64, nnz);
      a.rope_style = page_table ? RopeStyle::kInterleaved : RopeStyle::kNeox;
      a.q_scale = Scale::host(0.05f);
      a.k_scale = Scale::host(0.03f);
      a.v_scale = Scale::host(0.125f);
      expect_large_call_matches_oracle(a, {&cache, &q_out}, nnz - 1);
      // The pages this call touched go back to untouched, for the next one.
      madvise(cache.map, cache.len, MADV_DONTNEED);
      ++runs;
    }
  EXPECT_EQ(runs, 4);
}

}  // namespace
