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
#include <ostream>
#include <string>
#include <vector>

#include "ropekv/config.hpp"
#include "ropekv/ropekv.hpp"

namespace {

using namespace ropekv;

constexpr unsigned char kGuard = 0x5A;

// GQA, 3 tokens, Hq 4, Hk 2, D 12 with R 8; 4 pages of 4 slots; 16 positions.
constexpr std::int64_t kNnz = 3, kHq = 4, kHk = 2, kD = 12, kR = 8, kPages = 4, kPageSize = 4,
                       kMaxPos = 16;

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
  // A valid call: fp32 fused QKV in, e4m3fn query out and NHD caches, slot mapping.
  Arguments Baseline() {
    Arguments a;
    const QkvViews in = fused_qkv_views(qkv_.data(), DType::kFloat32, kNnz, kHq, kHk, kD, kR);
    a.q_rope = in.q_rope;
    a.q_nope = in.q_nope;
    a.k_rope = in.k_rope;
    a.k_nope = in.k_nope;
    a.v = in.v;
    const HeadViews qo = split_heads(q_out_.data(), DType::kFloat8E4M3FN, kNnz, kHq, kD, kR);
    a.q_rope_out = qo.rope;
    a.q_nope_out = qo.nope;
    const KvCacheViews c = nhd_kv_cache(k_cache_.data(), v_cache_.data(), DType::kFloat8E4M3FN,
                                        kPages, kPageSize, kHk, kD, kR);
    a.k_cache_rope = c.k_rope;
    a.k_cache_nope = c.k_nope;
    a.v_cache = c.v;
    const std::int64_t cs[2] = {kMaxPos, kR};
    a.cos_sin_cache = make_contiguous(cos_.data(), DType::kFloat32, 2, cs);
    a.positions = make_vector(positions_.data(), DType::kInt64, kNnz);
    a.cache_index.slot_mapping = make_vector(slots_.data(), DType::kInt64, kNnz);
    a.q_scale = Scale::host(0.5f);
    a.k_scale = Scale::host(0.25f);
    a.v_scale = Scale::host(2.0f);
    return a;
  }

  Arguments PageTableBaseline() {
    Arguments a = Baseline();
    a.cache_index.form = Addressing::kPageTable;
    a.cache_index.slot_mapping = TensorView{};
    a.cache_index.kv_indices = make_vector(kv_indices_.data(), DType::kInt32, 4);
    a.cache_index.kv_indptr = make_vector(kv_indptr_.data(), DType::kInt32, 3);
    a.cache_index.batch_indices = make_vector(batch_.data(), DType::kInt32, kNnz);
    a.cache_index.kv_positions = make_vector(kv_positions_.data(), DType::kInt32, kNnz);
    return a;
  }

 protected:
  void ExpectNothingWritten() {
    const std::vector<unsigned char>* outs[] = {&q_out_, &k_cache_, &v_cache_};
    for (const auto* o : outs)
      for (unsigned char b : *o) ASSERT_EQ(b, kGuard) << "an output byte was written";
  }

  std::vector<float> qkv_ = std::vector<float>(kNnz * (kHq + 2 * kHk) * kD);
  std::vector<float> cos_ = std::vector<float>(kMaxPos * kR);
  std::vector<std::int64_t> positions_ = {3, 0, 9};
  std::vector<std::int64_t> slots_ = {1, 6, 13};
  std::vector<std::int32_t> kv_indices_ = {2, 0, 3, 1};
  std::vector<std::int32_t> kv_indptr_ = {0, 2, 4};
  std::vector<std::int32_t> batch_ = {0, 0, 1};
  std::vector<std::int32_t> kv_positions_ = {3, 0, 6};
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
      {"overlapping outputs",
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
