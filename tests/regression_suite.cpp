// Regression tests of issue 11, one per defect (see regression_suite.hpp).
//
// Each test builds its call in host memory (the "mirrors"), copies it to the
// backend's memory, runs it there and copies everything back, so one test
// body serves every backend. Outputs start as guard bytes; a rejected call
// must leave every buffer as it was.
//
// This file is compiled with -fsanitize=signed-integer-overflow where the
// compiler has it (tests/CMakeLists.txt): Defect5 calls the token planner
// (core/detail/params.hpp, inline) from here, so an overflow in its index
// math aborts the test instead of wrapping silently.
#include "regression_suite.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "detail/lower.hpp"
#include "detail/params.hpp"
#include "host/threads.hpp"
#include "host_split.hpp"
#include "oracle.hpp"
#include "ropekv/ropekv.hpp"
#include "test_calls.hpp"

namespace ropekv_test {

void PrintTo(const RegressionParam& param, std::ostream* os) { *os << param.memory().name; }

std::string regression_name(const ::testing::TestParamInfo<RegressionParam>& info) {
  return info.param.memory().name;
}

namespace {

namespace orc = ropekv_oracle;
using ropekv::Addressing;
using ropekv::Arguments;
using ropekv::AttentionKind;
using ropekv::DType;
using ropekv::Result;
using ropekv::Scale;
using ropekv::Status;
using ropekv::TensorView;

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();

std::string describe(const Result& r) {
  return std::string(ropekv::to_string(r.status)) + ": \"" + r.message + "\"";
}

// Validation must reject `a` with `want`, naming every one of `names`, and
// run() must return the same and change no byte of any buffer. A call that
// validation wrongly accepts is not run (it may write out of bounds).
void expect_rejected(Buffers& b, const BackendMemory& mem, const Arguments& a, Status want,
                     std::initializer_list<const char*> names) {
  const Result v = b.validate(a, mem.backend);
  ASSERT_FALSE(v.ok()) << "validate() accepted the call";
  EXPECT_EQ(int(v.status), int(want)) << describe(v) << ", want " << ropekv::to_string(want);
  for (const char* s : names)
    EXPECT_NE(std::string(v.message).find(s), std::string::npos)
        << describe(v) << " does not name \"" << s << "\"";
  const auto before = b.snapshot();
  const Result r = b.run(a);
  EXPECT_EQ(int(r.status), int(v.status)) << describe(r);
  EXPECT_STREQ(r.message, v.message);
  EXPECT_EQ(b.first_change(before), "") << "a rejected call wrote";
}

// Every output element the oracle names holds a code it allows, and exactly the
// code of the contract's float32 formula (the oracle's `exact`), and every other
// byte of the output buffers still holds the guard. Returns the number of
// elements checked.
std::size_t expect_matches_oracle(
    const orc::Reference& ref,
    const std::vector<std::pair<const unsigned char*, std::size_t>>& outs) {
  EXPECT_TRUE(ref.error.empty()) << ref.error;
  std::vector<std::vector<bool>> named;
  for (const auto& o : outs) named.emplace_back(o.second, false);
  std::size_t bad = 0;
  for (const orc::ExpectedElement& e : ref.elements) {
    const int bytes = orc::bits_of(e.dtype) / 8;
    bool found = false;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      if (e.address >= outs[i].first && e.address + bytes <= outs[i].first + outs[i].second) {
        for (int k = 0; k < bytes; ++k) named[i][std::size_t(e.address - outs[i].first) + k] = true;
        found = true;
      }
    }
    EXPECT_TRUE(found) << "oracle element outside the outputs: " << e.describe();
    const std::uint32_t code = orc::load_code(e.address, orc::bits_of(e.dtype));
    if (!e.matches(code) && bad++ < 5)
      ADD_FAILURE() << e.describe() << "; library wrote 0x" << std::hex << code;
  }
  for (std::size_t i = 0; i < outs.size(); ++i)
    for (std::size_t k = 0; k < outs[i].second; ++k)
      if (!named[i][k] && outs[i].first[k] != kGuard) {
        ADD_FAILURE() << "output buffer " << i << " byte " << k << " written outside the views";
        break;
      }
  EXPECT_EQ(bad, 0u) << bad
                     << " elements outside the oracle's bounds or not the float32 formula's code";
  return ref.elements.size();
}

// Threads the host backend splits a large call over (0: no host backend in
// this build, e.g. the CUDA-only preset).
int host_threads() {
#if ROPEKV_ENABLE_KOKKOS
  return ropekv::detail::host_backend_threads();
#else
  return 0;
#endif
}

// Threads the last host call made on this thread actually ran on (0: none).
int host_call_threads() {
#if ROPEKV_ENABLE_KOKKOS
  return ropekv::detail::host_last_call_threads();
#else
  return 0;
#endif
}

// ------------------------------------------------------------------ the defects

// 1. The checked-mode counter must be exact when the host backend splits a
// call over threads (it was a plain += from every thread in Debian's
// Serial-only Kokkos, and lost counts).
TEST_P(Issue11, Defect1CheckedCounterExactUnderThreads) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.why_unavailable;
  ropekv_test::request_host_threads("4");
  const bool host = mem.backend == ropekv::Backend::kHost;
  const std::string no_split = host ? ropekv_test::no_split_reason(host_threads()) : "";
  if (!no_split.empty()) GTEST_SKIP() << no_split << ": no threads to race";
  // 65536 tokens of 2.4 KB each in the byte model: far above the size from
  // which the host backend starts threads. All but every 64th token are bad
  // (page >= P), so the threads update the counter many times at once.
  Gqa g;
  g.nnz = 65536;
  g.hq = 1;
  g.hk = 2;
  g.r = 128;
  g.n = 0;
  g.one_input_row = true;
  g.pages = g.nnz / 64 / g.page_size;
  std::vector<std::int64_t> slots(static_cast<std::size_t>(g.nnz));
  unsigned long long bad = 0;
  for (std::int64_t t = 0; t < g.nnz; ++t) {
    const bool good = t % 64 == 0;
    slots[std::size_t(t)] = good ? t / 64 : g.pages * g.page_size + t;
    bad += good ? 0 : 1;
  }
  Buffers b(mem);
  Arguments a = gqa_call(b, g, slots, 1);
  a.checked.enabled = true;
  a.checked.skipped_tokens = add_counter(b, 0);
  int wrong = 0;
  int fewest_threads = 1 << 30;  // over the host calls
  constexpr int kCalls = 50;
  for (int call = 0; call < kCalls; ++call) {
    *a.checked.skipped_tokens = 1000;
    const Result r = b.run(a);
    ASSERT_TRUE(r.ok()) << describe(r);
    if (host) {
      // The premise: each call was split over threads.
      fewest_threads = std::min(fewest_threads, host_call_threads());
      ASSERT_GE(fewest_threads, 2) << "call " << call << " ran on one thread";
    }
    const unsigned long long got = *a.checked.skipped_tokens;
    if (got != 1000 + bad && wrong++ < 3)
      ADD_FAILURE() << "call " << call << ": skipped_tokens = " << got << ", expected "
                    << 1000 + bad << " (1000 + " << bad << " bad tokens)";
  }
  if (host)
    std::printf(
        "[ issue 11 ] %s: %d of %d calls of %lld tokens (%llu bad) miscounted; each call split "
        "over >= %d threads\n",
        mem.name, wrong, kCalls, static_cast<long long>(g.nnz), bad, fewest_threads);
  else
    std::printf("[ issue 11 ] %s: %d of %d calls of %lld tokens (%llu bad) miscounted\n", mem.name,
                wrong, kCalls, static_cast<long long>(g.nnz), bad);
}

// 2. validate() died with SIGFPE: a byte stride of 2^62 * 4 wrapped to 0 and
// was then used as a divisor. Such a view spans more than 2^63 bytes and
// must be rejected by name.
TEST_P(Issue11, Defect2HugeStrideRejectedWithoutSigfpe) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.why_unavailable;
  Gqa g;
  g.q_out = DType::kFloat32;
  Buffers b(mem);
  Arguments a = gqa_call(b, g, identity_slots(g.nnz), 2);
  // fp32 query output with padded heads and tokens: [nnz, Hq, D + 3] rows of
  // Hq * (D + 3) + 5 elements.
  const std::int64_t hs = g.d() + 3, ts = g.hq * hs + 5;
  unsigned char* q = b.add("q_out_padded", std::size_t(g.nnz * ts * 4), true);
  const std::int64_t ext_r[3] = {g.nnz, g.hq, g.r}, ext_n[3] = {g.nnz, g.hq, g.n};
  const std::int64_t str[3] = {ts, hs, 1};
  a.q_rope_out = ropekv::make_strided(q, DType::kFloat32, 3, ext_r, str);
  a.q_nope_out = ropekv::make_strided(q + g.r * 4, DType::kFloat32, 3, ext_n, str);
  ASSERT_TRUE(b.validate(a, mem.backend).ok());
  a.q_nope_out.stride[1] = std::int64_t(1) << 62;
  expect_rejected(b, mem, a, Status::kErrorInvalidStride, {"q_nope_out", "2^63"});
}

// 3. nnz = 2^62 made TensorView::numel() wrap to 0, so a null k_rope passed
// validation (and run() crashed).
TEST_P(Issue11, Defect3NumelOverflowCannotHideNullPointer) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.why_unavailable;
  Gqa g;
  Buffers b(mem);
  const Arguments base = gqa_call(b, g, identity_slots(g.nnz), 3);
  // numel() of [2^62, 2, 16] does not fit in 64 bits: it saturates.
  TensorView huge = base.k_rope;
  huge.extent[0] = std::int64_t(1) << 62;
  EXPECT_EQ(huge.numel(), kI64Max);
  // Only k_rope: its own null pointer is the first rule it breaks.
  Arguments a = base;
  a.k_rope.extent[0] = std::int64_t(1) << 62;
  a.k_rope.data = nullptr;
  expect_rejected(b, mem, a, Status::kErrorNullPointer, {"k_rope.data", "must not be null"});
  // Every token view (the issue's case): rejected; q_rope's span comes first.
  a = base;
  for (TensorView* v : {&a.q_rope, &a.q_nope, &a.k_rope, &a.k_nope, &a.v, &a.q_rope_out,
                        &a.q_nope_out, &a.positions, &a.cache_index.slot_mapping})
    v->extent[0] = std::int64_t(1) << 62;
  a.k_rope.data = nullptr;
  expect_rejected(b, mem, a, Status::kErrorInvalidStride, {"q_rope", "2^63"});
}

// 4. A head stride of 2^63 - 8 bf16 elements wrapped k_cache_nope's head 1
// onto k_cache_rope's head 0: validation accepted it and run() wrote the
// non-rotary key over the rotated one.
TEST_P(Issue11, Defect4StrideOverflowCannotBypassOverlapCheck) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.why_unavailable;
  Gqa g;
  g.cache = DType::kBFloat16;
  Buffers b(mem);
  Arguments a = gqa_call(b, g, identity_slots(g.nnz), 4);
  ASSERT_TRUE(b.validate(a, mem.backend).ok());
  a.k_cache_nope.stride[2] = kI64Max - 7;
  expect_rejected(b, mem, a, Status::kErrorInvalidStride, {"k_cache_nope", "2^63"});
}

// 5. Checked mode exists for garbage indices, so its index math must not
// overflow: kv_indptr[b] = INT64_MAX plus a page within the sequence did.
TEST_P(Issue11, Defect5CheckedModeGarbageIndicesNoOverflow) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.why_unavailable;
  Gqa g;
  g.nnz = 3;
  Buffers b(mem);
  Arguments a = gqa_call(b, g, identity_slots(g.nnz), 5);
  // Page table: sequence 0 owns pages {2, 0}; "sequence 1" starts at INT64_MAX.
  auto* indices = reinterpret_cast<std::int64_t*>(b.add("kv_indices", 2 * 8, false));
  auto* indptr = reinterpret_cast<std::int64_t*>(b.add("kv_indptr", 3 * 8, false));
  auto* batch = reinterpret_cast<std::int64_t*>(b.add("batch_indices", 3 * 8, false));
  auto* kv_pos = reinterpret_cast<std::int64_t*>(b.add("kv_positions", 3 * 8, false));
  indices[0] = 2;
  indices[1] = 0;
  indptr[0] = 0;
  indptr[1] = kI64Max;
  indptr[2] = kI64Max;
  const std::int64_t bs[3] = {0, 1, 0}, ps[3] = {3, 5 * g.page_size, 17};
  for (int t = 0; t < 3; ++t) {
    batch[t] = bs[t];
    kv_pos[t] = ps[t];
  }
  a.cache_index = ropekv::CacheIndex{};
  a.cache_index.form = Addressing::kPageTable;
  a.cache_index.kv_indices = ropekv::make_vector(indices, DType::kInt64, 2);
  a.cache_index.kv_indptr = ropekv::make_vector(indptr, DType::kInt64, 3);
  a.cache_index.batch_indices = ropekv::make_vector(batch, DType::kInt64, 3);
  a.cache_index.kv_positions = ropekv::make_vector(kv_pos, DType::kInt64, 3);
  a.checked.enabled = true;
  a.checked.skipped_tokens = add_counter(b, 7);

  // The planner itself, in this (overflow-checking) translation unit.
  ropekv::detail::LaunchParams p;
  const Result lr = ropekv::detail::lower(a, &p);
  ASSERT_TRUE(lr.ok()) << describe(lr);
  const ropekv::detail::TokenPlan plans[3] = {ropekv::detail::plan_token(p, 0),
                                              ropekv::detail::plan_token(p, 1),
                                              ropekv::detail::plan_token(p, 2)};
  EXPECT_TRUE(plans[0].write);
  EXPECT_EQ(plans[0].page, 2);
  EXPECT_EQ(plans[0].entry, 3);
  EXPECT_FALSE(plans[1].write);
  EXPECT_TRUE(plans[1].bad);
  EXPECT_TRUE(plans[2].write);
  EXPECT_EQ(plans[2].page, 0);
  EXPECT_EQ(plans[2].entry, 1);

  // The backend: token 1 skipped and counted, the others written as the
  // oracle says, nothing else written.
  const orc::Reference ref = orc::reference(a);
  EXPECT_EQ(ref.bad_tokens, 1);
  const Result r = b.run(a);
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_EQ(*a.checked.skipped_tokens, 8ull);
  const std::size_t qb = std::size_t(g.nnz * g.hq * g.d()),
                    cb = std::size_t(g.pages * g.page_size * g.hk * g.d());
  expect_matches_oracle(ref, {{static_cast<unsigned char*>(a.q_rope_out.data), qb},
                              {static_cast<unsigned char*>(a.k_cache_rope.data), cb},
                              {static_cast<unsigned char*>(a.v_cache.data), cb}});
}

// 6. A scale of an absent tensor (MLA's value) is neither read nor validated:
// a wild device pointer there crashed run().
TEST_P(Issue11, Defect6MlaIgnoresValueScale) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.why_unavailable;
  Gqa g;
  g.hk = 1;
  Buffers b(mem);
  Arguments a = gqa_call(b, g, identity_slots(g.nnz), 6);
  a.kind = AttentionKind::kMla;
  a.v = TensorView{};
  a.v_cache = TensorView{};
  for (const float* wild : {reinterpret_cast<const float*>(std::uintptr_t(16)),
                            reinterpret_cast<const float*>(std::uintptr_t(0x7003))}) {
    a.v_scale = Scale::on_device(wild);
    const Result v = b.validate(a, mem.backend);
    ASSERT_TRUE(v.ok()) << describe(v);
    const Result r = b.run(a);
    ASSERT_TRUE(r.ok()) << describe(r);
  }
  const std::size_t qb = std::size_t(g.nnz * g.hq * g.d()),
                    cb = std::size_t(g.pages * g.page_size * g.hk * g.d());
  expect_matches_oracle(orc::reference(a),
                        {{static_cast<unsigned char*>(a.q_rope_out.data), qb},
                         {static_cast<unsigned char*>(a.k_cache_rope.data), cb}});
}

// 7. The quantization step is IEEE division for every scale, on every
// backend: the GPU's reciprocal-based division gave saturated codes for a
// subnormal device scale. Host and device scales, tiny and huge.
// Inputs of Defect7: integers in [-300, 300] times the scale under test
// (rounded to float), so that the quotients are finite and spread over the
// FP8 range.
float g_input_scale = 1.f;
double scaled_value(std::mt19937_64& rng) {
  return (double(rng() % 601) - 300.0) * double(g_input_scale);
}

TEST_P(Issue11, Defect7ScaleDivisionIeeeOutsideFastRange) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.why_unavailable;
  const float scales[] = {0x1.16c2p-133f, 0x1p-149f, 0x1.8p-70f, 0x1.4p+70f, 0x1p+127f};
  for (float s : scales) {
    for (bool on_device : {false, true}) {
      SCOPED_TRACE(std::string("scale ") + std::to_string(s) +
                   (on_device ? " (device)" : " (host)"));
      Gqa g;
      g.in = DType::kFloat32;
      g.r = 2;
      g.n = 30;
      Buffers b(mem);
      g_input_scale = s;
      Arguments a = gqa_call(b, g, identity_slots(g.nnz), 7, &scaled_value);
      float* dev = reinterpret_cast<float*>(b.add("scales", 3 * 4, false));
      for (int i = 0; i < 3; ++i) dev[i] = s;
      for (int i = 0; i < 3; ++i) {
        Scale* sc = i == 0 ? &a.q_scale : (i == 1 ? &a.k_scale : &a.v_scale);
        *sc = on_device ? Scale::on_device(dev + i) : Scale::host(s);
      }
      const Result r = b.run(a);
      ASSERT_TRUE(r.ok()) << describe(r);
      // Pass-through elements: exactly convert(x / s) with IEEE float division.
      std::size_t mismatches = 0, checked = 0;
      auto check_copy = [&](const TensorView& in, const TensorView& out) {
        for (std::int64_t t = 0; t < g.nnz; ++t)
          for (std::int64_t h = 0; h < in.extent[1]; ++h)
            for (std::int64_t k = 0; k < in.extent[2]; ++k) {
              float x;
              std::memcpy(&x,
                          static_cast<const unsigned char*>(in.data) +
                              4 * (t * in.stride[0] + h * in.stride[1] + k),
                          4);
              const std::uint32_t want = orc::encode(DType::kFloat8E4M3FN, double(x / s));
              const std::uint32_t got = static_cast<const unsigned char*>(
                  out.data)[t * out.stride[0] + h * out.stride[1] + k];
              ++checked;
              if (got != want && mismatches++ < 3)
                ADD_FAILURE() << "x = " << x << ": got 0x" << std::hex << got << ", want 0x"
                              << want;
            }
      };
      check_copy(a.q_nope, a.q_nope_out);
      const std::size_t qb = std::size_t(g.nnz * g.hq * g.d()),
                        cb = std::size_t(g.pages * g.page_size * g.hk * g.d());
      // Every element (rotated ones included) against the oracle.
      expect_matches_oracle(orc::reference(a),
                            {{static_cast<unsigned char*>(a.q_rope_out.data), qb},
                             {static_cast<unsigned char*>(a.k_cache_rope.data), cb},
                             {static_cast<unsigned char*>(a.v_cache.data), cb}});
      EXPECT_EQ(mismatches, 0u) << "of " << checked << " query pass-through elements";
    }
  }
}

// 8. A stride on an extent-1 dimension cannot cause overlap: the overlap
// check rejected a valid Hk = 1 cache whose rotary view had head stride 2.
TEST_P(Issue11, Defect8ExtentOneStridesDoNotOverlap) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.why_unavailable;
  Gqa g;
  g.hk = 1;
  g.hq = 2;
  Buffers b(mem);
  Arguments a = gqa_call(b, g, identity_slots(g.nnz), 8);
  // K cache: pages of 2195 elements, slots of 136, entries [rope 16 | nope 16].
  const std::int64_t page = 2195, slot = 136;
  unsigned char* k = b.add("k_cache_strided", std::size_t(g.pages * page), true);
  const std::int64_t er[4] = {g.pages, g.page_size, 1, g.r}, en[4] = {g.pages, g.page_size, 1, g.n};
  const std::int64_t sr[4] = {page, slot, 2, 1}, sn[4] = {page, slot, g.d(), 1};
  a.k_cache_rope = ropekv::make_strided(k, DType::kFloat8E4M3FN, 4, er, sr);
  a.k_cache_nope = ropekv::make_strided(k + g.r, DType::kFloat8E4M3FN, 4, en, sn);
  const Result v = b.validate(a, mem.backend);
  ASSERT_TRUE(v.ok()) << describe(v);
  const Result r = b.run(a);
  ASSERT_TRUE(r.ok()) << describe(r);
  const std::size_t qb = std::size_t(g.nnz * g.hq * g.d()),
                    vb = std::size_t(g.pages * g.page_size * g.hk * g.d());
  expect_matches_oracle(orc::reference(a), {{static_cast<unsigned char*>(a.q_rope_out.data), qb},
                                            {k, std::size_t(g.pages * page)},
                                            {static_cast<unsigned char*>(a.v_cache.data), vb}});
}

// 9. Two tokens addressing one cache entry are a caller error with defined
// bounds: each byte of the entry comes from one of those tokens, no other
// byte changes. Checked against reference calls in which each token of a
// group writes the shared entry in turn and the others spare entries.
TEST_P(Issue11, Defect9DuplicateEntriesWriteOnlyTheirBytes) {
  const BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.why_unavailable;
  ropekv_test::request_host_threads("4");
  Gqa g;
  g.nnz = 2048;  // large enough for the host backend's threads
  g.hq = 8;
  g.hk = 2;
  g.r = 128;
  g.n = 0;
  const std::vector<std::vector<std::int64_t>> groups = {
      {10, 11}, {500, 1500, 2000}, {7, 2047}, {64, 65, 66}, {1024, 3}};
  const std::int64_t spare_first = g.nnz;  // spare slots after one slot per token
  g.pages = (g.nnz + 8 + g.page_size - 1) / g.page_size;
  const std::size_t cache_bytes = std::size_t(g.pages * g.page_size * g.hk * g.d());
  const std::size_t spare_lo = std::size_t(spare_first * g.hk * g.d());

  // run k < 0: the call with duplicates; else reference k.
  auto run_with = [&](int k, std::vector<unsigned char>* q, std::vector<unsigned char>* kc,
                      std::vector<unsigned char>* vc) {
    std::vector<std::int64_t> slots = identity_slots(g.nnz);
    std::int64_t spare = spare_first;
    for (const auto& grp : groups)
      for (std::size_t m = 0; m < grp.size(); ++m) {
        const bool owner = k < 0 || int(m) == k % int(grp.size());
        slots[std::size_t(grp[m])] = owner ? grp[0] : spare++;
      }
    Buffers b(mem);
    Arguments a = gqa_call(b, g, slots, 9);
    const Result r = b.run(a);
    ASSERT_TRUE(r.ok()) << describe(r);
    const auto* qp = static_cast<const unsigned char*>(a.q_rope_out.data);
    const auto* kp = static_cast<const unsigned char*>(a.k_cache_rope.data);
    const auto* vp = static_cast<const unsigned char*>(a.v_cache.data);
    q->assign(qp, qp + g.nnz * g.hq * g.d());
    kc->assign(kp, kp + cache_bytes);
    vc->assign(vp, vp + cache_bytes);
  };
  std::vector<unsigned char> q, kc, vc;
  run_with(-1, &q, &kc, &vc);
  std::vector<std::vector<unsigned char>> rq(3), rk(3), rv(3);
  for (int k = 0; k < 3; ++k)
    run_with(k, &rq[std::size_t(k)], &rk[std::size_t(k)], &rv[std::size_t(k)]);
  EXPECT_EQ(q, rq[0]) << "query output";
  std::size_t outside = 0;
  for (int which = 0; which < 2; ++which) {
    const auto& got = which == 0 ? kc : vc;
    const auto& ref = which == 0 ? rk : rv;
    for (std::size_t i = 0; i < cache_bytes; ++i) {
      const bool ok = i >= spare_lo
                          ? got[i] == kGuard
                          : (got[i] == ref[0][i] || got[i] == ref[1][i] || got[i] == ref[2][i]);
      if (!ok && outside++ < 3)
        ADD_FAILURE() << (which == 0 ? "k" : "v") << " cache byte " << i << " = 0x" << std::hex
                      << int(got[i]) << ": from none of the tokens that address it";
    }
  }
  EXPECT_EQ(outside, 0u);
}

}  // namespace
}  // namespace ropekv_test
