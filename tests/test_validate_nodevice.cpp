// Validation of a device backend needs no device: validate(args, kCuda) (or
// kHip) runs every host-side rule whether or not a GPU is present, and
// run(args, kCuda) returns the same error for bad arguments; only a valid
// call needs the device, and without one run() reports kErrorNoDevice and
// writes nothing. These tests run on CPU-only CI in the CUDA and HIP test
// binaries, with or without the host backend in the build.
//
// The arguments live in host memory: nothing here launches a kernel (a valid
// call is run only when the backend has no device).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "baseline_call.hpp"
#include "ropekv/config.hpp"
#include "ropekv/ropekv.hpp"

namespace {

using namespace ropekv;

constexpr unsigned char kGuard = 0x5A;

namespace baseline = ropekv_test::baseline;
using namespace ropekv_test::baseline;

std::string describe(const Result& r) {
  return std::string(to_string(r.status)) + ": \"" + r.message + "\"";
}

// The device backend under test (a struct, so that gtest prints its name).
struct DeviceBackend {
  Backend id;
};
void PrintTo(const DeviceBackend& b, std::ostream* os) { *os << to_string(b.id); }

class ValidateNoDevice : public ::testing::TestWithParam<DeviceBackend> {
 protected:
  void SetUp() override {
    for (std::size_t i = 0; i < qkv_.size(); ++i) qkv_[i] = 0.125f * float(int(i % 29) - 14);
    for (std::size_t i = 0; i < cos_.size(); ++i) cos_[i] = (i % 2) ? 0.6f : 0.8f;
    std::memset(q_out_.data(), kGuard, q_out_.size());
    std::memset(k_cache_.data(), kGuard, k_cache_.size());
    std::memset(v_cache_.data(), kGuard, v_cache_.size());
  }

 public:
  // A valid call (baseline_call.hpp) on fp32 fused QKV rows, slot mapping.
  Arguments Baseline() { return baseline::slot_mapping_call(buffers()); }
  Arguments PageTableBaseline() { return baseline::page_table_call(buffers()); }

  baseline::Buffers buffers() {
    return baseline::buffers_at(qkv_.data(), DType::kFloat32, 0, q_out_.data(), k_cache_.data(),
                                v_cache_.data(), cos_.data(), positions_.data(), slots_.data(),
                                kv_indices_.data(), kv_indptr_.data(), batch_.data(),
                                kv_positions_.data());
  }

 protected:
  void ExpectNothingWritten() {
    const std::vector<unsigned char>* outs[] = {&q_out_, &k_cache_, &v_cache_};
    for (const auto* o : outs)
      for (unsigned char b : *o) ASSERT_EQ(b, kGuard) << "an output byte was written";
  }

  std::vector<float> qkv_ = std::vector<float>(kNnz * (kHq + 2 * kHk) * kD);
  std::vector<float> cos_ = std::vector<float>(kMaxPos * kR);
  std::vector<std::int64_t> positions_ = {std::begin(kPositions), std::end(kPositions)};
  std::vector<std::int64_t> slots_ = {std::begin(kSlots), std::end(kSlots)};
  std::vector<std::int32_t> kv_indices_ = {std::begin(kKvIndices), std::end(kKvIndices)};
  std::vector<std::int32_t> kv_indptr_ = {std::begin(kKvIndptr), std::end(kKvIndptr)};
  std::vector<std::int32_t> batch_ = {std::begin(kBatchIndices), std::end(kBatchIndices)};
  std::vector<std::int32_t> kv_positions_ = {std::begin(kKvPositions), std::end(kKvPositions)};
  std::vector<unsigned char> q_out_ = std::vector<unsigned char>(kNnz * kHq * kD);
  std::vector<unsigned char> k_cache_ = std::vector<unsigned char>(kPages * kPageSize * kHk * kD);
  std::vector<unsigned char> v_cache_ = std::vector<unsigned char>(kPages * kPageSize * kHk * kD);
};

// One broken argument set per rule family: every argument Status validation
// returns, each with the words its message must contain.
struct Broken {
  const char* name;
  std::function<void(Arguments&, ValidateNoDevice&)> to_break;
  Status want;
  std::vector<const char*> words;
};

std::vector<Broken> broken_cases() {
  using A = Arguments&;
  using F = ValidateNoDevice&;
  return {
      {"null data",
       [](A a, F) { a.q_rope.data = nullptr; },
       Status::kErrorNullPointer,
       {"q_rope.data", "must not be null"}},
      {"input dtype",
       [](A a, F) { a.k_rope.dtype = DType::kBFloat16; },
       Status::kErrorUnsupportedDType,
       {"k_rope.dtype", "q_rope.dtype"}},
      {"rank",
       [](A a, F) { a.k_cache_rope.rank = 3; },
       Status::kErrorInvalidRank,
       {"k_cache_rope", "rank 4", "got 3"}},
      {"extent",
       [](A a, F) { a.positions.extent[0] = kNnz - 1; },
       Status::kErrorShapeMismatch,
       {"positions.extent[0]", "nnz"}},
      {"odd rotary dim",
       [](A a, F) { a.q_rope.extent[2] = 7; },
       Status::kErrorInvalidRotaryDim,
       {"rotary dim", "even"}},
      {"cos/sin width",
       [](A a, F) { a.cos_sin_cache.extent[1] = kR / 2; },
       Status::kErrorCosSinMismatch,
       {"cos_sin_cache.extent[1]", "rotary dim"}},
      {"last dim stride",
       [](A a, F) { a.k_cache_rope.stride[3] = 2; },
       Status::kErrorNonContiguous,
       {"k_cache_rope.stride[3]", "must be 1"}},
      {"negative stride",
       [](A a, F) { a.q_nope.stride[0] = -1; },
       Status::kErrorInvalidStride,
       {"q_nope.stride[0]", ">= 0"}},
      {"misaligned data",
       [](A a, F) { a.q_rope.data = static_cast<char*>(a.q_rope.data) + 2; },
       Status::kErrorMisaligned,
       {"q_rope.data", "aligned"}},
      {"page size",
       [](A a, F) { a.k_cache_rope.extent[1] = 0; },
       Status::kErrorInvalidPageSize,
       {"page_size", "> 0"}},
      {"host scale",
       [](A a, F) { a.k_scale = Scale::host(-1.0f); },
       Status::kErrorInvalidScale,
       {"k_scale", "positive and finite"}},
      {"overlapping views",
       [](A a, F) { a.q_rope_out.data = a.k_cache_rope.data; },
       Status::kErrorOverlap,
       {"q_rope_out", "k_cache_rope", "overlap"}},
      {"kind",
       [](A a, F) { a.kind = static_cast<AttentionKind>(5); },
       Status::kErrorInvalidArgument,
       {"kind", "got 5"}},
      {"MLA with a value",
       [](A a, F) { a.kind = AttentionKind::kMla; },
       Status::kErrorInvalidArgument,
       {"v and v_cache must be absent"}},
      {"page table indptr",
       [](A a, F f) {
         a = f.PageTableBaseline();
         a.cache_index.kv_indptr.extent[0] = 0;
       },
       Status::kErrorShapeMismatch,
       {"cache_index.kv_indptr.extent[0]", "batch + 1"}},
      {"index dtype",
       [](A a, F) { a.cache_index.slot_mapping.dtype = DType::kFloat32; },
       Status::kErrorUnsupportedDType,
       {"cache_index.slot_mapping.dtype", "int32 or int64"}},
  };
}

bool contains(const char* s, const char* w) { return std::strstr(s, w) != nullptr; }

TEST_P(ValidateNoDevice, ValidCallsValidate) {
  const Backend b = GetParam().id;
  ASSERT_TRUE(backend_compiled(b));
  Result r = validate(Baseline(), b);
  EXPECT_TRUE(r.ok()) << "slot mapping: " << describe(r);
  r = validate(PageTableBaseline(), b);
  EXPECT_TRUE(r.ok()) << "page table: " << describe(r);
  Arguments empty = Baseline();  // nnz == 0 is valid
  for (TensorView* v :
       {&empty.q_rope, &empty.q_nope, &empty.k_rope, &empty.k_nope, &empty.v, &empty.q_rope_out,
        &empty.q_nope_out, &empty.positions, &empty.cache_index.slot_mapping})
    v->extent[0] = 0;
  r = validate(empty, b);
  EXPECT_TRUE(r.ok()) << "nnz 0: " << describe(r);
}

// Each rule rejects on the device backend, device or not, with the status and
// message of the rule; run() returns the same and writes nothing; where the
// host backend is compiled too, it reports the very same message.
TEST_P(ValidateNoDevice, EveryRuleFamilyRejects) {
  const Backend b = GetParam().id;
  for (const Broken& c : broken_cases()) {
    SCOPED_TRACE(c.name);
    Arguments a = Baseline();
    c.to_break(a, *this);
    const Result v = validate(a, b);
    EXPECT_EQ(v.status, c.want) << describe(v);
    for (const char* w : c.words)
      EXPECT_TRUE(contains(v.message, w)) << "\"" << v.message << "\" lacks \"" << w << "\"";
    const Result r = run(a, b);
    EXPECT_EQ(r.status, v.status) << describe(r);
    EXPECT_STREQ(r.message, v.message);
    if (backend_compiled(Backend::kHost)) {
      const Result h = validate(a, Backend::kHost);
      EXPECT_EQ(h.status, v.status);
      EXPECT_STREQ(h.message, v.message);
    }
    ExpectNothingWritten();
  }
}

TEST_P(ValidateNoDevice, RunWithoutDeviceReportsNoDevice) {
  const Backend b = GetParam().id;
  if (backend_available(b))
    GTEST_SKIP() << to_string(b)
                 << " device present: the no-device path cannot be exercised here (skipped, "
                    "not passed)";
  for (const Arguments& a : {Baseline(), PageTableBaseline()}) {
    ASSERT_TRUE(validate(a, b).ok());
    const Result r = run(a, b);
    EXPECT_EQ(r.status, Status::kErrorNoDevice) << describe(r);
    EXPECT_TRUE(contains(r.message, to_string(b)) && contains(r.message, "no device")) << r.message;
  }
  ExpectNothingWritten();
}

// kAuto in a build whose only compiled backends lack a device resolves to a
// compiled one, so that validate(args) checks the rules instead of failing on
// a backend that is not in the build.
TEST_P(ValidateNoDevice, AutoValidatesWithoutDevice) {
  const Backend b = GetParam().id;
  const Backend picked = resolve_backend(Backend::kAuto);
  EXPECT_TRUE(backend_compiled(picked)) << to_string(picked);
  if (!backend_available(b) && !backend_compiled(Backend::kHost)) {
    EXPECT_EQ(picked, b);
  }
  const Result v = validate(Baseline(), Backend::kAuto);
  EXPECT_TRUE(v.ok()) << describe(v);
  Arguments bad = Baseline();
  bad.v_scale = Scale::host(0.0f);
  EXPECT_EQ(validate(bad, Backend::kAuto).status, Status::kErrorInvalidScale);
}

std::string backend_name(const ::testing::TestParamInfo<DeviceBackend>& info) {
  return to_string(info.param.id);
}

#if ROPEKV_ENABLE_CUDA
INSTANTIATE_TEST_SUITE_P(Cuda, ValidateNoDevice, ::testing::Values(DeviceBackend{Backend::kCuda}),
                         backend_name);
#endif
#if ROPEKV_ENABLE_HIP
INSTANTIATE_TEST_SUITE_P(Hip, ValidateNoDevice, ::testing::Values(DeviceBackend{Backend::kHip}),
                         backend_name);
#endif

}  // namespace
