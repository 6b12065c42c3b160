// Validation tests (fixture: validate_fixture.hpp), the valid calls: the baselines,
// nnz = 0, every valid layout writing exactly its views, the status strings.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "ropekv/ropekv.hpp"
#include "validate_fixture.hpp"

namespace ropekv_test {
namespace validation {
namespace {

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

}  // namespace
}  // namespace validation
}  // namespace ropekv_test
