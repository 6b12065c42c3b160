// PreparedCall on every backend (instantiated with the regression suite,
// regression_suite.hpp): a prepared call's steps, given as whole arguments
// or as their step fields (ropekv::Step), write exactly what run() writes,
// a bad step reports exactly what validate() reports and writes nothing,
// and a call with another shape is validated in full.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "regression_suite.hpp"
#include "ropekv/ropekv.hpp"
#include "test_calls.hpp"

namespace ropekv_test {
namespace {

using ropekv::Arguments;
using ropekv::PreparedCall;
using ropekv::Result;
using ropekv::TensorView;

// `a` with its first `n` tokens (n <= its nnz): extent 0 of every per-token view.
Arguments first_tokens(Arguments a, std::int64_t n) {
  for (TensorView* v : {&a.q_rope, &a.q_nope, &a.k_rope, &a.k_nope, &a.v, &a.q_rope_out,
                        &a.q_nope_out, &a.positions, &a.cache_index.slot_mapping})
    if (v->present()) v->extent[0] = n;
  return a;
}

// The same call built twice, in two buffer sets with the same contents: one
// run through a PreparedCall, the other through ropekv::run.
struct Twin {
  explicit Twin(const BackendMemory& mem) : prepared(mem), plain(mem) {}
  Buffers prepared, plain;
  Arguments a_prepared, a_plain;
  unsigned char* slots_prepared = nullptr;
  unsigned char* slots_plain = nullptr;
};

void build(Twin& t, const Gqa& g) {
  t.a_prepared = gqa_call(t.prepared, g, identity_slots(g.nnz), 7);
  t.a_plain = gqa_call(t.plain, g, identity_slots(g.nnz), 7);
  t.slots_prepared = static_cast<unsigned char*>(t.a_prepared.cache_index.slot_mapping.data);
  t.slots_plain = static_cast<unsigned char*>(t.a_plain.cache_index.slot_mapping.data);
}

void set_slots(Twin& t, const std::vector<std::int64_t>& slots) {
  std::memcpy(t.slots_prepared, slots.data(), slots.size() * 8);
  std::memcpy(t.slots_plain, slots.data(), slots.size() * 8);
}

std::string describe(const Result& r) {
  return std::string(ropekv::to_string(r.status)) + ": " + r.message;
}

// The two ways to give a prepared call a step: the whole arguments, or
// their step fields alone; and the two in turn (step i by its fields where
// i % 4 == 1: in StepsWriteWhatRunWrites the first and fifth steps, the
// same fields, with three steps by whole arguments between).
enum class Form { kArguments, kStep, kInTurn };
const Form kForms[] = {Form::kArguments, Form::kStep};
const char* name(Form f) {
  return f == Form::kStep ? "run(step_of(args))" : f == Form::kInTurn ? "in turn" : "run(args)";
}
Result run_as(PreparedCall& call, Form f, const Arguments& a, int i = 0) {
  const bool by_fields = f == Form::kStep || (f == Form::kInTurn && i % 4 == 1);
  return by_fields ? call.run(ropekv::step_of(a)) : call.run(a);
}

// One step of t: ap through the prepared call (given as `form`, step i), aq
// through run(): both succeed, the call took the step path, and every buffer
// of the two sets is equal.
void expect_step_writes_as_run(Twin& t, PreparedCall& call, Form form, int i, const Arguments& ap,
                               const Arguments& aq) {
  const Result rp =
      t.prepared.run_with(ap, [&](const Arguments& a) { return run_as(call, form, a, i); });
  const Result rq = t.plain.run(aq);
  ASSERT_TRUE(rp.ok()) << describe(rp);
  ASSERT_TRUE(rq.ok()) << describe(rq);
  EXPECT_TRUE(call.last_run_was_step());
  const auto a = t.prepared.snapshot(), b = t.plain.snapshot();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k], b[k]) << "buffer " << k;
}

// Steps that change the token count, the slots (padding included) and where
// the query output goes (its rotary and non-rotary parts interleaved in one
// buffer; also with the token count of the step before, whose launch the
// call keeps), and steps whose arguments repeat the last step's (the first,
// as prepared; the sixth): every buffer equal to run()'s after every step,
// and each step took the step path.
void steps_write_what_run_writes(const BackendMemory& mem, Form form) {
  Gqa g;
  g.nnz = 6;
  Twin t(mem);
  build(t, g);
  // A second query output of the same shape in each set, for a step that moves it.
  const std::size_t q_bytes = std::size_t(g.nnz * g.hq * g.d());
  unsigned char* q2_prepared = t.prepared.add("q_out_2", q_bytes, true);
  unsigned char* q2_plain = t.plain.add("q_out_2", q_bytes, true);
  const auto moved = [&](Arguments a, unsigned char* base) {
    const ropekv::HeadViews q = ropekv::split_heads(base, g.q_out, g.nnz, g.hq, g.d(), g.r);
    ropekv::set_query_output(a, q);
    return a;
  };

  PreparedCall call(mem.backend);
  ASSERT_TRUE(call.prepare(t.prepared.on_backend(t.a_prepared)).ok());
  struct StepCase {
    std::int64_t nnz;
    std::vector<std::int64_t> slots;
    bool move_query_output;
  };
  const StepCase steps[] = {
      {6, {0, 1, 2, 3, 4, 5}, false},       {3, {20, 21, 22, 0, 0, 0}, false},
      {0, {0, 0, 0, 0, 0, 0}, false},       {6, {40, -1, 41, -1, 42, 63}, true},
      {6, {10, 11, -1, 13, 14, 15}, false},  // same count, data moved back
      {6, {30, 31, 32, -1, 34, 35}, false},  // the same arguments, new slots
      {1, {9, 0, 0, 0, 0, 0}, true}};
  int step_index = 0;
  for (const StepCase& s : steps) {
    SCOPED_TRACE("step " + std::to_string(step_index++));
    set_slots(t, s.slots);
    Arguments ap = first_tokens(t.a_prepared, s.nnz), aq = first_tokens(t.a_plain, s.nnz);
    if (s.move_query_output) {
      ap = first_tokens(moved(t.a_prepared, q2_prepared), s.nnz);
      aq = first_tokens(moved(t.a_plain, q2_plain), s.nnz);
    }
    ASSERT_NO_FATAL_FAILURE(expect_step_writes_as_run(t, call, form, step_index, ap, aq));
  }
}

}  // namespace

TEST_P(PreparedCallSuite, StepsWriteWhatRunWrites) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.name << ": " << mem.why_unavailable;
  for (const Form form : {Form::kArguments, Form::kStep, Form::kInTurn}) {
    SCOPED_TRACE(name(form));
    steps_write_what_run_writes(mem, form);
  }
}

// Each broken step field: the step reports what validate() reports, writes
// nothing, and the call is still prepared for the next good step.
TEST_P(PreparedCallSuite, BadStepsReportWhatValidateReports) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.name << ": " << mem.why_unavailable;
  Gqa g;
  Buffers b(mem);
  const Arguments good = gqa_call(b, g, identity_slots(g.nnz), 3);
  unsigned char* odd = b.add("odd", 64, false);  // for misaligned pointers
  PreparedCall call(mem.backend);
  ASSERT_TRUE(call.prepare(b.on_backend(good)).ok());

  struct Bad {
    const char* what;
    void (*mutate)(Arguments&, unsigned char*);
  };
  const Bad bad[] = {
      {"null input", [](Arguments& a, unsigned char*) { a.q_rope.data = nullptr; }},
      {"misaligned input", [](Arguments& a, unsigned char* o) { a.k_rope.data = o + 1; }},
      {"token counts disagree", [](Arguments& a, unsigned char*) { a.positions.extent[0] -= 1; }},
      {"query output over the K cache",
       [](Arguments& a, unsigned char*) { a.q_rope_out.data = a.k_cache_rope.data; }},
      {"V cache over the K cache",
       [](Arguments& a, unsigned char*) { a.v_cache.data = a.k_cache_rope.data; }},
      {"the query output's parts interleaved otherwise (over each other)",
       [](Arguments& a, unsigned char*) { a.q_nope_out.data = a.q_rope_out.data; }},
      {"negative token count", [](Arguments& a, unsigned char*) { a = first_tokens(a, -1); }},
  };
  // A bad step: it reports what validate() reports and writes nothing.
  const auto reports_what_validate_reports = [&](const Arguments& a, Form form) {
    const Result want = b.validate(a, mem.backend);
    ASSERT_FALSE(want.ok());
    const auto before = b.snapshot();
    const Result got = b.run_with(a, [&](const Arguments& d) { return run_as(call, form, d); });
    EXPECT_EQ(got.status, want.status) << describe(got) << " vs " << describe(want);
    EXPECT_STREQ(got.message, want.message);
    EXPECT_FALSE(call.last_run_was_step());
    EXPECT_EQ(b.first_change(before), "");
  };
  for (const Form form : kForms) {
    SCOPED_TRACE(name(form));
    ASSERT_TRUE(call.prepare(b.on_backend(good)).ok());
    for (const Bad& x : bad) {
      SCOPED_TRACE(x.what);
      Arguments a = good;
      x.mutate(a, odd);
      // A Step has one token count: views that disagree cannot be given.
      if (form == Form::kStep && a.positions.extent[0] != a.q_rope.extent[0]) continue;
      reports_what_validate_reports(a, form);
      const Result again =
          b.run_with(good, [&](const Arguments& d) { return run_as(call, form, d); });
      EXPECT_TRUE(again.ok()) << describe(again);
      EXPECT_TRUE(call.last_run_was_step());
    }
    // Prepared with no tokens, no span of a per-token view is checked: here
    // (Hq - 1) x q_rope's head stride wraps past 2^64 to a few elements. A
    // step with tokens must still report what validate() reports.
    SCOPED_TRACE("span overflow after a call with no tokens");
    Arguments empty = first_tokens(good, 0);
    empty.q_rope.stride[1] = std::int64_t(UINT64_MAX / std::uint64_t(g.hq - 1) + 1);
    ASSERT_TRUE(call.prepare(b.on_backend(empty)).ok());
    reports_what_validate_reports(first_tokens(empty, 1), form);
  }
}

// Another shape (here the query output's dtype) is validated in full,
// written as run() writes it, and becomes the prepared call.
TEST_P(PreparedCallSuite, AnotherShapeIsValidatedInFull) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.name << ": " << mem.why_unavailable;
  Gqa g;
  Twin t(mem);
  build(t, g);
  Gqa g16 = g;
  g16.q_out = ropekv::DType::kBFloat16;
  Buffers other_p(mem), other_q(mem);
  const Arguments bp = gqa_call(other_p, g16, identity_slots(g.nnz), 5);
  const Arguments bq = gqa_call(other_q, g16, identity_slots(g.nnz), 5);
  PreparedCall call(mem.backend);
  ASSERT_TRUE(call.prepare(t.prepared.on_backend(t.a_prepared)).ok());
  const Result rp = other_p.run_with(bp, [&](const Arguments& a) { return call.run(a); });
  ASSERT_TRUE(rp.ok()) << describe(rp);
  EXPECT_FALSE(call.last_run_was_step());
  ASSERT_TRUE(other_q.run(bq).ok());
  EXPECT_EQ(other_p.snapshot(), other_q.snapshot());
  // The new shape is now the prepared one.
  const Result again = other_p.run_with(bp, [&](const Arguments& a) { return call.run(a); });
  EXPECT_TRUE(again.ok()) << describe(again);
  EXPECT_TRUE(call.last_run_was_step());
}

// run() before prepare(): run(step) reports that nothing is prepared and
// runs nothing; a bad call leaves it unprepared; the first good one is
// validated in full and prepares it; the next takes the step path.
TEST_P(PreparedCallSuite, RunWithoutPrepare) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.name << ": " << mem.why_unavailable;
  Gqa g;
  Buffers b(mem);
  const Arguments a = gqa_call(b, g, identity_slots(g.nnz), 11);
  PreparedCall call(mem.backend);
  EXPECT_FALSE(call.prepared());
  const auto before = b.snapshot();
  const Result r = b.run_with(a, [&](const Arguments& d) { return run_as(call, Form::kStep, d); });
  EXPECT_EQ(r.status, ropekv::Status::kErrorInvalidArgument) << describe(r);
  EXPECT_NE(std::string(r.message).find("nothing prepared"), std::string::npos) << r.message;
  EXPECT_FALSE(call.prepared());
  EXPECT_FALSE(call.last_run_was_step());
  EXPECT_EQ(b.first_change(before), "");
  Arguments bad = a;
  bad.q_rope.data = nullptr;
  EXPECT_FALSE(b.run_with(bad, [&](const Arguments& d) { return call.run(d); }).ok());
  EXPECT_FALSE(call.prepared());
  EXPECT_EQ(b.first_change(before), "");
  ASSERT_TRUE(b.run_with(a, [&](const Arguments& d) { return call.run(d); }).ok());
  EXPECT_TRUE(call.prepared());
  EXPECT_FALSE(call.last_run_was_step());
  const auto once = b.snapshot();
  ASSERT_TRUE(b.run_with(a, [&](const Arguments& d) { return call.run(d); }).ok());
  EXPECT_TRUE(call.last_run_was_step());
  EXPECT_EQ(b.snapshot(), once);  // the same call again writes the same bytes
}

// Page-table steps: the token count, the batch (kv_indptr's length), the
// page list's length and place change; every buffer equal to run()'s after
// every step, each step taking the step path, in both forms. Token t of a
// step with `batch` sequences is in sequence t % batch at position t / batch
// (its first page: distinct slots), sequence s's pages at 2s, 2s + 1.
TEST_P(PreparedCallSuite, PageTableStepsWriteWhatRunWrites) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.name << ": " << mem.why_unavailable;
  Gqa g;  // 6 tokens, 4 pages of 16
  struct Table {
    std::int32_t *list[2], *indptr, *batch, *kv_pos;
  };
  const auto add_table = [&](Buffers& b) {
    Table x;
    x.list[0] = reinterpret_cast<std::int32_t*>(b.add("kv_indices", 8 * 4, false));
    x.list[1] = reinterpret_cast<std::int32_t*>(b.add("kv_indices_2", 8 * 4, false));
    x.indptr = reinterpret_cast<std::int32_t*>(b.add("kv_indptr", 7 * 4, false));
    x.batch = reinterpret_cast<std::int32_t*>(b.add("batch_indices", 6 * 4, false));
    x.kv_pos = reinterpret_cast<std::int32_t*>(b.add("kv_positions", 6 * 4, false));
    // Sequence b's pages are entries 2b and 2b + 1: distinct pages for the
    // sequences of a step (their tokens use the first), so that no two
    // tokens share a cache slot (the order of two writes to one slot is
    // not the contract's).
    for (int k = 0; k < 8; ++k) {
      x.list[0][k] = (k / 2) % 4;
      x.list[1][k] = 3 - (k / 2) % 4;
    }
    return x;
  };
  struct StepCase {
    std::int64_t nnz, batch;
    int list;
  };
  const StepCase steps[] = {{6, 3, 0}, {4, 2, 1}, {6, 3, 1}, {1, 1, 0}, {0, 1, 0}, {6, 3, 0}};
  for (const Form form : kForms) {
    SCOPED_TRACE(name(form));
    Twin t(mem);
    build(t, g);
    const Table tp = add_table(t.prepared), tq = add_table(t.plain);
    // Each step's positions new, so that a token written beyond a step's count changes bytes.
    const auto step_args = [&](const Arguments& base, const Table& x, const StepCase& c, int i) {
      auto* pos = static_cast<std::int64_t*>(base.positions.data);
      for (std::int64_t k = 0; k < g.nnz; ++k) pos[k] = (k + 7 * i) % g.max_pos;
      for (std::int64_t s = 0; s <= c.batch; ++s) x.indptr[s] = std::int32_t(2 * s);
      for (std::int64_t k = 0; k < c.nnz; ++k) {
        x.batch[k] = std::int32_t(k % c.batch);
        x.kv_pos[k] = std::int32_t(k / c.batch);
      }
      Arguments a = first_tokens(base, c.nnz);
      a.cache_index = ropekv::page_table_index(
          x.list[c.list], ropekv::DType::kInt32, 2 * c.batch, x.indptr, ropekv::DType::kInt32,
          c.batch + 1, x.batch, ropekv::DType::kInt32, x.kv_pos, ropekv::DType::kInt32, c.nnz);
      return a;
    };
    PreparedCall call(mem.backend);
    ASSERT_TRUE(call.prepare(t.prepared.on_backend(step_args(t.a_prepared, tp, steps[0], 0))).ok());
    int step_index = 0;
    for (const StepCase& c : steps) {
      SCOPED_TRACE("step " + std::to_string(step_index));
      const Arguments ap = step_args(t.a_prepared, tp, c, step_index),
                      aq = step_args(t.a_plain, tq, c, step_index);
      ASSERT_NO_FATAL_FAILURE(expect_step_writes_as_run(t, call, form, step_index, ap, aq));
      ++step_index;
    }
  }
}

// A step that makes a host scale a device one (and back) is not a step: it
// is validated in full and written as run() writes the arguments it makes,
// which then are the prepared ones (the same step again takes the step path).
TEST_P(PreparedCallSuite, StepMovingAScaleToTheDeviceIsValidatedInFull) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.name << ": " << mem.why_unavailable;
  Gqa g;
  Twin t(mem);
  build(t, g);
  const float k_scale = t.a_prepared.k_scale.value;
  unsigned char* scale_prepared = t.prepared.add("k_scale", sizeof(float), false);
  unsigned char* scale_plain = t.plain.add("k_scale", sizeof(float), false);
  std::memcpy(scale_prepared, &k_scale, sizeof k_scale);
  std::memcpy(scale_plain, &k_scale, sizeof k_scale);
  Arguments on_prepared = t.a_prepared, on_plain = t.a_plain;
  on_prepared.k_scale.device = reinterpret_cast<const float*>(scale_prepared);
  on_plain.k_scale.device = reinterpret_cast<const float*>(scale_plain);

  PreparedCall call(mem.backend);
  ASSERT_TRUE(call.prepare(t.prepared.on_backend(t.a_prepared)).ok());
  const auto step = [&](const Arguments& a) {
    return t.prepared.run_with(a, [&](const Arguments& d) { return run_as(call, Form::kStep, d); });
  };
  for (const bool device : {true, false}) {
    SCOPED_TRACE(device ? "to the device" : "back to the host value");
    const Arguments& ap = device ? on_prepared : t.a_prepared;
    const Result rp = step(ap);
    ASSERT_TRUE(rp.ok()) << describe(rp);
    EXPECT_FALSE(call.last_run_was_step());
    ASSERT_TRUE(t.plain.run(device ? on_plain : t.a_plain).ok());
    EXPECT_EQ(t.prepared.snapshot(), t.plain.snapshot());
    ASSERT_TRUE(step(ap).ok());
    EXPECT_TRUE(call.last_run_was_step());
  }
}

}  // namespace ropekv_test
