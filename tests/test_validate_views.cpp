// Validation tests (fixture: validate_fixture.hpp), the rules of each view: null
// pointers, dtypes, ranks, strides and contiguity, 64-bit spans, alignment.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "ropekv/ropekv.hpp"
#include "validate_fixture.hpp"

namespace ropekv_test {
namespace validation {
namespace {

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

TEST_F(Validate, NegativeRankIsNotAbsent) {
  // Rank 0 leaves the non-rotary part out (N = 0); a negative rank is a bad
  // view, not a silent N = 0.
  Arguments a = Baseline();
  a.q_nope = a.k_nope = a.q_nope_out = a.k_cache_nope = TensorView{};
  const Result absent = validate(a, Backend::kHost);
  ASSERT_TRUE(absent.ok()) << absent.message;
  a.q_nope.rank = -1;
  ExpectRejected(a, Status::kErrorInvalidRank, {"q_nope", "must have rank 3", "got -1"});
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

}  // namespace
}  // namespace validation
}  // namespace ropekv_test
