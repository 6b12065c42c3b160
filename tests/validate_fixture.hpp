// The Validate fixture and helpers of the validation-rule tests
// (test_validate_{valid,views,extents,call}.cpp).
//
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
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "baseline_call.hpp"
#include "oracle.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv_test {
namespace validation {

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

// Baseline shape and index values (baseline_call.hpp).
using baseline::kBatchIndices;
using baseline::kD;
using baseline::kHk;
using baseline::kHq;
using baseline::kKvIndices;
using baseline::kKvIndptr;
using baseline::kKvPositions;
using baseline::kMaxPos;
using baseline::kNnz;
using baseline::kPages;
using baseline::kPageSize;
using baseline::kPositions;
using baseline::kR;
using baseline::kSlots;
constexpr std::int64_t kN = kD - kR;
// The fused QKV rows are padded: (Hq + 2 * Hk) * D = 96 used of 100.
constexpr std::int64_t kQkvRow = 100;
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

inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even (finite inputs only)
  return static_cast<std::uint16_t>(u >> 16);
}

inline bool contains(const char* haystack, const char* needle) {
  return std::string(haystack).find(needle) != std::string::npos;
}

inline std::string describe(const Result& r) {
  return std::string(ropekv::to_string(r.status)) + " (" +
         std::to_string(static_cast<int>(r.status)) + "): \"" + r.message + "\"";
}

// Marks in `mark` the bytes of `buf` that a 4-d cache view addresses for the
// given slots (all heads, all elements of the last dim).
inline void mark_cache(const Bytes& buf, const TensorView& v, const std::int64_t* slots, int n,
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
inline void mark_heads(const Bytes& buf, const TensorView& v, std::vector<bool>& mark) {
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
inline void expect_footprint(const Bytes& buf, const char* name, const std::vector<bool>& mark) {
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
    ropekv_oracle::fill_rope_table(reinterpret_cast<float*>(cos_.data()), kMaxPos, kR);
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
  Arguments Baseline() { return baseline::slot_mapping_call(buffers()); }

  // The baseline addressed by page table (int32 index arrays) instead.
  Arguments PageTableBaseline() { return baseline::page_table_call(buffers()); }

  // The fixture's buffers as the baseline call takes them.
  baseline::Buffers buffers() {
    return baseline::buffers_at(qkv_.data(), DType::kBFloat16, kQkvRow, q_out_.data(),
                                k_cache_.data(), v_cache_.data(), cos_.data(), positions_.data(),
                                slots_.data(), kv_indices_.data(), kv_indptr_.data(),
                                batch_indices_.data(), kv_positions_.data());
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

}  // namespace validation
}  // namespace ropekv_test
