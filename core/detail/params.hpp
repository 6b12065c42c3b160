// The launch parameters that validation lowers `Arguments` to, and all of
// the addressing every backend shares: index arrays, row and cache entry
// addresses, the per-token index resolution. (The element math is in
// element_math.hpp.)
//
// Everything a backend needs is here, already checked: extents, element
// strides (int64), dtypes, raw pointers. Backends never look at `Arguments`.
#pragma once

#include <cstdint>
#include <type_traits>

#include "detail/element_math.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv {
namespace detail {

// ------------------------------------------------------------- index arrays
// An index array (slots, page table, positions) of int32 or int64 elements.
struct IndexArray {
  const void* data = nullptr;
  bool i64 = false;
  ROPEKV_HD std::int64_t operator[](std::int64_t i) const {
    return i64 ? static_cast<const std::int64_t*>(data)[i]
               : std::int64_t(static_cast<const std::int32_t*>(data)[i]);
  }
};
// The same with its width fixed at compile time (the decode kernel's forms).
template <bool kI64>
struct FixedIndexArray {
  const void* data;
  ROPEKV_HD std::int64_t operator[](std::int64_t i) const {
    if constexpr (kI64) {
      return static_cast<const std::int64_t*>(data)[i];
    } else {
      return std::int64_t(static_cast<const std::int32_t*>(data)[i]);
    }
  }
};

// ------------------------------------------------------------- tensors
// The element offset of (page, entry, head) in a cache view with strides
// (page, entry in page, head): the one cache addressing formula, 64-bit.
ROPEKV_HD std::int64_t cache_offset(std::int64_t page, std::int64_t entry, std::int64_t head,
                                    const std::int64_t* strides) {
  return page * strides[0] + entry * strides[1] + head * strides[2];
}

// The element offset of row (token t, head h) in a [nnz, H, dim] view with
// strides (token, head): the one row addressing formula.
ROPEKV_HD std::int64_t head_offset(std::int64_t t, std::int64_t h, std::int64_t token_stride,
                                   std::int64_t head_stride) {
  return t * token_stride + h * head_stride;
}

// A [nnz, H, dim] view with a contiguous last dim.
struct HeadTensor {
  char* data = nullptr;                            // null when dim == 0
  std::int64_t token_stride = 0, head_stride = 0;  // elements
  // Row (token t, head h), of elements of `es` bytes.
  ROPEKV_HD char* row(std::int64_t t, std::int64_t h, std::int64_t es) const {
    return data + head_offset(t, h, token_stride, head_stride) * es;
  }
};
// A [P, ps, H, dim] cache view with a contiguous last dim.
struct CacheTensor {
  char* data = nullptr;
  std::int64_t stride[3] = {0, 0, 0};  // page, entry in page, head (elements)
  // The row of (page, entry, head), of elements of `es` bytes.
  ROPEKV_HD char* row(std::int64_t page, std::int64_t entry, std::int64_t head,
                      std::int64_t es) const {
    return data + cache_offset(page, entry, head, stride) * es;
  }
};

// An element type: its dtype and, for device code (which cannot ask
// size_of), its bytes.
struct ElementType {
  DType dtype = DType::kInvalid;
  std::int64_t bytes = 0;
};

// A per-tensor scale where it lives: a host value or a device pointer (which
// wins; null where the scale is not read), and its convention.
struct ScaleParam {
  float value = 1.f;
  const float* device = nullptr;
  ScaleConvention convention = ScaleConvention::kDivide;
  // The quantization step of scale value s in this convention.
  ROPEKV_HD ScaleDivisor divisor_of(float s) const { return make_divisor(s, convention); }
  // Of the scale itself (device code: after the dependency wait).
  ROPEKV_HD ScaleDivisor divisor() const { return divisor_of(device != nullptr ? *device : value); }
};

// ------------------------------------------------------------- launch parameters
struct LaunchParams {
  std::int64_t nnz = 0;
  std::int64_t num_q_heads = 0, num_kv_heads = 0;
  std::int64_t rotary_dim = 0, nope_dim = 0, v_dim = 0;  // R, N, Dv (Dv = 0 for MLA)
  std::int64_t max_pos = 0, page_size = 0, num_pages = 0;
  int page_shift = -1;  // log2(page_size) when it is a power of two, else -1

  AttentionKind kind = AttentionKind::kGqa;
  RopeStyle style = RopeStyle::kNeox;
  ElementType in;     // q, k, v inputs
  ElementType q_out;  // q_rope_out, q_nope_out
  ElementType cache;  // k and v caches
  ElementType cos;    // the cos/sin table

  HeadTensor q_rope, q_nope, k_rope, k_nope, v;
  HeadTensor q_rope_out, q_nope_out;
  CacheTensor k_cache_rope, k_cache_nope, v_cache;

  const char* cos_sin = nullptr;
  std::int64_t cos_row_stride = 0;  // elements

  IndexArray positions;
  Addressing addressing = Addressing::kSlotMapping;
  IndexArray slot_mapping;                                        // kSlotMapping
  IndexArray kv_indices, kv_indptr, batch_indices, kv_positions;  // kPageTable
  std::int64_t batch_size = 0, num_kv_indices = 0;

  // FP8 outputs only: a scale's device pointer is null where it is not read
  // (non-FP8 output, absent tensor).
  ScaleParam q_scale, k_scale, v_scale;

  bool checked = false;
  unsigned long long* skipped_tokens = nullptr;

  void* stream = nullptr;
  bool pdl = false;
  // With pdl: index arrays, positions, cos/sin and device scales may be read
  // before the wait on the previous grid (Arguments::indices_ready_before_previous_kernel).
  bool early_indices = false;
};

// A caller's launch state (a PreparedCall's): room for a backend to keep
// its decision for the caller's launches, which differ only in the fields a
// step may change (lower_data). `valid` false: nothing kept.
struct LaunchState {
  static constexpr std::size_t kBytes = 1024;
  bool valid = false;
  alignas(16) unsigned char bytes[kBytes];
};

// The three scale divisors of a launch (q, k, v).
struct Divisors {
  ScaleDivisor q, k, v;
};
ROPEKV_HD Divisors load_divisors(const LaunchParams& p) {
  Divisors d;
  d.q = p.q_scale.divisor();
  d.k = p.k_scale.divisor();
  d.v = p.v_scale.divisor();
  return d;
}

// ------------------------------------------------------------- tokens
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
// I: the entries' integer type, int64 but in an index view (P) that names a
// narrower one (P::Index: its arrays' common width), so that a kernel holding
// several tokens' entries holds them in fewer registers.
template <class I>
struct TokenIndicesOf {
  I key = -1;    // slot (slot mapping) or batch index (page table); < 0 = padding
  I kv_pos = 0;  // page table only
  I pos = 0;     // RoPE position
};
using TokenIndices = TokenIndicesOf<std::int64_t>;
template <class P, class = void>
struct IndexTypeOf {
  using type = std::int64_t;
};
template <class P>
struct IndexTypeOf<P, std::void_t<typename P::Index>> {
  using type = typename P::Index;
};
template <class P>
using IndexType = typename IndexTypeOf<P>::type;

// P: LaunchParams, or a backend's compact copy with the same member names.
template <class P>
ROPEKV_HD TokenIndicesOf<IndexType<P>> load_token_indices(const P& p, std::int64_t t) {
  using I = IndexType<P>;
  TokenIndicesOf<I> ix;
  if (p.addressing == Addressing::kSlotMapping) {
    ix.key = I(p.slot_mapping[t]);
  } else {
    ix.key = I(p.batch_indices[t]);
    ix.kv_pos = I(p.kv_positions[t]);
  }
  ix.pos = I(p.positions[t]);
  return ix;
}

// (page, entry) of a slot, or of a position within a sequence.
struct PageEntry {
  std::int64_t page, entry;
};
// Shift and mask when the page size is a power of two (page_shift >= 0), else divide.
template <class P>
ROPEKV_HD PageEntry page_of(const P& p, std::int64_t slot) {
  PageEntry pe;
  if (p.page_shift >= 0) {
    pe.page = slot >> p.page_shift;
    pe.entry = slot & (p.page_size - 1);
  } else {
    pe.page = slot / p.page_size;
    pe.entry = slot % p.page_size;
  }
  return pe;
}

// Checked mode's rule for a RoPE position: a row of the cos/sin table.
template <class P>
ROPEKV_HD bool position_in_range(const P& p, std::int64_t pos) {
  return pos >= 0 && pos < p.max_pos;
}

// The first page-table look-up of a plan: kv_indptr[b], the sequence's
// first entry (0, nothing read, for slot mapping, padding and, in checked
// mode, a bad batch index or position). A kernel may issue it before its
// other loads (it heads the longest chain) and pass it to finish_plan.
template <class P, class I>
ROPEKV_HD I plan_begin(const P& p, const TokenIndicesOf<I>& ix) {
  if (p.addressing == Addressing::kSlotMapping || ix.key < 0) return 0;
  if (p.checked && !(ix.key < p.batch_size && ix.kv_pos >= 0)) return 0;
  return I(p.kv_indptr[ix.key]);
}

// The rest of the plan: the page-table look-ups (dependent reads; `begin`
// from plan_begin) and, in checked mode, the bounds checks. Checked mode
// exists for garbage indices, so its arithmetic cannot overflow: the
// page-table entry j = kv_indptr[b] + page is formed only once 0 <=
// kv_indptr[b] and page < num_kv_indices - kv_indptr[b] are known (page >= 0
// there, so j < num_kv_indices).
template <class P, class I>
ROPEKV_HD TokenPlan finish_plan(const P& p, const TokenIndicesOf<I>& ix, std::int64_t begin) {
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
      if (p.checked) {
        const std::int64_t end = p.kv_indptr[b + 1];
        ok = begin >= 0 && pe.page < p.num_kv_indices - begin && begin + pe.page < end;
      }
      if (ok) {
        plan.page = p.kv_indices[begin + pe.page];
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
template <class P, class I>
ROPEKV_HD TokenPlan finish_plan(const P& p, const TokenIndicesOf<I>& ix) {
  return finish_plan(p, ix, plan_begin(p, ix));
}

ROPEKV_HD TokenPlan plan_token(const LaunchParams& p, std::int64_t t) {
  return finish_plan(p, load_token_indices(p, t));
}

}  // namespace detail
}  // namespace ropekv
