// One test per validation rule (the contract's "bad input" rules, README.md).
//
// Every test starts from one valid baseline call (a small GQA case in host
// memory, built with the public layout helpers), breaks exactly one thing and
// checks that
//   1. validate(args, Backend::kHost) returns the rule's Status;
//   2. the message names the argument and the rule;
//   3. run(args, Backend::kHost) returns the same Status and message and wrote
//      nothing: the query output, both caches and a spare buffer are filled
//      with a guard byte first and must still hold it afterwards, and every
//      input must still equal its snapshot.
// A few derived baselines (page-table addressing, MLA) are themselves checked
// to be valid before they are broken. The valid layouts (NHD, HND, stacked,
// MLA single and split buffers, a split query output) must pass validation and
// run writes exactly the bytes their views name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "ropekv/config.hpp"
#include "ropekv/ropekv.hpp"

namespace {

using ropekv::Addressing;
using ropekv::Arguments;
using ropekv::AttentionKind;
using ropekv::Backend;
using ropekv::DType;
using ropekv::Result;
using ropekv::RopeStyle;
using ropekv::Scale;
using ropekv::Status;
using ropekv::TensorView;

constexpr unsigned char kGuard = 0xA5;

// Baseline shape: GQA, 3 tokens, 4 query heads, 2 kv heads, head dim 12 with
// a rotary part of 8 (N = 4), Dv = 12; 4 pages of 4 slots; 16 positions.
constexpr std::int64_t kNnz = 3;
constexpr std::int64_t kHq = 4;
constexpr std::int64_t kHk = 2;
constexpr std::int64_t kD = 12;
constexpr std::int64_t kR = 8;
constexpr std::int64_t kN = kD - kR;
constexpr std::int64_t kPages = 4;
constexpr std::int64_t kPageSize = 4;
constexpr std::int64_t kMaxPos = 16;
// The fused QKV rows are padded: (Hq + 2 * Hk) * D = 96 used of 100.
constexpr std::int64_t kQkvRow = 100;

// Rows of the index arrays.
constexpr std::int64_t kPositions[kNnz] = {3, 0, 9};
constexpr std::int64_t kSlots[kNnz] = {1, 6, 13};
// Page table: 2 sequences of 2 pages each.
constexpr std::int32_t kKvIndices[4] = {2, 0, 3, 1};
constexpr std::int32_t kKvIndptr[3] = {0, 2, 4};
constexpr std::int32_t kBatchIndices[kNnz] = {0, 0, 1};
constexpr std::int32_t kKvPositions[kNnz] = {3, 0, 6};
// The slots the page table above addresses: page * page_size + entry.
constexpr std::int64_t kPageTableSlots[kNnz] = {2 * kPageSize + 3, 2 * kPageSize + 0,
                                                1 * kPageSize + 2};

// Byte buffer with 8-byte aligned storage.
class Bytes {
 public:
  explicit Bytes(std::size_t n) : words_((n + 7) / 8, 0), size_(n) {}
  unsigned char* data() { return reinterpret_cast<unsigned char*>(words_.data()); }
  const unsigned char* data() const {
    return reinterpret_cast<const unsigned char*>(words_.data());
  }
  std::size_t size() const { return size_; }
  void fill(unsigned char b) { std::memset(data(), b, size_); }
  std::vector<unsigned char> copy() const { return {data(), data() + size_}; }

 private:
  std::vector<std::uint64_t> words_;
  std::size_t size_;
};

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even (finite inputs only)
  return static_cast<std::uint16_t>(u >> 16);
}

bool contains(const char* haystack, const char* needle) {
  return std::string(haystack).find(needle) != std::string::npos;
}

std::string describe(const Result& r) {
  return std::string(ropekv::to_string(r.status)) + " (" +
         std::to_string(static_cast<int>(r.status)) + "): \"" + r.message + "\"";
}

// Marks in `mark` the bytes of `buf` that a 4-d cache view addresses for the
// given slots (all heads, all elements of the last dim).
void mark_cache(const Bytes& buf, const TensorView& v, const std::int64_t* slots, int n,
                std::vector<bool>& mark) {
  ASSERT_EQ(v.rank, 4);
  const std::int64_t es = static_cast<std::int64_t>(ropekv::size_of(v.dtype));
  const std::int64_t base = static_cast<const unsigned char*>(v.data) - buf.data();
  for (int t = 0; t < n; ++t) {
    const std::int64_t page = slots[t] / v.extent[1], entry = slots[t] % v.extent[1];
    for (std::int64_t h = 0; h < v.extent[2]; ++h)
      for (std::int64_t d = 0; d < v.extent[3]; ++d) {
        const std::int64_t e =
            page * v.stride[0] + entry * v.stride[1] + h * v.stride[2] + d * v.stride[3];
        for (std::int64_t b = 0; b < es; ++b) {
          const std::int64_t at = base + e * es + b;
          ASSERT_GE(at, 0);
          ASSERT_LT(static_cast<std::size_t>(at), buf.size());
          mark[static_cast<std::size_t>(at)] = true;
        }
      }
  }
}

// Marks the bytes of a 3-d [nnz, H, len] view.
void mark_heads(const Bytes& buf, const TensorView& v, std::vector<bool>& mark) {
  ASSERT_EQ(v.rank, 3);
  const std::int64_t es = static_cast<std::int64_t>(ropekv::size_of(v.dtype));
  const std::int64_t base = static_cast<const unsigned char*>(v.data) - buf.data();
  for (std::int64_t t = 0; t < v.extent[0]; ++t)
    for (std::int64_t h = 0; h < v.extent[1]; ++h)
      for (std::int64_t d = 0; d < v.extent[2]; ++d)
        for (std::int64_t b = 0; b < es; ++b) {
          const std::int64_t at =
              base + (t * v.stride[0] + h * v.stride[1] + d * v.stride[2]) * es + b;
          ASSERT_GE(at, 0);
          ASSERT_LT(static_cast<std::size_t>(at), buf.size());
          mark[static_cast<std::size_t>(at)] = true;
        }
}

// Every byte outside `mark` still holds the guard; most bytes inside it were
// written (an FP8 code can coincide with the guard byte, so not all).
void expect_footprint(const Bytes& buf, const char* name, const std::vector<bool>& mark) {
  std::size_t inside = 0, written = 0, stray = 0, first_stray = 0;
  for (std::size_t i = 0; i < buf.size(); ++i) {
    const bool changed = buf.data()[i] != kGuard;
    if (mark[i]) {
      ++inside;
      written += changed ? 1 : 0;
    } else if (changed) {
      if (stray++ == 0) first_stray = i;
    }
  }
  EXPECT_EQ(stray, 0u) << name << ": " << stray << " bytes written outside the views, first at "
                       << first_stray;
  EXPECT_GT(inside, 0u) << name;
  EXPECT_GT(2 * written, inside) << name << ": only " << written << " of " << inside
                                 << " addressed bytes were written";
}

class Validate : public ::testing::Test {
 protected:
  Validate()
      : qkv_(kNnz * kQkvRow * 2),
        cos_(kMaxPos * kR * 4),
        positions_((kNnz + 1) * 8),
        slots_(kNnz * 8),
        kv_indices_(sizeof kKvIndices),
        kv_indptr_(sizeof kKvIndptr),
        batch_indices_(sizeof kBatchIndices),
        kv_positions_(sizeof kKvPositions),
        // Outputs get 8x what the baseline's fp8 views need, so that a
        // wrongly accepted dtype or stride change still lands in the guard.
        q_out_(8 * kNnz * kHq * kD),
        k_cache_(8 * kPages * kPageSize * kHk * kD),
        v_cache_(8 * kPages * kPageSize * kHk * kD),
        spare_(8 * 2 * kPages * kPageSize * kHk * kD) {}

  void SetUp() override {
    // Non-zero, non-repeating input values in about [-2, 2].
    std::uint32_t state = 12345u;
    auto next = [&state] {
      state = state * 1664525u + 1013904223u;
      return static_cast<float>((state >> 8) & 0xFFFF) / 16384.0f - 2.0f + 1.0f / 64;
    };
    auto* qkv = reinterpret_cast<std::uint16_t*>(qkv_.data());
    for (std::int64_t i = 0; i < kNnz * kQkvRow; ++i) qkv[i] = to_bf16(next());
    auto* cs = reinterpret_cast<float*>(cos_.data());
    for (std::int64_t p = 0; p < kMaxPos; ++p)
      for (std::int64_t i = 0; i < kR / 2; ++i) {
        const double theta = static_cast<double>(p) * std::pow(10000.0, -2.0 * i / kR);
        cs[p * kR + i] = static_cast<float>(std::cos(theta));
        cs[p * kR + kR / 2 + i] = static_cast<float>(std::sin(theta));
      }
    std::memcpy(positions_.data(), kPositions, sizeof kPositions);
    std::memcpy(slots_.data(), kSlots, sizeof kSlots);
    std::memcpy(kv_indices_.data(), kKvIndices, sizeof kKvIndices);
    std::memcpy(kv_indptr_.data(), kKvIndptr, sizeof kKvIndptr);
    std::memcpy(batch_indices_.data(), kBatchIndices, sizeof kBatchIndices);
    std::memcpy(kv_positions_.data(), kKvPositions, sizeof kKvPositions);
    for (Bytes* b : outputs()) b->fill(kGuard);
    for (const Bytes* b : inputs()) snapshots_.push_back(b->copy());
  }

  std::vector<Bytes*> outputs() { return {&q_out_, &k_cache_, &v_cache_, &spare_}; }
  std::vector<const Bytes*> inputs() const {
    return {&qkv_,        &cos_,       &positions_,     &slots_,
            &kv_indices_, &kv_indptr_, &batch_indices_, &kv_positions_};
  }

  // The one valid baseline: GQA, bf16 views into a padded fused QKV buffer,
  // e4m3fn query output split into rope/nope, e4m3fn NHD K and V caches, fp32
  // cos/sin table, int64 positions and slot mapping, three unequal host scales.
  Arguments Baseline() {
    Arguments a;
    a.kind = AttentionKind::kGqa;
    a.rope_style = RopeStyle::kNeox;
    const ropekv::QkvViews in =
        ropekv::fused_qkv_views(qkv_.data(), DType::kBFloat16, kNnz, kHq, kHk, kD, kR, kQkvRow);
    a.q_rope = in.q_rope;
    a.q_nope = in.q_nope;
    a.k_rope = in.k_rope;
    a.k_nope = in.k_nope;
    a.v = in.v;
    const ropekv::HeadViews qo =
        ropekv::split_heads(q_out_.data(), DType::kFloat8E4M3FN, kNnz, kHq, kD, kR);
    a.q_rope_out = qo.rope;
    a.q_nope_out = qo.nope;
    const ropekv::KvCacheViews c = ropekv::nhd_kv_cache(
        k_cache_.data(), v_cache_.data(), DType::kFloat8E4M3FN, kPages, kPageSize, kHk, kD, kR);
    a.k_cache_rope = c.k_rope;
    a.k_cache_nope = c.k_nope;
    a.v_cache = c.v;
    const std::int64_t cos_ext[2] = {kMaxPos, kR};
    a.cos_sin_cache = ropekv::make_contiguous(cos_.data(), DType::kFloat32, 2, cos_ext);
    a.positions = ropekv::make_vector(positions_.data(), DType::kInt64, kNnz);
    a.cache_index.form = Addressing::kSlotMapping;
    a.cache_index.slot_mapping = ropekv::make_vector(slots_.data(), DType::kInt64, kNnz);
    a.q_scale = Scale::host(0.5f);
    a.k_scale = Scale::host(0.25f);
    a.v_scale = Scale::host(2.0f);
    return a;
  }

  // The baseline addressed by page table (int32 index arrays) instead.
  Arguments PageTableBaseline() {
    Arguments a = Baseline();
    a.cache_index.form = Addressing::kPageTable;
    a.cache_index.slot_mapping = TensorView{};
    a.cache_index.kv_indices = ropekv::make_vector(kv_indices_.data(), DType::kInt32, 4);
    a.cache_index.kv_indptr = ropekv::make_vector(kv_indptr_.data(), DType::kInt32, 3);
    a.cache_index.batch_indices = ropekv::make_vector(batch_indices_.data(), DType::kInt32, kNnz);
    a.cache_index.kv_positions = ropekv::make_vector(kv_positions_.data(), DType::kInt32, kNnz);
    return a;
  }

  // The baseline as MLA: one kv head (the first), no value, no V cache.
  Arguments MlaBaseline() {
    Arguments a = Baseline();
    a.kind = AttentionKind::kMla;
    a.v = TensorView{};
    a.v_cache = TensorView{};
    a.k_rope.extent[1] = 1;
    a.k_nope.extent[1] = 1;
    a.k_cache_rope.extent[2] = 1;
    a.k_cache_nope.extent[2] = 1;
    return a;
  }

  // Nothing was written: every guarded byte holds the guard, every input its
  // snapshot.
  void ExpectNothingWritten() {
    const char* out_names[] = {"q_out", "k_cache", "v_cache", "spare"};
    const std::vector<Bytes*> outs = outputs();
    for (std::size_t k = 0; k < outs.size(); ++k) {
      for (std::size_t i = 0; i < outs[k]->size(); ++i) {
        if (outs[k]->data()[i] != kGuard) {
          ADD_FAILURE() << out_names[k] << " byte " << i << " was written (0x" << std::hex
                        << int(outs[k]->data()[i]) << std::dec << ")";
          break;
        }
      }
    }
    const char* in_names[] = {"qkv",        "cos_sin",   "positions",     "slot_mapping",
                              "kv_indices", "kv_indptr", "batch_indices", "kv_positions"};
    const std::vector<const Bytes*> ins = inputs();
    for (std::size_t k = 0; k < ins.size(); ++k)
      EXPECT_EQ(0, std::memcmp(ins[k]->data(), snapshots_[k].data(), ins[k]->size()))
          << "input " << in_names[k] << " was modified";
  }

  // The core assertion of every bad-input test. Returns the validate() result
  // so that a test can print it.
  Result ExpectRejected(const Arguments& a, Status want,
                        std::initializer_list<const char*> substrings,
                        Backend backend = Backend::kHost) {
    const Result v = ropekv::validate(a, backend);
    EXPECT_TRUE(v.status == want) << "validate: got " << describe(v) << ", want "
                                  << ropekv::to_string(want);
    const void* nul = std::memchr(v.message, '\0', sizeof v.message);
    const std::size_t len =
        nul ? static_cast<std::size_t>(static_cast<const char*>(nul) - v.message)
            : sizeof v.message;
    EXPECT_LT(len, sizeof v.message) << "message not terminated";
    EXPECT_GT(len, 0u) << "empty message";
    for (const char* s : substrings)
      EXPECT_TRUE(contains(v.message, s))
          << "message \"" << v.message << "\" lacks \"" << s << "\"";
    const Result r = ropekv::run(a, backend);
    EXPECT_TRUE(r.status == want) << "run: got " << describe(r) << ", want "
                                  << ropekv::to_string(want);
    EXPECT_STREQ(r.message, v.message) << "run and validate disagree";
    ExpectNothingWritten();
    return v;
  }

  // A valid call: validate and run succeed.
  void ExpectValidAndRuns(const Arguments& a) {
    const Result v = ropekv::validate(a, Backend::kHost);
    EXPECT_TRUE(v.ok()) << "validate: " << describe(v);
    const Result r = ropekv::run(a, Backend::kHost);
    EXPECT_TRUE(r.ok()) << "run: " << describe(r);
  }

  // q output of every token: both views of the split query output.
  void ExpectQOutWritten(const Arguments& a) {
    std::vector<bool> mark(q_out_.size(), false);
    mark_heads(q_out_, a.q_rope_out, mark);
    if (a.q_nope_out.present()) mark_heads(q_out_, a.q_nope_out, mark);
    expect_footprint(q_out_, "q_out", mark);
  }

  // A misaligned (by `bytes`) copy of a view's data pointer.
  static void* shifted(void* p, std::ptrdiff_t bytes) {
    return static_cast<unsigned char*>(p) + bytes;
  }

  Bytes qkv_, cos_, positions_, slots_, kv_indices_, kv_indptr_, batch_indices_, kv_positions_;
  Bytes q_out_, k_cache_, v_cache_, spare_;
  std::vector<std::vector<unsigned char>> snapshots_;
};

// ======================================================= valid calls

TEST_F(Validate, BaselineIsValid) {
  const Arguments a = Baseline();
  ExpectValidAndRuns(a);
  // run() really writes (so "wrote nothing" below means something), and only
  // where the views say.
  ExpectQOutWritten(a);
  std::vector<bool> km(k_cache_.size(), false), vm(v_cache_.size(), false);
  mark_cache(k_cache_, a.k_cache_rope, kSlots, kNnz, km);
  mark_cache(k_cache_, a.k_cache_nope, kSlots, kNnz, km);
  mark_cache(v_cache_, a.v_cache, kSlots, kNnz, vm);
  expect_footprint(k_cache_, "k_cache", km);
  expect_footprint(v_cache_, "v_cache", vm);
}

TEST_F(Validate, PageTableBaselineIsValid) {
  const Arguments a = PageTableBaseline();
  ExpectValidAndRuns(a);
  std::vector<bool> km(k_cache_.size(), false), vm(v_cache_.size(), false);
  mark_cache(k_cache_, a.k_cache_rope, kPageTableSlots, kNnz, km);
  mark_cache(k_cache_, a.k_cache_nope, kPageTableSlots, kNnz, km);
  mark_cache(v_cache_, a.v_cache, kPageTableSlots, kNnz, vm);
  expect_footprint(k_cache_, "k_cache", km);
  expect_footprint(v_cache_, "v_cache", vm);
}

TEST_F(Validate, MlaBaselineIsValid) {
  const Arguments a = MlaBaseline();
  ExpectValidAndRuns(a);
  std::vector<bool> km(k_cache_.size(), false);
  mark_cache(k_cache_, a.k_cache_rope, kSlots, kNnz, km);
  mark_cache(k_cache_, a.k_cache_nope, kSlots, kNnz, km);
  expect_footprint(k_cache_, "k_cache", km);
  for (std::size_t i = 0; i < v_cache_.size(); ++i)
    ASSERT_EQ(v_cache_.data()[i], kGuard) << "MLA wrote the unused V buffer at " << i;
}

TEST_F(Validate, NnzZeroIsNoOp) {
  Arguments a = Baseline();
  for (TensorView* v : {&a.q_rope, &a.q_nope, &a.k_rope, &a.k_nope, &a.v, &a.q_rope_out,
                        &a.q_nope_out, &a.positions, &a.cache_index.slot_mapping})
    v->extent[0] = 0;
  ExpectValidAndRuns(a);
  ExpectNothingWritten();
}

TEST_F(Validate, NnzZeroAcceptsNullTokenData) {
  Arguments a = Baseline();
  for (TensorView* v : {&a.q_rope, &a.q_nope, &a.k_rope, &a.k_nope, &a.v, &a.q_rope_out,
                        &a.q_nope_out, &a.positions, &a.cache_index.slot_mapping}) {
    v->extent[0] = 0;
    v->data = nullptr;
  }
  ExpectValidAndRuns(a);
  ExpectNothingWritten();
}

TEST_F(Validate, ValidLayoutNhdNotOverlapping) {
  Arguments a = Baseline();
  const ropekv::KvCacheViews c = ropekv::nhd_kv_cache(
      k_cache_.data(), v_cache_.data(), DType::kFloat8E4M3FN, kPages, kPageSize, kHk, kD, kR);
  a.k_cache_rope = c.k_rope;
  a.k_cache_nope = c.k_nope;
  a.v_cache = c.v;
  ExpectValidAndRuns(a);
  std::vector<bool> km(k_cache_.size(), false), vm(v_cache_.size(), false);
  mark_cache(k_cache_, c.k_rope, kSlots, kNnz, km);
  mark_cache(k_cache_, c.k_nope, kSlots, kNnz, km);
  mark_cache(v_cache_, c.v, kSlots, kNnz, vm);
  expect_footprint(k_cache_, "k_cache", km);
  expect_footprint(v_cache_, "v_cache", vm);
}

TEST_F(Validate, ValidLayoutHndNotOverlapping) {
  Arguments a = Baseline();
  const ropekv::KvCacheViews c = ropekv::hnd_kv_cache(
      k_cache_.data(), v_cache_.data(), DType::kFloat8E4M3FN, kPages, kPageSize, kHk, kD, kR);
  a.k_cache_rope = c.k_rope;
  a.k_cache_nope = c.k_nope;
  a.v_cache = c.v;
  ExpectValidAndRuns(a);
  std::vector<bool> km(k_cache_.size(), false), vm(v_cache_.size(), false);
  mark_cache(k_cache_, c.k_rope, kSlots, kNnz, km);
  mark_cache(k_cache_, c.k_nope, kSlots, kNnz, km);
  mark_cache(v_cache_, c.v, kSlots, kNnz, vm);
  expect_footprint(k_cache_, "k_cache", km);
  expect_footprint(v_cache_, "v_cache", vm);
}

TEST_F(Validate, ValidLayoutStackedPageMajorNotOverlapping) {
  Arguments a = Baseline();
  const ropekv::KvCacheViews c =
      ropekv::stacked_kv_cache(spare_.data(), ropekv::StackOrder::kPageMajor, DType::kFloat8E4M3FN,
                               kPages, kPageSize, kHk, kD, kR);
  a.k_cache_rope = c.k_rope;
  a.k_cache_nope = c.k_nope;
  a.v_cache = c.v;
  ExpectValidAndRuns(a);
  std::vector<bool> m(spare_.size(), false);
  mark_cache(spare_, c.k_rope, kSlots, kNnz, m);
  mark_cache(spare_, c.k_nope, kSlots, kNnz, m);
  mark_cache(spare_, c.v, kSlots, kNnz, m);
  expect_footprint(spare_, "stacked cache [P, 2, ps, Hk, D]", m);
}

TEST_F(Validate, ValidLayoutStackedKvMajorNotOverlapping) {
  Arguments a = Baseline();
  const ropekv::KvCacheViews c =
      ropekv::stacked_kv_cache(spare_.data(), ropekv::StackOrder::kKvMajor, DType::kFloat8E4M3FN,
                               kPages, kPageSize, kHk, kD, kR);
  a.k_cache_rope = c.k_rope;
  a.k_cache_nope = c.k_nope;
  a.v_cache = c.v;
  ExpectValidAndRuns(a);
  std::vector<bool> m(spare_.size(), false);
  mark_cache(spare_, c.k_rope, kSlots, kNnz, m);
  mark_cache(spare_, c.k_nope, kSlots, kNnz, m);
  mark_cache(spare_, c.v, kSlots, kNnz, m);
  expect_footprint(spare_, "stacked cache [2, P, ps, Hk, D]", m);
}

TEST_F(Validate, ValidLayoutMlaSingleBufferNotOverlapping) {
  // vLLM: one buffer [P, ps, latent + rope], entry = [latent (N) | rope (R)].
  Arguments a = MlaBaseline();
  const ropekv::KvCacheViews c =
      ropekv::mla_cache_single(spare_.data(), DType::kFloat8E4M3FN, kPages, kPageSize, kN, kR);
  a.k_cache_rope = c.k_rope;
  a.k_cache_nope = c.k_nope;
  EXPECT_FALSE(c.v.present());
  ExpectValidAndRuns(a);
  std::vector<bool> m(spare_.size(), false);
  mark_cache(spare_, c.k_rope, kSlots, kNnz, m);
  mark_cache(spare_, c.k_nope, kSlots, kNnz, m);
  expect_footprint(spare_, "MLA cache [P, ps, latent | rope]", m);
}

TEST_F(Validate, ValidLayoutMlaSplitNotOverlapping) {
  // FlashInfer: ckv [P, ps, latent] and kpe [P, ps, rope] in two buffers.
  Arguments a = MlaBaseline();
  const ropekv::KvCacheViews c = ropekv::mla_cache_split(
      k_cache_.data(), v_cache_.data(), DType::kFloat8E4M3FN, kPages, kPageSize, kN, kR);
  a.k_cache_rope = c.k_rope;
  a.k_cache_nope = c.k_nope;
  ExpectValidAndRuns(a);
  std::vector<bool> km(k_cache_.size(), false), vm(v_cache_.size(), false);
  mark_cache(k_cache_, c.k_nope, kSlots, kNnz, km);
  mark_cache(v_cache_, c.k_rope, kSlots, kNnz, vm);
  expect_footprint(k_cache_, "ckv", km);
  expect_footprint(v_cache_, "kpe", vm);
}

TEST_F(Validate, ValidLayoutQOutSplitNotOverlapping) {
  // One contiguous [nnz, Hq, D] query output, split into [.., R] and [.., N]
  // views with the same strides: they interleave and tile the tensor.
  Arguments a = Baseline();
  const ropekv::HeadViews qo =
      ropekv::split_heads(q_out_.data(), DType::kFloat8E4M3FN, kNnz, kHq, kD, kR);
  a.q_rope_out = qo.rope;
  a.q_nope_out = qo.nope;
  ExpectValidAndRuns(a);
  // The two views tile the whole [nnz, Hq, D] tensor.
  std::vector<bool> mark(q_out_.size(), false);
  for (std::size_t i = 0; i < static_cast<std::size_t>(kNnz * kHq * kD); ++i) mark[i] = true;
  expect_footprint(q_out_, "q_out [nnz, Hq, D]", mark);
  ExpectQOutWritten(a);
}

TEST_F(Validate, ErrorStringsDistinct) {
  std::set<std::string> seen;
  const int last = static_cast<int>(Status::kErrorLaunchFailed);
  for (int s = 0; s <= last; ++s) {
    const char* name = ropekv::to_string(static_cast<Status>(s));
    ASSERT_NE(name, nullptr) << s;
    EXPECT_GT(std::strlen(name), 0u) << s;
    EXPECT_TRUE(seen.insert(name).second) << "status " << s << " repeats \"" << name << "\"";
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(last + 1));
  // Out of range: still a string, distinct from every real one.
  const char* bad = ropekv::to_string(static_cast<Status>(last + 7));
  ASSERT_NE(bad, nullptr);
  EXPECT_EQ(seen.count(bad), 0u);
}

TEST_F(Validate, ExampleMessages) {
  Arguments a = Baseline();
  a.k_cache_rope.stride[3] = 2;
  const Result r1 = ropekv::validate(a, Backend::kHost);
  a = Baseline();
  a.q_rope_out.data = k_cache_.data();
  const Result r2 = ropekv::validate(a, Backend::kHost);
  EXPECT_FALSE(r1.ok());
  EXPECT_FALSE(r2.ok());
  std::cout << "[ example  ] " << ropekv::to_string(r1.status) << ": " << r1.message << "\n"
            << "[ example  ] " << ropekv::to_string(r2.status) << ": " << r2.message << "\n";
  RecordProperty("example_stride", r1.message);
  RecordProperty("example_overlap", r2.message);
}

// ======================================================= null pointers

TEST_F(Validate, NullQRopeData) {
  Arguments a = Baseline();
  a.q_rope.data = nullptr;
  ExpectRejected(a, Status::kErrorNullPointer, {"q_rope.data", "must not be null"});
}

TEST_F(Validate, NullQNopeData) {
  Arguments a = Baseline();
  a.q_nope.data = nullptr;
  ExpectRejected(a, Status::kErrorNullPointer, {"q_nope.data", "must not be null"});
}

TEST_F(Validate, NullKRopeData) {
  Arguments a = Baseline();
  a.k_rope.data = nullptr;
  ExpectRejected(a, Status::kErrorNullPointer, {"k_rope.data", "must not be null"});
}

TEST_F(Validate, NullVData) {
  Arguments a = Baseline();
  a.v.data = nullptr;
  ExpectRejected(a, Status::kErrorNullPointer, {"v.data", "must not be null"});
}

TEST_F(Validate, NullQRopeOutData) {
  Arguments a = Baseline();
  a.q_rope_out.data = nullptr;
  ExpectRejected(a, Status::kErrorNullPointer, {"q_rope_out.data", "must not be null"});
}

TEST_F(Validate, NullKCacheRopeData) {
  Arguments a = Baseline();
  a.k_cache_rope.data = nullptr;
  ExpectRejected(a, Status::kErrorNullPointer, {"k_cache_rope.data", "must not be null"});
}

TEST_F(Validate, NullKCacheNopeData) {
  Arguments a = Baseline();
  a.k_cache_nope.data = nullptr;
  ExpectRejected(a, Status::kErrorNullPointer, {"k_cache_nope.data", "must not be null"});
}

TEST_F(Validate, NullVCacheData) {
  Arguments a = Baseline();
  a.v_cache.data = nullptr;
  ExpectRejected(a, Status::kErrorNullPointer, {"v_cache.data", "must not be null"});
}

TEST_F(Validate, NullCosSinCacheData) {
  Arguments a = Baseline();
  a.cos_sin_cache.data = nullptr;
  ExpectRejected(a, Status::kErrorNullPointer, {"cos_sin_cache.data", "must not be null"});
}

TEST_F(Validate, NullPositionsData) {
  Arguments a = Baseline();
  a.positions.data = nullptr;
  ExpectRejected(a, Status::kErrorNullPointer, {"positions.data", "must not be null"});
}

TEST_F(Validate, NullSlotMappingData) {
  Arguments a = Baseline();
  a.cache_index.slot_mapping.data = nullptr;
  ExpectRejected(a, Status::kErrorNullPointer,
                 {"cache_index.slot_mapping.data", "must not be null"});
}

TEST_F(Validate, NullKvIndicesData) {
  Arguments a = PageTableBaseline();
  a.cache_index.kv_indices.data = nullptr;
  ExpectRejected(a, Status::kErrorNullPointer, {"cache_index.kv_indices.data", "must not be null"});
}

// ======================================================= dtypes

TEST_F(Validate, UnsupportedInputDtype) {
  Arguments a = Baseline();
  a.q_rope.dtype = DType::kFloat8E4M3FN;  // FP8 is an output format only
  ExpectRejected(a, Status::kErrorUnsupportedDType,
                 {"q_rope.dtype", "fp32, fp16 or bf16", "got e4m3fn"});
}

TEST_F(Validate, UnsetDtype) {
  Arguments a = Baseline();
  a.k_cache_nope.dtype = DType::kInvalid;
  ExpectRejected(a, Status::kErrorUnsupportedDType, {"k_cache_nope.dtype", "must be set"});
}

TEST_F(Validate, MixedInputDtypes) {
  Arguments a = Baseline();
  a.k_rope.dtype = DType::kFloat16;
  ExpectRejected(a, Status::kErrorUnsupportedDType,
                 {"k_rope.dtype", "must equal q_rope.dtype", "got fp16"});
}

TEST_F(Validate, MixedInputDtypesValue) {
  Arguments a = Baseline();
  a.v.dtype = DType::kFloat32;
  ExpectRejected(a, Status::kErrorUnsupportedDType,
                 {"v.dtype", "must equal q_rope.dtype", "got fp32"});
}

TEST_F(Validate, QOutDtypeUnsupported) {
  Arguments a = Baseline();
  a.q_rope_out.dtype = DType::kInt32;
  ExpectRejected(a, Status::kErrorUnsupportedDType, {"q_rope_out.dtype", "got int32"});
}

TEST_F(Validate, QNopeOutDtypeMismatch) {
  Arguments a = Baseline();
  a.q_nope_out.dtype = DType::kFloat8E5M2;
  ExpectRejected(a, Status::kErrorUnsupportedDType,
                 {"q_nope_out.dtype", "must equal q_rope_out.dtype", "got e5m2"});
}

TEST_F(Validate, CacheDtypeUnsupported) {
  Arguments a = Baseline();
  a.k_cache_rope.dtype = DType::kInt64;
  ExpectRejected(a, Status::kErrorUnsupportedDType, {"k_cache_rope.dtype", "got int64"});
}

TEST_F(Validate, MixedCacheDtypes) {
  Arguments a = Baseline();
  a.v_cache.dtype = DType::kFloat8E5M2;
  ExpectRejected(a, Status::kErrorUnsupportedDType,
                 {"v_cache.dtype", "must equal k_cache_rope.dtype", "got e5m2"});
}

TEST_F(Validate, CosTableDtype) {
  // fp16 table with bf16 inputs: neither fp32 nor the input dtype.
  Arguments a = Baseline();
  a.cos_sin_cache.dtype = DType::kFloat16;
  ExpectRejected(a, Status::kErrorUnsupportedDType,
                 {"cos_sin_cache.dtype", "fp32 or the input dtype", "got fp16"});
}

TEST_F(Validate, PositionsDtypeFloat) {
  Arguments a = Baseline();
  a.positions.dtype = DType::kFloat32;
  ExpectRejected(a, Status::kErrorUnsupportedDType,
                 {"positions.dtype", "int32 or int64", "got fp32"});
}

TEST_F(Validate, SlotMappingDtypeFloat) {
  Arguments a = Baseline();
  a.cache_index.slot_mapping.dtype = DType::kFloat32;
  ExpectRejected(a, Status::kErrorUnsupportedDType,
                 {"cache_index.slot_mapping.dtype", "int32 or int64"});
}

TEST_F(Validate, KvIndptrDtypeFloat) {
  Arguments a = PageTableBaseline();
  a.cache_index.kv_indptr.dtype = DType::kFloat32;
  ExpectRejected(a, Status::kErrorUnsupportedDType,
                 {"cache_index.kv_indptr.dtype", "int32 or int64"});
}

// ======================================================= ranks

TEST_F(Validate, WrongRankQRope) {
  Arguments a = Baseline();
  a.q_rope.rank = 2;
  ExpectRejected(a, Status::kErrorInvalidRank, {"q_rope", "must have rank 3", "got 2"});
}

TEST_F(Validate, WrongRankKCacheRope) {
  Arguments a = Baseline();
  a.k_cache_rope.rank = 3;
  ExpectRejected(a, Status::kErrorInvalidRank, {"k_cache_rope", "must have rank 4", "got 3"});
}

TEST_F(Validate, WrongRankCosSinCache) {
  Arguments a = Baseline();
  a.cos_sin_cache.rank = 1;
  ExpectRejected(a, Status::kErrorInvalidRank, {"cos_sin_cache", "must have rank 2", "got 1"});
}

TEST_F(Validate, WrongRankPositions) {
  Arguments a = Baseline();
  a.positions.rank = 2;
  a.positions.extent[1] = 1;
  a.positions.stride[1] = 1;
  ExpectRejected(a, Status::kErrorInvalidRank, {"positions", "must have rank 1", "got 2"});
}

TEST_F(Validate, WrongRankAboveFour) {
  Arguments a = Baseline();
  a.k_cache_rope.rank = 5;
  ExpectRejected(a, Status::kErrorInvalidRank, {"k_cache_rope", "must have rank 4", "got 5"});
}

TEST_F(Validate, NopePartiallyAbsent) {
  // N > 0 is given by q_nope, k_nope, q_nope_out and k_cache_nope together;
  // leaving one of them out is a rank error, not a silent N = 0.
  Arguments a = Baseline();
  a.q_nope_out = TensorView{};
  ExpectRejected(a, Status::kErrorInvalidRank, {"q_nope_out", "must have rank 3", "got 0"});
}

TEST_F(Validate, GqaWithoutV) {
  Arguments a = Baseline();
  a.v = TensorView{};
  ExpectRejected(a, Status::kErrorInvalidRank, {"v must have rank 3", "got 0"});
}

TEST_F(Validate, GqaWithoutVCache) {
  Arguments a = Baseline();
  a.v_cache = TensorView{};
  ExpectRejected(a, Status::kErrorInvalidRank, {"v_cache must have rank 4", "got 0"});
}

// ======================================================= strides, contiguity

TEST_F(Validate, KCacheLastDimStrideNot1) {
  Arguments a = Baseline();
  a.k_cache_rope.stride[3] = 2;
  ExpectRejected(a, Status::kErrorNonContiguous, {"k_cache_rope.stride[3]", "must be 1", "got 2"});
}

TEST_F(Validate, QRopeLastDimStrideNot1) {
  Arguments a = Baseline();
  a.q_rope.stride[2] = 2;
  ExpectRejected(a, Status::kErrorNonContiguous, {"q_rope.stride[2]", "must be 1", "got 2"});
}

TEST_F(Validate, QNopeOutLastDimStrideZero) {
  Arguments a = Baseline();
  a.q_nope_out.stride[2] = 0;
  ExpectRejected(a, Status::kErrorNonContiguous, {"q_nope_out.stride[2]", "must be 1", "got 0"});
}

TEST_F(Validate, CosSinLastDimStrideNot1) {
  Arguments a = Baseline();
  a.cos_sin_cache.stride[1] = 2;
  ExpectRejected(a, Status::kErrorNonContiguous, {"cos_sin_cache.stride[1]", "must be 1"});
}

TEST_F(Validate, NegativeStride) {
  Arguments a = Baseline();
  a.k_rope.stride[0] = -kQkvRow;
  ExpectRejected(a, Status::kErrorInvalidStride, {"k_rope.stride[0]", "must be >= 0", "got -100"});
}

TEST_F(Validate, NegativeStrideCache) {
  Arguments a = Baseline();
  a.v_cache.stride[1] = -1;
  ExpectRejected(a, Status::kErrorInvalidStride, {"v_cache.stride[1]", "must be >= 0", "got -1"});
}

TEST_F(Validate, NegativeExtent) {
  Arguments a = Baseline();
  a.k_cache_nope.extent[0] = -1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"k_cache_nope.extent[0]", "must be >= 0", "got -1"});
}

// ======================================================= spans (64-bit overflow)

TEST_F(Validate, SpanOverflowStride) {
  // 3 tokens 2^62 elements apart: the view spans more than 2^63 bytes.
  Arguments a = Baseline();
  a.q_nope.stride[0] = std::int64_t(1) << 62;
  ExpectRejected(a, Status::kErrorInvalidStride, {"q_nope", "less than 2^63 bytes"});
}

TEST_F(Validate, SpanOverflowExtent) {
  // 2^62 pages of a contiguous cache: extent x stride does not fit in 64 bits.
  Arguments a = Baseline();
  a.v_cache.extent[0] = std::int64_t(1) << 62;
  ExpectRejected(a, Status::kErrorInvalidStride, {"v_cache", "less than 2^63 bytes"});
}

TEST_F(Validate, SpanOverflowElementSize) {
  // The span in elements fits, in bytes (x 4) it does not.
  Arguments a = Baseline();
  const std::int64_t ext[2] = {3, kR}, str[2] = {std::int64_t(1) << 61, 1};
  a.cos_sin_cache = ropekv::make_strided(cos_.data(), DType::kFloat32, 2, ext, str);
  ExpectRejected(a, Status::kErrorInvalidStride, {"cos_sin_cache", "less than 2^63 bytes"});
}

TEST_F(Validate, ViewEndsPastAddressSpace) {
  Arguments a = Baseline();
  a.positions.data = reinterpret_cast<void*>(~std::uintptr_t(0) - 15);  // 8-byte aligned
  ExpectRejected(a, Status::kErrorInvalidStride, {"positions", "within the address space"});
}

TEST_F(Validate, NumelSaturates) {
  TensorView v = Baseline().k_rope;
  EXPECT_EQ(v.numel(), kNnz * kHk * kR);
  v.extent[0] = std::int64_t(1) << 62;
  EXPECT_EQ(v.numel(), std::numeric_limits<std::int64_t>::max());
  v.extent[1] = 0;
  EXPECT_EQ(v.numel(), 0);
  v.extent[1] = -1;
  EXPECT_EQ(v.numel(), -1);
  v.rank = 5;
  EXPECT_EQ(v.numel(), -1);
}

TEST_F(Validate, ExtentOneStridesIgnoredByOverlapCheck) {
  // A stride on a dimension of extent 1 is never applied: a single-head
  // cache's rotary view with head stride 2 (its non-rotary view: D) is as
  // disjoint from the non-rotary view as with equal head strides.
  Arguments a = MlaBaseline();
  a.k_cache_rope.stride[2] = 2;
  a.k_cache_nope.stride[2] = 123457;
  ExpectValidAndRuns(a);
  std::vector<bool> km(k_cache_.size(), false);
  mark_cache(k_cache_, a.k_cache_rope, kSlots, kNnz, km);
  mark_cache(k_cache_, a.k_cache_nope, kSlots, kNnz, km);
  expect_footprint(k_cache_, "k_cache", km);
}

// ======================================================= alignment

TEST_F(Validate, MisalignedBf16Pointer) {
  Arguments a = Baseline();
  a.q_rope.data = shifted(a.q_rope.data, 1);
  ExpectRejected(a, Status::kErrorMisaligned, {"q_rope.data", "aligned", "2 bytes"});
}

TEST_F(Validate, MisalignedInt64Positions) {
  Arguments a = Baseline();
  a.positions.data = shifted(a.positions.data, 4);  // the buffer has 8 spare bytes
  ExpectRejected(a, Status::kErrorMisaligned, {"positions.data", "aligned", "8 bytes"});
}

TEST_F(Validate, MisalignedFp32CosTable) {
  Arguments a = Baseline();
  a.cos_sin_cache.data = shifted(a.cos_sin_cache.data, 2);
  ExpectRejected(a, Status::kErrorMisaligned, {"cos_sin_cache.data", "aligned", "4 bytes"});
}

TEST_F(Validate, MisalignedDeviceScalePointer) {
  Arguments a = Baseline();
  a.k_scale = Scale::on_device(reinterpret_cast<const float*>(spare_.data() + 2));
  ExpectRejected(a, Status::kErrorMisaligned, {"k_scale.device", "4-byte aligned"});
}

TEST_F(Validate, MisalignedDeviceMultiplierPointer) {
  Arguments a = Baseline();
  a.q_scale = Scale::on_device_multiplier(reinterpret_cast<const float*>(spare_.data() + 1));
  ExpectRejected(a, Status::kErrorMisaligned, {"q_scale.device", "4-byte aligned"});
}

TEST_F(Validate, MisalignedSkippedCounter) {
  Arguments a = Baseline();
  a.checked.enabled = true;
  a.checked.skipped_tokens = reinterpret_cast<unsigned long long*>(spare_.data() + 4);
  ExpectRejected(a, Status::kErrorMisaligned, {"checked.skipped_tokens", "8-byte aligned"});
}

// ======================================================= rotary dim, cos/sin

TEST_F(Validate, RotaryDimOdd) {
  Arguments a = Baseline();
  a.q_rope.extent[2] = kR - 1;
  ExpectRejected(a, Status::kErrorInvalidRotaryDim,
                 {"rotary dim R", "q_rope.extent[2]", "even and > 0", "got 7"});
}

TEST_F(Validate, RotaryDimZero) {
  Arguments a = Baseline();
  a.q_rope.extent[2] = 0;
  ExpectRejected(a, Status::kErrorInvalidRotaryDim,
                 {"rotary dim R", "q_rope.extent[2]", "even and > 0", "got 0"});
}

TEST_F(Validate, CosSinWidthMismatch) {
  Arguments a = Baseline();
  a.cos_sin_cache.extent[1] = kR / 2;  // a table holding cos only
  a.cos_sin_cache.stride[0] = kR / 2;
  ExpectRejected(a, Status::kErrorCosSinMismatch,
                 {"cos_sin_cache.extent[1]", "must equal the rotary dim R (8)", "got 4"});
}

TEST_F(Validate, CosSinEmpty) {
  Arguments a = Baseline();
  a.cos_sin_cache.extent[0] = 0;
  ExpectRejected(a, Status::kErrorCosSinMismatch,
                 {"cos_sin_cache.extent[0]", "max_pos", "must be > 0", "got 0"});
}

// ======================================================= extents: nnz

TEST_F(Validate, NnzMismatchKRope) {
  Arguments a = Baseline();
  a.k_rope.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"k_rope.extent[0]", "must equal nnz (3)", "got 2"});
}

TEST_F(Validate, NnzMismatchQNope) {
  Arguments a = Baseline();
  a.q_nope.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"q_nope.extent[0]", "must equal nnz (3)"});
}

TEST_F(Validate, NnzMismatchV) {
  Arguments a = Baseline();
  a.v.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"v.extent[0]", "must equal nnz (3)"});
}

TEST_F(Validate, NnzMismatchQRopeOut) {
  Arguments a = Baseline();
  a.q_rope_out.extent[0] = kNnz + 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"q_rope_out.extent[0]", "must equal nnz (3)", "got 4"});
}

TEST_F(Validate, NnzMismatchPositions) {
  Arguments a = Baseline();
  a.positions.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"positions.extent[0]", "must equal nnz (3)"});
}

TEST_F(Validate, NnzMismatchSlotMapping) {
  Arguments a = Baseline();
  a.cache_index.slot_mapping.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"cache_index.slot_mapping.extent[0]", "must equal nnz (3)"});
}

// ======================================================= extents: heads

TEST_F(Validate, HqZero) {
  Arguments a = Baseline();
  a.q_rope.extent[1] = 0;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"q_rope.extent[1]", "Hq", "must be > 0"});
}

TEST_F(Validate, HqMismatchQRopeOut) {
  Arguments a = Baseline();
  a.q_rope_out.extent[1] = kHq - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"q_rope_out.extent[1]", "must equal Hq (4)", "got 3"});
}

TEST_F(Validate, HqMismatchQNope) {
  Arguments a = Baseline();
  a.q_nope.extent[1] = kHq - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"q_nope.extent[1]", "must equal Hq (4)"});
}

TEST_F(Validate, HqMismatchQNopeOut) {
  Arguments a = Baseline();
  a.q_nope_out.extent[1] = kHq - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"q_nope_out.extent[1]", "must equal Hq (4)"});
}

TEST_F(Validate, HkZero) {
  Arguments a = Baseline();
  a.k_rope.extent[1] = 0;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_rope.extent[1]", "Hk", "must be > 0"});
}

TEST_F(Validate, HkMismatchKNope) {
  Arguments a = Baseline();
  a.k_nope.extent[1] = kHk - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"k_nope.extent[1]", "must equal Hk (2)", "got 1"});
}

TEST_F(Validate, HkMismatchV) {
  Arguments a = Baseline();
  a.v.extent[1] = kHk - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"v.extent[1]", "must equal Hk (2)"});
}

TEST_F(Validate, HkMismatchKCacheRope) {
  Arguments a = Baseline();
  a.k_cache_rope.extent[2] = kHk - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_cache_rope.extent[2]", "must equal Hk (2)"});
}

TEST_F(Validate, HkMismatchKCacheNope) {
  Arguments a = Baseline();
  a.k_cache_nope.extent[2] = kHk - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_cache_nope.extent[2]", "must equal Hk (2)"});
}

TEST_F(Validate, HkMismatchVCache) {
  Arguments a = Baseline();
  a.v_cache.extent[2] = kHk - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"v_cache.extent[2]", "must equal Hk (2)"});
}

// ======================================================= extents: R, N, Dv

TEST_F(Validate, RMismatchKRope) {
  Arguments a = Baseline();
  a.k_rope.extent[2] = kR - 2;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_rope.extent[2]", "must equal R (8)", "got 6"});
}

TEST_F(Validate, RMismatchQRopeOut) {
  Arguments a = Baseline();
  a.q_rope_out.extent[2] = kR - 2;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"q_rope_out.extent[2]", "must equal R (8)"});
}

TEST_F(Validate, RMismatchKCacheRope) {
  Arguments a = Baseline();
  a.k_cache_rope.extent[3] = kR - 2;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_cache_rope.extent[3]", "must equal R (8)"});
}

TEST_F(Validate, NMismatchKNope) {
  Arguments a = Baseline();
  a.k_nope.extent[2] = kN - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_nope.extent[2]", "must equal N", "got 3"});
}

TEST_F(Validate, NMismatchQNopeOut) {
  Arguments a = Baseline();
  a.q_nope_out.extent[2] = kN - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"q_nope_out.extent[2]", "must equal N"});
}

TEST_F(Validate, NMismatchKCacheNope) {
  Arguments a = Baseline();
  a.k_cache_nope.extent[3] = kN - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_cache_nope.extent[3]", "must equal N"});
}

TEST_F(Validate, DvZero) {
  Arguments a = Baseline();
  a.v.extent[2] = 0;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"v.extent[2]", "Dv", "must be > 0"});
}

TEST_F(Validate, DvMismatchVCache) {
  Arguments a = Baseline();
  a.v_cache.extent[3] = kD - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"v_cache.extent[3]", "must equal Dv", "(12)", "got 11"});
}

// ======================================================= extents: pages

TEST_F(Validate, PageSizeZero) {
  Arguments a = Baseline();
  a.k_cache_rope.extent[1] = 0;
  ExpectRejected(a, Status::kErrorInvalidPageSize,
                 {"page_size", "k_cache_rope.extent[1]", "must be > 0", "got 0"});
}

TEST_F(Validate, PageSizeNegative) {
  // The contract: "page_size <= 0" is its own rule; ropekv.hpp documents
  // kErrorInvalidPageSize as "page_size <= 0".
  Arguments a = Baseline();
  a.k_cache_rope.extent[1] = -kPageSize;
  ExpectRejected(a, Status::kErrorInvalidPageSize, {"page_size", "k_cache_rope.extent[1]", "-4"});
}

TEST_F(Validate, NumPagesZero) {
  Arguments a = Baseline();
  a.k_cache_rope.extent[0] = 0;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"num_pages", "k_cache_rope.extent[0]", "must be > 0", "got 0"});
}

TEST_F(Validate, PageSizeMismatchKCacheNope) {
  Arguments a = Baseline();
  a.k_cache_nope.extent[1] = kPageSize - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"k_cache_nope.extent[1]", "must equal page_size (4)", "got 3"});
}

TEST_F(Validate, PageSizeMismatchVCache) {
  Arguments a = Baseline();
  a.v_cache.extent[1] = kPageSize * 2;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"v_cache.extent[1]", "must equal page_size (4)", "got 8"});
}

TEST_F(Validate, NumPagesMismatchKCacheNope) {
  Arguments a = Baseline();
  a.k_cache_nope.extent[0] = kPages - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"k_cache_nope.extent[0]", "must equal num_pages (4)", "got 3"});
}

TEST_F(Validate, NumPagesMismatchVCache) {
  Arguments a = Baseline();
  a.v_cache.extent[0] = kPages - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"v_cache.extent[0]", "must equal num_pages (4)", "got 3"});
}

// ======================================================= MLA

TEST_F(Validate, MlaWithValue) {
  Arguments a = MlaBaseline();
  a.v = Baseline().v;
  a.v.extent[1] = 1;
  ExpectRejected(a, Status::kErrorInvalidArgument, {"v and v_cache", "absent", "kMla"});
}

TEST_F(Validate, MlaWithValueCache) {
  Arguments a = MlaBaseline();
  a.v_cache = Baseline().v_cache;
  a.v_cache.extent[2] = 1;
  ExpectRejected(a, Status::kErrorInvalidArgument, {"v_cache", "absent", "kMla"});
}

TEST_F(Validate, MlaHkNot1) {
  Arguments a = MlaBaseline();
  a.k_rope.extent[1] = kHk;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_rope.extent[1]", "Hk", "must be 1", "kMla"});
}

// ======================================================= page table

TEST_F(Validate, PageTableMissingKvIndptr) {
  Arguments a = PageTableBaseline();
  a.cache_index.kv_indptr = TensorView{};
  ExpectRejected(a, Status::kErrorInvalidRank,
                 {"cache_index.kv_indptr", "must have rank 1", "got 0"});
}

TEST_F(Validate, PageTableMissingBatchIndices) {
  Arguments a = PageTableBaseline();
  a.cache_index.batch_indices = TensorView{};
  ExpectRejected(a, Status::kErrorInvalidRank,
                 {"cache_index.batch_indices", "must have rank 1", "got 0"});
}

TEST_F(Validate, KvIndptrEmpty) {
  Arguments a = PageTableBaseline();
  a.cache_index.kv_indptr.extent[0] = 0;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"cache_index.kv_indptr.extent[0]", "batch + 1", "got 0"});
}

TEST_F(Validate, PageTableBatchIndicesNnzMismatch) {
  Arguments a = PageTableBaseline();
  a.cache_index.batch_indices.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"cache_index.batch_indices.extent[0]", "must equal nnz (3)"});
}

TEST_F(Validate, PageTableKvPositionsNnzMismatch) {
  Arguments a = PageTableBaseline();
  a.cache_index.kv_positions.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"cache_index.kv_positions.extent[0]", "must equal nnz (3)"});
}

TEST_F(Validate, PageTableFormWithOnlySlotMapping) {
  // Switching the form without giving the page-table arrays.
  Arguments a = Baseline();
  a.cache_index.form = Addressing::kPageTable;
  ExpectRejected(a, Status::kErrorInvalidRank,
                 {"cache_index.kv_indices", "must have rank 1", "got 0"});
}

// ======================================================= enum values

TEST_F(Validate, InvalidKind) {
  Arguments a = Baseline();
  a.kind = static_cast<AttentionKind>(7);
  ExpectRejected(a, Status::kErrorInvalidArgument, {"kind", "kGqa or kMla", "got 7"});
}

TEST_F(Validate, InvalidRopeStyle) {
  Arguments a = Baseline();
  a.rope_style = static_cast<RopeStyle>(-1);
  ExpectRejected(a, Status::kErrorInvalidArgument,
                 {"rope_style", "kNeox or kInterleaved", "got -1"});
}

TEST_F(Validate, InvalidAddressingForm) {
  Arguments a = Baseline();
  a.cache_index.form = static_cast<Addressing>(2);
  ExpectRejected(a, Status::kErrorInvalidArgument,
                 {"cache_index.form", "kSlotMapping or kPageTable", "got 2"});
}

TEST_F(Validate, InvalidBackend) {
  const Arguments a = Baseline();
  ExpectRejected(a, Status::kErrorInvalidArgument,
                 {"backend", "kAuto, kHost, kCuda or kHip", "got 9"}, static_cast<Backend>(9));
}

// ======================================================= backends

TEST_F(Validate, BackendNotCompiledCuda) {
  const Arguments a = Baseline();
#if ROPEKV_ENABLE_CUDA
  ASSERT_TRUE(ropekv::backend_compiled(Backend::kCuda));
  if (ropekv::backend_available(Backend::kCuda))
    GTEST_SKIP() << "a CUDA device is present: the no-device rule cannot be exercised here";
  // Validation needs no device (every rule runs); run() reports the missing one.
  const Result v = ropekv::validate(a, Backend::kCuda);
  EXPECT_TRUE(v.ok()) << "validate: " << describe(v);
  const Result r = ropekv::run(a, Backend::kCuda);
  EXPECT_TRUE(r.status == Status::kErrorNoDevice) << "run: " << describe(r);
  EXPECT_TRUE(contains(r.message, "backend cuda") && contains(r.message, "no device")) << r.message;
  ExpectNothingWritten();
#else
  EXPECT_FALSE(ropekv::backend_compiled(Backend::kCuda));
  EXPECT_FALSE(ropekv::backend_available(Backend::kCuda));
  ExpectRejected(a, Status::kErrorBackendNotCompiled,
                 {"backend cuda", "not compiled", "ROPEKV_ENABLE_CUDA"}, Backend::kCuda);
#endif
}

TEST_F(Validate, BackendNotCompiledHip) {
  const Arguments a = Baseline();
#if ROPEKV_ENABLE_HIP
  ASSERT_TRUE(ropekv::backend_compiled(Backend::kHip));
  if (ropekv::backend_available(Backend::kHip))
    GTEST_SKIP() << "a HIP device is present: the no-device rule cannot be exercised here";
  // Validation needs no device (every rule runs); run() reports the missing one.
  const Result v = ropekv::validate(a, Backend::kHip);
  EXPECT_TRUE(v.ok()) << "validate: " << describe(v);
  const Result r = ropekv::run(a, Backend::kHip);
  EXPECT_TRUE(r.status == Status::kErrorNoDevice) << "run: " << describe(r);
  EXPECT_TRUE(contains(r.message, "backend hip") && contains(r.message, "no device")) << r.message;
  ExpectNothingWritten();
#else
  EXPECT_FALSE(ropekv::backend_compiled(Backend::kHip));
  EXPECT_FALSE(ropekv::backend_available(Backend::kHip));
  ExpectRejected(a, Status::kErrorBackendNotCompiled,
                 {"backend hip", "not compiled", "ROPEKV_ENABLE_HIP"}, Backend::kHip);
#endif
}

// ======================================================= scales

TEST_F(Validate, NegativeHostScale) {
  Arguments a = Baseline();
  a.q_scale = Scale::host(-0.5f);
  ExpectRejected(a, Status::kErrorInvalidScale, {"q_scale", "positive and finite", "got -0.5"});
}

TEST_F(Validate, ZeroHostScale) {
  Arguments a = Baseline();
  a.k_scale = Scale::host(0.0f);
  ExpectRejected(a, Status::kErrorInvalidScale, {"k_scale", "positive and finite", "got 0"});
}

TEST_F(Validate, NanHostScale) {
  Arguments a = Baseline();
  a.v_scale = Scale::host(std::numeric_limits<float>::quiet_NaN());
  ExpectRejected(a, Status::kErrorInvalidScale, {"v_scale", "positive and finite", "nan"});
}

TEST_F(Validate, InfHostScale) {
  Arguments a = Baseline();
  a.k_scale = Scale::host(std::numeric_limits<float>::infinity());
  ExpectRejected(a, Status::kErrorInvalidScale, {"k_scale", "positive and finite", "inf"});
}

TEST_F(Validate, HostScalesTinyAndHugeAccepted) {
  // Every positive finite host scale is valid (the quantization step is IEEE
  // arithmetic for any scale), subnormal ones included.
  Arguments a = Baseline();
  a.q_scale = Scale::host(1e-30f);
  a.k_scale = Scale::host(std::numeric_limits<float>::denorm_min());
  a.v_scale = Scale::host(1e30f);
  ExpectValidAndRuns(a);
  a.q_scale = Scale::host_multiplier(std::numeric_limits<float>::max());
  a.k_scale = Scale::host_multiplier(std::numeric_limits<float>::denorm_min());
  ExpectValidAndRuns(a);
}

TEST_F(Validate, MultiplyingScalesValid) {
  Arguments a = Baseline();
  a.q_scale = Scale::host_multiplier(20.0f);
  // A device multiplier in the spare last row of the positions buffer.
  float* k_mul = reinterpret_cast<float*>(positions_.data() + kNnz * 8);
  *k_mul = 4.0f;
  a.k_scale = Scale::on_device_multiplier(k_mul);
  a.v_scale = Scale::host(2.0f);  // conventions may differ per scale
  ExpectValidAndRuns(a);
  ExpectQOutWritten(a);
}

TEST_F(Validate, InvalidScaleConvention) {
  Arguments a = Baseline();
  a.k_scale.convention = static_cast<ropekv::ScaleConvention>(7);
  ExpectRejected(a, Status::kErrorInvalidArgument,
                 {"k_scale.convention", "kDivide or kMultiply", "got 7"});
}

TEST_F(Validate, NegativeHostMultiplier) {
  Arguments a = Baseline();
  a.v_scale = Scale::host_multiplier(-4.0f);
  ExpectRejected(a, Status::kErrorInvalidScale, {"v_scale", "positive and finite", "got -4"});
}

TEST_F(Validate, ZeroHostMultiplier) {
  Arguments a = Baseline();
  a.q_scale = Scale::host_multiplier(0.0f);
  ExpectRejected(a, Status::kErrorInvalidScale, {"q_scale", "positive and finite", "got 0"});
}

TEST_F(Validate, InfHostMultiplier) {
  Arguments a = Baseline();
  a.k_scale = Scale::host_multiplier(std::numeric_limits<float>::infinity());
  ExpectRejected(a, Status::kErrorInvalidScale, {"k_scale", "positive and finite", "inf"});
}

TEST_F(Validate, MlaValueScaleNeitherReadNorValidated) {
  // MLA has no value: its scale may hold anything, even a wild pointer.
  Arguments a = MlaBaseline();
  a.v_scale = Scale::host(-1.0f);
  a.v_scale.convention = static_cast<ropekv::ScaleConvention>(9);
  ExpectValidAndRuns(a);
  a.v_scale = Scale::on_device(reinterpret_cast<const float*>(std::uintptr_t(0x13)));
  ExpectValidAndRuns(a);
}

TEST_F(Validate, HostScaleValidatedForBf16Output) {
  // Scales are ignored for bf16 outputs, but a host scale is still validated
  // (ropekv.hpp, Scale). The q_out buffer is large enough for bf16.
  Arguments a = Baseline();
  const ropekv::HeadViews qo =
      ropekv::split_heads(q_out_.data(), DType::kBFloat16, kNnz, kHq, kD, kR);
  a.q_rope_out = qo.rope;
  a.q_nope_out = qo.nope;
  ASSERT_TRUE(ropekv::validate(a, Backend::kHost).ok());
  a.q_scale = Scale::host(-1.0f);
  ExpectRejected(a, Status::kErrorInvalidScale, {"q_scale", "positive and finite"});
}

// ======================================================= overlaps

TEST_F(Validate, OverlappingQOutAndKCache) {
  Arguments a = Baseline();
  a.q_rope_out.data = k_cache_.data();
  ExpectRejected(a, Status::kErrorOverlap, {"q_rope_out", "k_cache_rope", "must not overlap"});
}

TEST_F(Validate, QRopeOutAliasesQNopeOut) {
  Arguments a = Baseline();
  a.q_nope_out.data = a.q_rope_out.data;
  ExpectRejected(a, Status::kErrorOverlap, {"q_rope_out", "q_nope_out", "must not overlap"});
}

TEST_F(Validate, VCacheAliasesKCache) {
  Arguments a = Baseline();
  a.v_cache.data = k_cache_.data();
  ExpectRejected(a, Status::kErrorOverlap, {"k_cache_rope", "v_cache", "must not overlap"});
}

TEST_F(Validate, QOutOverlapsInput) {
  // In-place query output: q_rope_out written over q_rope.
  Arguments a = Baseline();
  a.q_rope_out.data = a.q_rope.data;
  ExpectRejected(a, Status::kErrorOverlap,
                 {"output q_rope_out", "input q_rope", "must not overlap"});
}

TEST_F(Validate, CacheOverlapsCosTable) {
  Arguments a = Baseline();
  a.v_cache.data = cos_.data();
  ExpectRejected(a, Status::kErrorOverlap,
                 {"output v_cache", "input cos_sin_cache", "must not overlap"});
}

TEST_F(Validate, CacheOverlapsSlotMapping) {
  Arguments a = Baseline();
  a.cache_index.slot_mapping.data = shifted(k_cache_.data(), 8 * 40);
  ExpectRejected(a, Status::kErrorOverlap,
                 {"output k_cache_rope", "input cache_index.slot_mapping", "must not overlap"});
}

TEST_F(Validate, CacheSelfOverlap) {
  // Page stride 0: every page is the same memory.
  Arguments a = Baseline();
  a.k_cache_rope.stride[0] = 0;
  ExpectRejected(a, Status::kErrorOverlap, {"k_cache_rope", "must not overlap itself"});
}

TEST_F(Validate, CacheHeadsSelfOverlap) {
  // Head stride 1 < Dv: the heads of one entry share elements.
  Arguments a = Baseline();
  a.v_cache.stride[2] = 1;
  ExpectRejected(a, Status::kErrorOverlap, {"v_cache", "must not overlap itself"});
}

TEST_F(Validate, QOutSelfOverlap) {
  // Token stride 0: every token writes the same query rows.
  Arguments a = Baseline();
  a.q_nope_out.stride[0] = 0;
  ExpectRejected(a, Status::kErrorOverlap, {"q_nope_out", "must not overlap itself"});
}

TEST_F(Validate, SkippedCounterOverlapsCache) {
  // The checked-mode counter is written by the kernel: it is an output and
  // must not lie inside another output.
  Arguments a = Baseline();
  a.checked.enabled = true;
  a.checked.skipped_tokens = reinterpret_cast<unsigned long long*>(k_cache_.data() + 8);
  ExpectRejected(a, Status::kErrorOverlap, {"checked.skipped_tokens", "k_cache_rope", "overlap"});
}

TEST_F(Validate, DeviceScaleInsideOutput) {
  // A scale read by every thread while the query output is being written.
  Arguments a = Baseline();
  a.q_scale = Scale::on_device(reinterpret_cast<const float*>(q_out_.data() + 16));
  ExpectRejected(a, Status::kErrorOverlap, {"q_scale", "q_rope_out", "overlap"});
}

}  // namespace
