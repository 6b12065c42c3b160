// The plain launch-parameters struct that validation lowers `Arguments` to,
// and the per-token index resolution every backend shares.
//
// Everything a backend needs is here, already checked: extents, element
// strides (int64), dtypes, raw pointers. Backends never look at `Arguments`.
#pragma once

#include <cstdint>

#include "detail/element_math.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv {
namespace detail {

// A [nnz, H, dim] view with a contiguous last dim.
struct HeadTensor {
  char* data = nullptr;                            // null when dim == 0
  std::int64_t token_stride = 0, head_stride = 0;  // elements
};
// A [P, ps, H, dim] cache view with a contiguous last dim.
struct CacheTensor {
  char* data = nullptr;
  std::int64_t stride[3] = {0, 0, 0};  // page, slot-in-page, head (elements)
};

struct LaunchParams {
  std::int64_t nnz = 0;
  std::int64_t num_q_heads = 0, num_kv_heads = 0;
  std::int64_t rotary_dim = 0, nope_dim = 0, v_dim = 0;  // R, N, Dv (Dv = 0 for MLA)
  std::int64_t max_pos = 0, page_size = 0, num_pages = 0;
  int page_shift = -1;  // log2(page_size) when it is a power of two, else -1

  AttentionKind kind = AttentionKind::kGqa;
  RopeStyle style = RopeStyle::kNeox;
  DType in_dtype = DType::kInvalid;     // q, k, v inputs
  DType q_out_dtype = DType::kInvalid;  // q_rope_out, q_nope_out
  DType cache_dtype = DType::kInvalid;  // k and v caches
  DType cos_dtype = DType::kInvalid;
  // Bytes per element of the four dtypes above (device code has no size_of).
  std::int64_t in_size = 0, q_out_size = 0, cache_size = 0, cos_size = 0;

  HeadTensor q_rope, q_nope, k_rope, k_nope, v;
  HeadTensor q_rope_out, q_nope_out;
  CacheTensor k_cache_rope, k_cache_nope, v_cache;

  const char* cos_sin = nullptr;
  std::int64_t cos_row_stride = 0;  // elements

  const void* positions = nullptr;
  bool positions_i64 = false;

  Addressing addressing = Addressing::kSlotMapping;
  const void* slot_mapping = nullptr;
  bool slot_i64 = false;
  const void* kv_indices = nullptr;
  const void* kv_indptr = nullptr;
  const void* batch_indices = nullptr;
  const void* kv_positions = nullptr;
  bool kv_indices_i64 = false, kv_indptr_i64 = false, batch_i64 = false, kv_positions_i64 = false;
  std::int64_t batch_size = 0, num_kv_indices = 0;

  // Scales (FP8 outputs only; make_divisor): a device pointer wins over the
  // value. Pointers are null where a scale is not read (non-FP8 output,
  // absent tensor).
  float q_scale = 1.f, k_scale = 1.f, v_scale = 1.f;
  const float* q_scale_ptr = nullptr;
  const float* k_scale_ptr = nullptr;
  const float* v_scale_ptr = nullptr;
  ScaleConvention q_scale_convention = ScaleConvention::kDivide;
  ScaleConvention k_scale_convention = ScaleConvention::kDivide;
  ScaleConvention v_scale_convention = ScaleConvention::kDivide;

  bool checked = false;
  unsigned long long* skipped_tokens = nullptr;

  void* stream = nullptr;
  bool pdl = false;
  // With pdl: index arrays, positions, cos/sin and device scales may be read
  // before the wait on the previous grid (Arguments::indices_ready_before_previous_kernel).
  bool early_indices = false;
};

// What a backend does with token t.
struct TokenPlan {
  bool write = false;    // false: padding or (checked mode) a bad index
  bool bad = false;      // checked mode: skipped for a bad index, to be counted
  std::int64_t pos = 0;  // RoPE position
  std::int64_t page = 0, entry = 0;
};

// Token t's own entries of the index arrays. They are read together, first,
// so that their latencies overlap; nothing else of a token is read before
// its slot (or batch index) says it is not padding.
struct TokenIndices {
  std::int64_t key = -1;    // slot (slot mapping) or batch index (page table); < 0 = padding
  std::int64_t kv_pos = 0;  // page table only
  std::int64_t pos = 0;     // RoPE position
};

// P: LaunchParams, or a backend's compact copy with the same member names.
template <class P>
ROPEKV_HD TokenIndices load_token_indices(const P& p, std::int64_t t) {
  TokenIndices ix;
  if (p.addressing == Addressing::kSlotMapping) {
    ix.key = read_index(p.slot_mapping, p.slot_i64, t);
  } else {
    ix.key = read_index(p.batch_indices, p.batch_i64, t);
    ix.kv_pos = read_index(p.kv_positions, p.kv_positions_i64, t);
  }
  ix.pos = read_index(p.positions, p.positions_i64, t);
  return ix;
}

// (page, entry) of a position within the sequence / a slot: shift and mask
// when the page size is a power of two (page_shift >= 0), else divide.
template <class P>
ROPEKV_HD PageEntry page_of(const P& p, std::int64_t slot) {
  if (p.page_shift >= 0) {
    PageEntry pe;
    pe.page = slot >> p.page_shift;
    pe.entry = slot & (p.page_size - 1);
    return pe;
  }
  return split_slot(slot, p.page_size);
}

// Checked mode's rule for a RoPE position: a row of the cos/sin table.
template <class P>
ROPEKV_HD bool position_in_range(const P& p, std::int64_t pos) {
  return pos >= 0 && pos < p.max_pos;
}

// The rest of the plan: the page-table look-ups (dependent reads) and, in
// checked mode, the bounds checks. Checked mode exists for garbage indices,
// so its arithmetic cannot overflow: the page-table entry j = kv_indptr[b] +
// page is formed only once 0 <= kv_indptr[b] and page < num_kv_indices -
// kv_indptr[b] are known (page >= 0 there, so j < num_kv_indices).
template <class P>
ROPEKV_HD TokenPlan finish_plan(const P& p, const TokenIndices& ix) {
  TokenPlan plan;
  if (ix.key < 0) return plan;  // padding
  bool ok = true;
  if (p.addressing == Addressing::kSlotMapping) {
    const PageEntry pe = page_of(p, ix.key);
    plan.page = pe.page;
    plan.entry = pe.entry;
  } else {
    const std::int64_t b = ix.key;
    if (p.checked) ok = b < p.batch_size && ix.kv_pos >= 0;
    if (ok) {
      const PageEntry pe = page_of(p, ix.kv_pos);  // (page within the sequence, entry)
      const std::int64_t begin = read_index(p.kv_indptr, p.kv_indptr_i64, b);
      if (p.checked) {
        const std::int64_t end = read_index(p.kv_indptr, p.kv_indptr_i64, b + 1);
        ok = begin >= 0 && pe.page < p.num_kv_indices - begin && begin + pe.page < end;
      }
      if (ok) {
        plan.page = read_index(p.kv_indices, p.kv_indices_i64, begin + pe.page);
        plan.entry = pe.entry;
      }
    }
  }
  plan.pos = ix.pos;
  if (p.checked && ok) {
    ok = plan.page >= 0 && plan.page < p.num_pages && position_in_range(p, plan.pos);
  }
  plan.write = ok;
  plan.bad = !ok;
  return plan;
}

ROPEKV_HD TokenPlan plan_token(const LaunchParams& p, std::int64_t t) {
  return finish_plan(p, load_token_indices(p, t));
}

}  // namespace detail
}  // namespace ropekv
