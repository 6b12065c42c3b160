// The decode kernel (fused_decode_kernel): launches that fit on the device
// at once with one unit per thread, the shortest chain of dependent loads.
#pragma once

#include "cuda/kernels/vec_unit.cuh"

namespace ropekv {
namespace detail {
namespace gpu {

// Blocks of kVecBlock threads per multiprocessor the decode kernel is
// compiled for: a cap of 48 registers (unbounded: 62), so that more of a
// decode batch fits on the device at once (perf/RESULTS.md); the bf16
// specialisations do not spill under it.
#ifndef ROPEKV_DECODE_MIN_BLOCKS
#define ROPEKV_DECODE_MIN_BLOCKS 5
#endif
constexpr int kDecodeMinBlocks = ROPEKV_DECODE_MIN_BLOCKS;

// For launches whose one-unit-per-thread grid fits on the device at once
// (decode batches): token blockIdx.y's units in blocks along blockIdx.x,
// each thread one unit, so each warp's chain is one unit long. Two layouts
// (the launcher's decode_layout):
//  * packed: unit u = blockIdx.x * blockDim.x + threadIdx.x of the token's
//    units (VecGeometry's order), each thread finding its part, head and
//    parameters at run time;
//  * by part (page tables, kIndexTable32, shapes without non-rotary parts:
//    kDecodeByPart): each row part starts on a warp of its own, and each
//    warp runs its part's compile-time body, which reads that part's
//    parameters directly, and whose query units skip the page look-ups (only
//    the cache parts need them; the form is unchecked). Elsewhere the packed
//    layout measured faster (perf/RESULTS.md). The warps are of 32 threads
//    (on HIP's 64-wide wavefronts two of them share one: correct, not tuned).
// A thread's loads go out in three steps, each as soon as what it depends on
// has arrived:
//   1. its token's index entries and, for a device scale, its part's scale;
//   2. once the index entries say the token is not padding: for a page
//      table first kv_indptr[b] (the head of the longest chain: kv_indices
//      follows it), then the unit's two input vectors and its cos/sin
//      values (position), all at once; the page entry once kv_indptr[b]
//      is in;
//   3. rotation, quantization and the two stores.
// Loading the inputs in step 1 (a padding token's rows may be read) measured
// slower (perf/RESULTS.md): their addresses' parameter reads hold up the
// warp's in-order issue ahead of the cos/sin loads.
// Without early_indices the kernel waits for the previous grid (PDL) before
// step 1; with it, steps 1 and 2 but the input loads happen before the wait,
// the input loads and the stores after it.

// The decode kernel's parameters: what it reads, in the order it first reads
// them (the geometry and flags, the index arrays, the unit's input and
// scale, cos/sin, the page look-ups, the output), so that the lines of the
// parameter bank come in as they are needed. The index-resolution members
// carry LaunchParams' names (load_token_indices, finish_plan).
struct DecodeParams {
  VecGeometry g = {};
  std::uint32_t num_q_heads = 0;
  bool checked = false;
  bool early_indices = false;
  Addressing addressing = Addressing::kSlotMapping;
  IndexArray slot_mapping, positions, batch_indices, kv_positions, kv_indptr, kv_indices;
  // Per row part (kRotQ .. kValue): its input rows (2-byte elements, token
  // and head strides) and where its output rows are (1-byte elements), with
  // query outputs addressed as (token, 0, head) and caches as (page, entry,
  // head) through the one cache_offset formula. One array per field, read
  // where it is used.
  const char* src[kParts] = {};
  std::int64_t src_token[kParts] = {}, src_head[kParts] = {};
  ScaleDivisor div[3] = {};            // host scales (by scale_index), made on the host
  const float* scale_ptr[3] = {};      // device scales (null: use div)
  ScaleConvention convention[3] = {};  // of the device scales
  const char* cos_sin = nullptr;
  std::int64_t cos_row_bytes = 0;
  RopeStyle style = RopeStyle::kNeox;
  int page_shift = -1;
  std::int64_t page_size = 0;
  std::int64_t batch_size = 0, num_kv_indices = 0, num_pages = 0, max_pos = 0;
  unsigned long long* skipped_tokens = nullptr;
  char* dst[kParts] = {};
  std::int64_t dst_page[kParts] = {}, dst_entry[kParts] = {}, dst_head[kParts] = {};
  // By part: a token's warps [warp_begin[P], warp_begin[P + 1]) take part
  // P's units[P] units (last: the packed layout does not read them).
  std::uint32_t warp_begin[kParts + 1] = {};
  std::uint32_t units[kParts] = {};
};

// The index forms of the decode kernel: any (read from DecodeParams at run
// time), or one of the two common forms fixed at compile time, so that a
// token's index resolution is a few instructions on the critical path:
// slot mapping with int64 slots and positions (vLLM), and a page table with
// int32 arrays and positions (FlashInfer, SGLang); both unchecked, with a
// power-of-two page size.
enum : int { kIndexAny = 0, kIndexSlot64 = 1, kIndexTable32 = 2 };

// The members load_token_indices, plan_begin and finish_plan read, for a fixed form:
// index arrays of fixed widths, no checks.
template <int kForm>
struct FixedIndex {
  static constexpr Addressing addressing =
      kForm == kIndexSlot64 ? Addressing::kSlotMapping : Addressing::kPageTable;
  static constexpr bool checked = false;
  static constexpr std::int64_t batch_size = 0, num_kv_indices = 0, num_pages = 0, max_pos = 0;
  FixedIndexArray<true> slot_mapping;
  FixedIndexArray<false> batch_indices;
  FixedIndexArray<false> kv_positions;
  FixedIndexArray<kForm == kIndexSlot64> positions;
  FixedIndexArray<false> kv_indptr;
  FixedIndexArray<false> kv_indices;
  int page_shift;
  std::int64_t page_size;
};
// A fixed form's page size is a power of two: (page, entry) by shift and
// mask (the overload finish_plan finds for FixedIndex).
template <int kForm>
__device__ __forceinline__ PageEntry page_of(const FixedIndex<kForm>& p, std::int64_t slot) {
  PageEntry pe;
  pe.page = slot >> p.page_shift;
  pe.entry = slot & (p.page_size - 1);
  return pe;
}
// The members the index resolution (load_token_indices, plan_begin,
// finish_plan) reads, in form kForm: the parameters themselves for
// kIndexAny, else their fixed-width view.
template <int kForm>
__device__ __forceinline__ decltype(auto) index_view(const DecodeParams& p) {
  if constexpr (kForm == kIndexAny) {
    return (p);  // a reference: the parameters, not a copy
  } else {
    return FixedIndex<kForm>{
        {p.slot_mapping.data}, {p.batch_indices.data}, {p.kv_positions.data}, {p.positions.data},
        {p.kv_indptr.data},    {p.kv_indices.data},    p.page_shift,          p.page_size};
  }
}

// The layout of a decode kernel: by part for page tables (kIndexTable32) and
// shapes without non-rotary parts; packed for the others, which measured
// faster so (perf/RESULTS.md).
template <int kForm, int kN>
constexpr bool kDecodeByPart = (kForm == kIndexTable32) && (kN == 0);

// The part of decode_unit's units: one part (by-part layout) or any
// (packed layout: found at run time).
constexpr std::uint32_t kAnyPart = kParts;

// Unit w of token t: the packed layout's unit w (P = kAnyPart), or unit w of
// part P (by-part layout); beyond the token's (or part's) units, nothing.
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, int kForm, std::uint32_t P>
__device__ __forceinline__ void decode_unit(const DecodeParams& p, std::uint32_t w,
                                            std::int64_t t) {
  using S = ShapeOf<kR, kN, kDv>;
  if (w >= (P == kAnyPart ? p.g.units : p.units[P])) return;
  if (!p.early_indices) dependency_wait();
  // 1. The token's index entries (the head of the chain), then the unit's
  //    input address and scale, which do not depend on them.
  const TokenIndices ix = load_token_indices(index_view<kForm>(p), t);
  UnitRef r;
  if constexpr (P == kAnyPart) {
    r = unit_ref<kR, kN, kDv>(p.g, p.num_q_heads, w);
  } else {
    const std::uint32_t subs = part_half<kR, kN, kDv>(p.g, P) / 8;  // units a row
    r.part = P;
    r.head = w / subs;
    r.sub = w - r.head * subs;
  }
  const uint4* x = reinterpret_cast<const uint4*>(
      param_at(p.src, r.part) +
      head_offset(t, r.head, param_at(p.src_token, r.part), param_at(p.src_head, r.part)) * 2);
  const std::uint32_t half = part_half<kR, kN, kDv>(p.g, r.part);
  uint4 va = {}, vb = {};
  const std::uint32_t which = scale_index(r.part);
  ScaleDivisor div = param_at(p.div, which);
  const float* scale_ptr = param_at(p.scale_ptr, which);
  const float dev_scale = scale_ptr != nullptr ? *scale_ptr : 0.f;
  // 2. Not padding: kv_indptr[b] (page tables), the unit's inputs, its
  //    cos/sin (checked mode: position in range first), the page entry.
  if (ix.key < 0) return;
  const bool cache = cache_part(r.part);
  // Page tables: kv_indptr[b] heads the longest chain. A query part's body
  // skips the look-ups (the fixed forms are unchecked).
  const bool plan_needed = P == kAnyPart || kForm == kIndexAny || cache;
  const std::int64_t begin = plan_needed ? plan_begin(index_view<kForm>(p), ix) : 0;
  if (!p.early_indices) {
    va = load_readonly(x + r.sub);
    vb = load_readonly(x + half / 8 + r.sub);
  }
  const bool rotary = r.part <= kRotK;
  float cv[8] = {}, sv[8] = {};
  const bool pos_ok = !p.checked || position_in_range(p, ix.pos);
  if (rotary && pos_ok)
    load_unit_cos<Cos>(p.style, S::rot_half(p.g), p.cos_sin + ix.pos * p.cos_row_bytes, r.sub, cv,
                       sv);
  if (scale_ptr != nullptr)  // while the cos/sin loads fly
    div = make_divisor(dev_scale, param_at(p.convention, which));
  TokenPlan plan;
  plan.write = true;
  if (plan_needed) plan = finish_plan(index_view<kForm>(p), ix, begin);
  if (!plan.write) {
    // Counted once a token: by its first unit (every unit plans where a
    // token can be bad).
    const bool first = P == kAnyPart ? w == 0 : blockIdx.x == 0 && threadIdx.x == 0;
    if (plan.bad && first && p.skipped_tokens != nullptr) atomicAdd(p.skipped_tokens, 1ull);
    return;
  }
  if (p.early_indices) {
    dependency_wait();
    va = load_readonly(x + r.sub);
    vb = load_readonly(x + half / 8 + r.sub);
  }
  // 3. The codes, then the address (a page-table entry may still be in
  //    flight while they are computed), then the stores.
  uint2 lo, hi;
  encode_unit<In, Out>(p.style, rotary, div, va, vb, cv, sv, lo, hi);
  const std::int64_t dst_stride[3] = {param_at(p.dst_page, r.part), param_at(p.dst_entry, r.part),
                                      param_at(p.dst_head, r.part)};
  char* dst = param_at(p.dst, r.part) +
              cache_offset(cache ? plan.page : t, cache ? plan.entry : 0, r.head, dst_stride);
  store_unit(dst, half, r.sub, lo, hi);
}

template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, int kForm>
__global__ void __launch_bounds__(kVecBlock, kDecodeMinBlocks)
    fused_decode_kernel(const DecodeParams p) {
  if constexpr (!kDecodeByPart<kForm, kN>) {  // packed
    const std::uint32_t u = blockIdx.x * blockDim.x + threadIdx.x;
    const std::int64_t t = blockIdx.y;
    dependents_launch();
    decode_unit<In, Out, Cos, kR, kN, kDv, kForm, kAnyPart>(p, u, t);
  } else {  // by part: the warp's part (uniform in the warp), the thread's unit in it
    static_assert(kR > 0 && kN == 0 && kDv > 0, "by part: specialised shapes without N");
    const std::int64_t t = blockIdx.y;
    dependents_launch();
    const std::uint32_t wi = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // of the token
    const auto unit = [&](std::uint32_t part) {
      return (wi - p.warp_begin[part]) * 32 + threadIdx.x % 32;
    };
    if (wi < p.warp_begin[kRotK])
      decode_unit<In, Out, Cos, kR, kN, kDv, kForm, kRotQ>(p, unit(kRotQ), t);
    else if (wi < p.warp_begin[kNopeQ])
      decode_unit<In, Out, Cos, kR, kN, kDv, kForm, kRotK>(p, unit(kRotK), t);
    else  // (and the last block's warps past the token's: no unit)
      decode_unit<In, Out, Cos, kR, kN, kDv, kForm, kValue>(p, unit(kValue), t);
  }
}

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
