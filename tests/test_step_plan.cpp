// A prepared call's steps against the full path, below the public API: for
// random steps given as ropekv::Step (moving steps, where only pointers and
// the stream change, and steps with other sizes) and, in turn, as whole
// arguments, detail::lower_step accepts exactly what validate_arguments
// accepts, and an accepted step leaves plan.lowered equal, byte for byte,
// to detail::lower's lowering of the same arguments. Lowering reads no data:
// the calls' buffers are addresses only, nothing is run.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "argument_views.hpp"
#include "baseline_call.hpp"
#include "detail/lower.hpp"
#include "ropekv/ropekv.hpp"

namespace {

using ropekv::Arguments;
using ropekv::DType;
using ropekv::TensorView;
namespace detail = ropekv::detail;
namespace baseline = ropekv_test::baseline;

// Buffer k of a call at its own 4 KiB region (a call's buffers take at
// most 1 KiB): steps that move the regions by up to 2 KiB each make outputs
// overlap other buffers in some steps and not in others, and whether they
// do depends on the token count.
void* region(int k) { return reinterpret_cast<void*>(std::uintptr_t(k + 1) << 12); }

baseline::Buffers buffers(DType qkv_dtype) {
  return baseline::buffers_at(region(0), qkv_dtype, 0, region(1), region(2), region(3), region(4),
                              region(5), region(6), region(7), region(8), region(9), region(10));
}

struct Shape {
  std::string name;
  Arguments args;
};

std::vector<Shape> shapes() {
  using namespace ropekv;
  std::vector<Shape> s;
  s.push_back({"slot-mapping", baseline::slot_mapping_call(buffers(DType::kBFloat16))});
  s.push_back({"page-table", baseline::page_table_call(buffers(DType::kBFloat16))});
  {  // Device scales, the checked-mode counter, one stacked K/V buffer (interleaved outputs).
    Arguments a = baseline::slot_mapping_call(buffers(DType::kFloat16));
    a.q_scale = Scale::on_device(static_cast<const float*>(region(11)));
    a.k_scale = Scale::on_device_multiplier(static_cast<const float*>(region(12)));
    a.v_scale = Scale::on_device(static_cast<const float*>(region(13)));
    a.checked.enabled = true;
    a.checked.skipped_tokens = static_cast<unsigned long long*>(region(14));
    set_kv_cache(a, stacked_kv_cache(region(2), StackOrder::kPageMajor, DType::kFloat8E4M3FN,
                                     baseline::kPages, baseline::kPageSize, baseline::kHk,
                                     baseline::kD, baseline::kR));
    a.programmatic_dependent_launch = true;
    s.push_back({"device-scales-stacked", a});
  }
  {  // MLA: query [nnz, H, nope | rope] in and out, keys in one kv_a row, one cache buffer.
    constexpr std::int64_t kNnz = 5, kH = 4, kLatent = 16, kRope = 8, kPages = 3, kPs = 4;
    Arguments a;
    a.kind = AttentionKind::kMla;
    a.rope_style = RopeStyle::kInterleaved;
    const HeadViews q = mla_query_views(region(0), DType::kBFloat16, kNnz, kH, kLatent, kRope);
    a.q_rope = q.rope;
    a.q_nope = q.nope;
    char* kv_a = static_cast<char*>(region(1));
    const HeadViews k = mla_key_views(kv_a, kv_a + 2 * kLatent, DType::kBFloat16, kNnz, kLatent,
                                      kRope, kLatent + kRope, kLatent + kRope);
    a.k_rope = k.rope;
    a.k_nope = k.nope;
    set_query_output(a, mla_query_views(region(2), DType::kFloat8E4M3FN, kNnz, kH, kLatent, kRope));
    set_kv_cache(a, mla_cache_single(region(3), DType::kFloat8E4M3FN, kPages, kPs, kLatent, kRope));
    const std::int64_t cos_ext[2] = {64, kRope};
    a.cos_sin_cache = make_contiguous(region(4), DType::kFloat32, 2, cos_ext);
    a.positions = make_vector(region(5), DType::kInt32, kNnz);
    a.cache_index = slot_mapping_index(region(6), DType::kInt32, kNnz);
    a.k_scale = Scale::host(0.5f);
    s.push_back({"mla", a});
  }
  return s;
}

// `a` with every view whose extent 0 is the token count at n tokens.
Arguments with_tokens(Arguments a, std::int64_t n) {
  const std::int64_t nnz = a.q_rope.extent[0];
  TensorView* views[ropekv_test::kArgumentViews];
  ropekv_test::argument_views(a, views);
  for (TensorView* v : views)
    if (v->present() && v->extent[0] == nnz && v != &a.cache_index.kv_indices &&
        v != &a.cache_index.kv_indptr && v != &a.cos_sin_cache && v != &a.k_cache_rope &&
        v != &a.k_cache_nope && v != &a.v_cache)
      v->extent[0] = n;
  return a;
}

// A random step from `base` (the prepared arguments) at `*tokens` tokens:
// most move every buffer region by whole 16-byte units; some move one view alone
// (off its interleaving, by an element or by one byte: misaligned), set one
// view's data to another's or to null, or take another token count (kept
// for the steps after); the stream changes at random.
Arguments random_step(const Arguments& base, std::mt19937_64& rng, std::int64_t* tokens) {
  Arguments a = base;
  const std::uint64_t pick = rng() % 16;
  if (pick < 10) {  // every region moved, each on its own
    std::int64_t delta[16];
    for (std::int64_t& d : delta) d = std::int64_t(rng() % 512) * 16 - 4096;
    ropekv_test::rebase_pointers(a, [&](const void* p) -> const void* {
      if (p == nullptr) return p;
      const std::uintptr_t u = reinterpret_cast<std::uintptr_t>(p);
      return reinterpret_cast<const void*>(u + std::uintptr_t(delta[(u >> 12) % 16]));
    });
  }
  TensorView* views[ropekv_test::kArgumentViews];
  ropekv_test::argument_views(a, views);
  TensorView& one = *views[rng() % ropekv_test::kArgumentViews];
  if (one.present()) {
    char* d = static_cast<char*>(one.data);
    switch (pick) {
      case 10:
        one.data = d + std::int64_t(ropekv::size_of(one.dtype)) * (rng() % 2 ? 1 : -1);
        break;
      case 11: one.data = d + 1; break;
      case 12: one.data = views[rng() % ropekv_test::kArgumentViews]->data; break;
      case 13: one.data = nullptr; break;
      default: break;
    }
  }
  if (pick == 14) *tokens = std::int64_t(rng() % std::uint64_t(base.q_rope.extent[0] + 1));
  a = with_tokens(a, *tokens);
  if (pick == 15 && a.checked.skipped_tokens != nullptr)  // the counter moved by 4: misaligned
    a.checked.skipped_tokens = reinterpret_cast<unsigned long long*>(
        reinterpret_cast<char*>(a.checked.skipped_tokens) + 4 * (rng() % 3));
  if (rng() % 2) a.stream = reinterpret_cast<void*>(std::uintptr_t(rng() % 4) << 12);
  return a;
}

TEST(StepPlan, StepsLowerAsLowerAndAcceptWhatValidationAccepts) {
  for (const Shape& shape : shapes()) {
    SCOPED_TRACE(shape.name);
    const Arguments& base = shape.args;
    ASSERT_TRUE(detail::validate_arguments(base).ok()) << detail::validate_arguments(base).message;
    std::unique_ptr<detail::StepPlan, void (*)(detail::StepPlan*)> plan(detail::new_step_plan(),
                                                                        &detail::delete_step_plan);
    ASSERT_NE(plan, nullptr);
    detail::fill_step_plan(plan.get(), base);
    std::mt19937_64 rng(0x5eb1a7);
    int accepted = 0, rejected = 0, moving = 0;
    std::int64_t tokens = base.q_rope.extent[0], last_nnz = tokens;
    for (int i = 0; i < 4000; ++i) {
      SCOPED_TRACE("step " + std::to_string(i));
      // Every 7th step by whole arguments, a third of them with one per-token
      // view's extent 0 off the token count (no Step can say that: rejected).
      const bool whole = i % 7 == 3;
      Arguments b = random_step(base, rng, &tokens);
      if (whole && rng() % 3 == 0 && b.q_rope.extent[0] > 0) {
        TensorView* per_token[] = {&b.k_rope, &b.v, &b.q_rope_out, &b.positions};
        TensorView& t = *per_token[rng() % 4];
        if (t.present()) t.extent[0] -= 1;
      }
      const bool want = detail::validate_arguments(b).ok();
      const bool got =
          whole ? detail::lower_step(*plan, b) : detail::lower_step(*plan, ropekv::step_of(b));
      ASSERT_EQ(got, want) << detail::validate_arguments(b).message;
      if (!got) {
        ++rejected;
        continue;
      }
      ++accepted;
      moving += b.q_rope.extent[0] == last_nnz ? 1 : 0;
      last_nnz = b.q_rope.extent[0];
      detail::LaunchParams expect = plan->lowered;  // lower() assigns every field: padding kept
      ASSERT_TRUE(detail::lower(b, &expect).ok());
      ASSERT_EQ(std::memcmp(&expect, &plan->lowered, sizeof expect), 0)
          << "plan.lowered is not lower()'s lowering of the step";
    }
    // Both verdicts, and mostly moving steps (at every token count), were exercised.
    EXPECT_GT(accepted, 2000);
    EXPECT_GT(rejected, 300);
    EXPECT_GT(moving, 1500);
  }
}

// Two query outputs interleaved head by head whose token strides differ
// (48 and 50 codes): disjoint at one token, where the token dim takes no
// part, overlapping at two. Prepared at one token; a step at two tokens with
// the non-rotary part elsewhere passes; a moving step after it (two tokens)
// that puts the non-rotary part back where it was prepared must fail: the
// plan's verdict on the interleaved pair holds only at its prepared extents.
TEST(StepPlan, InterleavedPairKeepsItsVerdictOnlyAtItsPlannedExtents) {
  Arguments prepared = with_tokens(baseline::slot_mapping_call(buffers(DType::kBFloat16)), 1);
  prepared.q_nope_out.stride[0] = 50;
  ASSERT_TRUE(detail::validate_arguments(prepared).ok())
      << detail::validate_arguments(prepared).message;
  Arguments apart = with_tokens(prepared, 2);
  apart.q_nope_out.data = region(12);
  ASSERT_TRUE(detail::validate_arguments(apart).ok()) << detail::validate_arguments(apart).message;
  const Arguments back = with_tokens(prepared, 2);
  ASSERT_EQ(detail::validate_arguments(back).status, ropekv::Status::kErrorOverlap);

  std::unique_ptr<detail::StepPlan, void (*)(detail::StepPlan*)> plan(detail::new_step_plan(),
                                                                      &detail::delete_step_plan);
  ASSERT_NE(plan, nullptr);
  detail::fill_step_plan(plan.get(), prepared);
  EXPECT_TRUE(detail::lower_step(*plan, ropekv::step_of(apart)));
  EXPECT_FALSE(detail::lower_step(*plan, ropekv::step_of(back)));
}

}  // namespace
