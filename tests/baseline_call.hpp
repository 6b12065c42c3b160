// The validation tests' one valid call, built on the buffers a fixture owns
// (tests/validate_fixture.hpp, tests/test_validate_nodevice.cpp): GQA, 3
// tokens, 4 query heads, 2 kv heads, head dim 12 with a rotary part of 8
// (N = 4), Dv = 12; 4 pages of 4 slots; 16 positions.
#pragma once

#include <cstdint>

#include "ropekv/ropekv.hpp"

namespace ropekv_test {
namespace baseline {

constexpr std::int64_t kNnz = 3;
constexpr std::int64_t kHq = 4;
constexpr std::int64_t kHk = 2;
constexpr std::int64_t kD = 12;
constexpr std::int64_t kR = 8;
constexpr std::int64_t kPages = 4;
constexpr std::int64_t kPageSize = 4;
constexpr std::int64_t kMaxPos = 16;

// Rows of the index arrays.
constexpr std::int64_t kPositions[kNnz] = {3, 0, 9};
constexpr std::int64_t kSlots[kNnz] = {1, 6, 13};
// Page table: 2 sequences of 2 pages each.
constexpr std::int32_t kKvIndices[4] = {2, 0, 3, 1};
constexpr std::int32_t kKvIndptr[3] = {0, 2, 4};
constexpr std::int32_t kBatchIndices[kNnz] = {0, 0, 1};
constexpr std::int32_t kKvPositions[kNnz] = {3, 0, 6};

// Where a fixture keeps the call's data; the index arrays hold the values
// above, the caches room for kPages * kPageSize * kHk * kD codes each.
struct Buffers {
  void* qkv = nullptr;
  ropekv::DType qkv_dtype = ropekv::DType::kBFloat16;
  std::int64_t qkv_row = 0;  // elements between tokens' rows (0: packed)
  void* q_out = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  void* cos_sin = nullptr;  // fp32, kMaxPos rows of kR
  void* positions = nullptr;
  void* slots = nullptr;
  void* kv_indices = nullptr;
  void* kv_indptr = nullptr;
  void* batch_indices = nullptr;
  void* kv_positions = nullptr;
};

// The Buffers of a fixture: the fused QKV rows (dtype, elements between rows,
// 0: packed), then the outputs, the cos/sin table and the index arrays in the
// order of Buffers.
inline Buffers buffers_at(void* qkv, ropekv::DType qkv_dtype, std::int64_t qkv_row, void* q_out,
                          void* k_cache, void* v_cache, void* cos_sin, void* positions, void* slots,
                          void* kv_indices, void* kv_indptr, void* batch_indices,
                          void* kv_positions) {
  return Buffers{qkv,       qkv_dtype, qkv_row,    q_out,     k_cache,       v_cache,     cos_sin,
                 positions, slots,     kv_indices, kv_indptr, batch_indices, kv_positions};
}

// Slot mapping: views into the fused QKV buffer, e4m3fn query output split
// into rope / nope, e4m3fn NHD caches, fp32 cos/sin table, int64 positions
// and slots, three unequal host scales.
inline ropekv::Arguments slot_mapping_call(const Buffers& b) {
  using ropekv::DType;
  ropekv::Arguments a;
  a.kind = ropekv::AttentionKind::kGqa;
  a.rope_style = ropekv::RopeStyle::kNeox;
  const ropekv::QkvViews in =
      ropekv::fused_qkv_views(b.qkv, b.qkv_dtype, kNnz, kHq, kHk, kD, kR, b.qkv_row);
  a.q_rope = in.q_rope;
  a.q_nope = in.q_nope;
  a.k_rope = in.k_rope;
  a.k_nope = in.k_nope;
  a.v = in.v;
  const ropekv::HeadViews qo =
      ropekv::split_heads(b.q_out, DType::kFloat8E4M3FN, kNnz, kHq, kD, kR);
  a.q_rope_out = qo.rope;
  a.q_nope_out = qo.nope;
  const ropekv::KvCacheViews c = ropekv::nhd_kv_cache(b.k_cache, b.v_cache, DType::kFloat8E4M3FN,
                                                      kPages, kPageSize, kHk, kD, kR);
  a.k_cache_rope = c.k_rope;
  a.k_cache_nope = c.k_nope;
  a.v_cache = c.v;
  const std::int64_t cos_ext[2] = {kMaxPos, kR};
  a.cos_sin_cache = ropekv::make_contiguous(b.cos_sin, DType::kFloat32, 2, cos_ext);
  a.positions = ropekv::make_vector(b.positions, DType::kInt64, kNnz);
  a.cache_index.form = ropekv::Addressing::kSlotMapping;
  a.cache_index.slot_mapping = ropekv::make_vector(b.slots, DType::kInt64, kNnz);
  a.q_scale = ropekv::Scale::host(0.5f);
  a.k_scale = ropekv::Scale::host(0.25f);
  a.v_scale = ropekv::Scale::host(2.0f);
  return a;
}

// The same call addressed by page table (int32 index arrays).
inline ropekv::Arguments page_table_call(const Buffers& b) {
  using ropekv::DType;
  ropekv::Arguments a = slot_mapping_call(b);
  a.cache_index.form = ropekv::Addressing::kPageTable;
  a.cache_index.slot_mapping = ropekv::TensorView{};
  a.cache_index.kv_indices = ropekv::make_vector(b.kv_indices, DType::kInt32, 4);
  a.cache_index.kv_indptr = ropekv::make_vector(b.kv_indptr, DType::kInt32, 3);
  a.cache_index.batch_indices = ropekv::make_vector(b.batch_indices, DType::kInt32, kNnz);
  a.cache_index.kv_positions = ropekv::make_vector(b.kv_positions, DType::kInt32, kNnz);
  return a;
}

}  // namespace baseline
}  // namespace ropekv_test
