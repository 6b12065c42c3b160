// Validation tests (fixture: validate_fixture.hpp), the call-wide rules: enum
// values, backends, scales, overlaps.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "ropekv/config.hpp"
#include "ropekv/ropekv.hpp"
#include "validate_fixture.hpp"

namespace ropekv_test {
namespace validation {
namespace {

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
}  // namespace validation
}  // namespace ropekv_test
