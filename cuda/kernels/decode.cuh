// The decode kernel (fused_decode_kernel): one unit per thread, the shortest
// chain of dependent loads; for launches that fit on the device at once and
// mid-size ones of a few waves (the launcher's rule).
#pragma once

#include <type_traits>

#include "cuda/kernels/vec_unit.cuh"

namespace ropekv {
namespace detail {
namespace gpu {

// Blocks of kVecBlock threads per multiprocessor the decode kernel is
// compiled for: 4 (a cap of 64 registers: no spills) for the specialised
// shapes with few non-rotary elements a head, 5 (48 registers, so that more
// of a batch fits on the device at once) for MLA's (a 256-token call fits
// at once only so) and the run-time shape's; for the former 64 measured
// faster than 48 (perf/RESULTS.md). The MLA kernels' lean bodies spill at 48.
// MLA's kernels also have a 64-register twin (kDecodeFewBlocks), which the
// launcher takes where its grid fits on the device at once too.
constexpr int kDecodeFewMinBlocks = 4, kDecodeManyMinBlocks = 5;
template <int kR, int kN>
constexpr int kDecodeMinBlocks = (kR > 0 && kN <= 2 * kR) ? kDecodeFewMinBlocks
                                                          : kDecodeManyMinBlocks;
template <int kR, int kN>
constexpr bool kDecodeFewBlocks = kR > 0 && kDecodeMinBlocks<kR, kN> == kDecodeManyMinBlocks;

// Token blockIdx.y's units in blocks along blockIdx.x, each thread one unit,
// so each warp's chain is one unit long. Three layouts (the launcher's
// decode_layout):
//  * packed (slot mapping and the run-time index form): unit u = blockIdx.x *
//    blockDim.x + threadIdx.x of the token's units (VecGeometry's order),
//    each thread finding its part, head and parameters at run time;
//  * by part (page tables, kIndexTable32, shapes without non-rotary parts:
//    kDecodeByPart): each row part starts on a warp of its own, and each
//    warp runs its part's compile-time body, which reads that part's
//    parameters directly, and whose query units skip the page look-ups (only
//    the cache parts need them; the form is unchecked);
//  * by role (the same for shapes with non-rotary parts, where the vendor
//    layer takes it: kDecodeByRole): the query's parts on a token's first
//    warps, the cache's after them, each thread finding its part within its
//    role; the query role's warps skip the look-ups.
// Each measured faster than packed where it is taken, packed faster for slot
// mapping (perf/RESULTS.md). The warps are of 32 threads (on HIP's 64-wide
// wavefronts two of them share one: correct, not tuned).
// A thread's loads go out in three steps, each as soon as what it depends on
// has arrived:
//   1. its token's index entries and, for a device scale, its part's scale;
//      its two input vectors too (a padding token's rows may be read):
//      the 2D grid's packed layout loads them here, its page-table layouts
//      prefetch them into the L2 (kInputs);
//   2. once the index entries say the token is not padding: for a page
//      table first kv_indptr[b] (the head of the longest chain: kv_indices
//      follows it), then the unit's two input vectors (where step 1 did not
//      load them) and its cos/sin values (position), all at once; the page
//      entry once kv_indptr[b] is in;
//   3. rotation, quantization and the two stores.
// Without early_indices the kernel waits for the previous grid (PDL) before
// step 1; with it, steps 1 and 2 but the input loads happen before the wait,
// the input loads and the stores after it.
// PDL's trigger: the blocks of a launch's first kLateTriggerToken tokens let
// the next grid launch at their start, the others once past the wait (with
// early indices, once they have read that flag). A grid lets the next one
// in when all its blocks have, so a launch of up to kLateTriggerToken tokens
// does at its start and a larger one once past the wait: there the next
// grid's blocks, let in at the start, held this one's back (perf/RESULTS.md).
// The start's test reads no parameter: one held the trigger up by a
// constant-bank line miss.
constexpr std::int64_t kLateTriggerToken = 32;
// Where a unit's input loads go (decode_unit's kInputs): after the padding
// test; before it (the 2D packed layout, whose input address is ready
// then: kAddressFirst); or after it, with an L2 prefetch of their lines
// before it (the 2D page-table layouts, where the compiler keeps the loads
// themselves behind the test), in launches of at most kPrefetchThreads
// threads: in larger ones, whose data stay in the L2, the prefetches only
// cost issue slots and L2 requests (perf/RESULTS.md).
enum : int { kInputsAfterTest = 0, kInputsBeforeTest = 1, kInputsPrefetched = 2 };
constexpr std::uint64_t kPrefetchThreads = 65536;

// One row part's parameters (kRotQ .. kValue), 64 bytes: one line of the
// constant cache, so a warp's part costs it one line, fetched by the first
// of these reads and hit by the rest (the destination's, read last). Input
// rows of 2-byte elements, outputs of 1-byte elements: query outputs
// addressed as (token, 0, head), caches as (page, entry, head) through the
// one cache_offset formula. Strides in elements, 32-bit (the launcher takes
// the decode path only where they fit: decode_fits).
struct DecodePart {
  const char* src = nullptr;
  char* dst = nullptr;
  const float* scale_ptr = nullptr;  // device scale (null: div)
  ScaleDivisor div = {};             // host scale's divisor, made on the host
  std::int32_t src_token = 0, src_head = 0;
  std::int32_t dst_page = 0, dst_entry = 0, dst_head = 0;
  std::uint16_t units = 0;    // by part: the part's units a token
  std::uint8_t multiply = 0;  // device scale's convention: 1 kMultiply
  std::uint8_t pad_ = 0;
};
static_assert(sizeof(DecodePart) == 64, "a part's parameters fill one 64-byte line");

// The decode kernel's bodies (DecodeParams::body, with the RoPE style in the
// low bit): kBodyLean has the style fixed at compile time and only the
// scale step's Markstein form (the launcher takes it where no host divisor
// needs IEEE division; a thread whose device scale does starts again in the
// general body before it stores anything), so the common call's instructions
// run straight, without the other forms' code between them (faster:
// perf/RESULTS.md); kBodyGeneral tests both at run time.
enum : std::uint8_t { kBodyLean = 0, kBodyGeneral = 2 };

// The decode kernel's parameters, laid out by when a thread first reads them,
// in 64-byte lines of the parameter bank: a warp stalls on each line it first
// reads with an immediate operand (perf/RESULTS.md), so the lines a token's
// chain needs before its loads are as few as can be:
//  * the header (48 bytes: on sm_90 the parameters start at bank offset
//    0x210, so it ends the first line): the layout's unit counts and flags;
//  * one line: the index arrays and the cos/sin table, every fixed form's
//    first loads;
//  * one line a row part (DecodePart);
//  * what only the run-time index form reads (widths, bounds, the counter).
// The index-resolution members carry LaunchParams' names (load_token_indices,
// finish_plan) in the views index_view makes.
struct DecodeParams {
  // The first line: what a token's first loads need (the bank's first line,
  // read at every kernel's start, holds it too). Packed layout: units, and
  // in warp_k and warp_v copies of rot_units and num_q_heads (what a unit's
  // part needs where the shape has no non-rotary parts); by part: the first
  // warps of the key and the value part (the query part's is 0).
  const void* slot_mapping = nullptr;
  const void* positions = nullptr;
  const void* batch_indices = nullptr;
  const void* kv_positions = nullptr;
  std::uint32_t units = 0;
  std::uint32_t warp_k = 0, warp_v = 0;
  bool early_indices = false;
  bool checked = false;
  std::uint8_t body = 0;        // kBodyLean or kBodyGeneral, | RopeStyle
  std::uint8_t addressing = 0;  // Addressing
  // The second: the packed layout's unit boundaries (VecGeometry's), the
  // cos/sin table, the page look-ups.
  std::uint32_t rot_units = 0, q_nope_end = 0, k_nope_end = 0;
  std::uint32_t num_q_heads = 0;
  std::uint32_t rot_sub = 0, nope_sub = 0, v_sub = 0;  // read where kR == 0
  std::int32_t page_shift = -1;
  const char* cos_sin = nullptr;
  std::int64_t cos_row_bytes = 0;
  const void* kv_indptr = nullptr;
  const void* kv_indices = nullptr;
  DecodePart part[kParts] = {};
  // The run-time form's: index widths (slot_mapping .. kv_indices), bounds.
  bool i64[6] = {};
  std::int64_t page_size = 0;
  std::int64_t batch_size = 0, num_kv_indices = 0, num_pages = 0, max_pos = 0;
  unsigned long long* skipped_tokens = nullptr;

  // The unit geometry the shared unit helpers take.
  __device__ __forceinline__ VecGeometry geometry() const {
    VecGeometry g = {};
    g.rot_sub = rot_sub;
    g.nope_sub = nope_sub;
    g.v_sub = v_sub;
    g.rot_units = rot_units;
    g.q_nope_end = q_nope_end;
    g.k_nope_end = k_nope_end;
    g.units = units;
    return g;
  }
};
static_assert(offsetof(DecodeParams, rot_units) == 48 && offsetof(DecodeParams, part) == 112,
              "the header ends the bank's first line, each later group starts a line");

// Field m of part i's parameters: an indexed parameter load where the vendor
// addresses the parameter bank (kParamsAddressable); else every part's value
// is read first and one of them picked (a pick among the members' addresses
// makes the AMDGPU compiler copy the parameters to scratch memory).
template <class T>
__device__ __forceinline__ T part_field(const DecodeParams& p, std::uint32_t i, T DecodePart::*m) {
  if constexpr (kParamsAddressable) {
    return p.part[i].*m;
  } else if constexpr (std::is_same_v<T, ScaleDivisor>) {
    float d[kParts], r[kParts], c[kParts];
    std::uint32_t mode[kParts];
#pragma unroll
    for (std::uint32_t k = 0; k < kParts; ++k) {
      const ScaleDivisor& v = p.part[k].*m;
      d[k] = v.divisor;
      r[k] = v.recip;
      c[k] = v.correct;
      mode[k] = v.mode;
    }
    return ScaleDivisor{d[i], r[i], c[i], mode[i]};
  } else {
    T v[kParts];
#pragma unroll
    for (std::uint32_t k = 0; k < kParts; ++k) v[k] = p.part[k].*m;
    return v[i];
  }
}

// The members load_token_indices, plan_begin and finish_plan read in the
// run-time form: DecodeParams' own (the fixed forms: FixedIndex).
struct AnyIndex {
  Addressing addressing;
  bool checked;
  IndexArray slot_mapping, batch_indices, kv_positions, positions, kv_indptr, kv_indices;
  int page_shift;
  std::int64_t page_size, batch_size, num_kv_indices, num_pages, max_pos;
};
// The index resolution's view of p in form kForm.
template <int kForm>
__device__ __forceinline__ auto index_view(const DecodeParams& p) {
  if constexpr (kForm == kIndexAny) {
    return AnyIndex{Addressing(p.addressing),
                    p.checked,
                    {p.slot_mapping, p.i64[0]},
                    {p.batch_indices, p.i64[2]},
                    {p.kv_positions, p.i64[3]},
                    {p.positions, p.i64[1]},
                    {p.kv_indptr, p.i64[4]},
                    {p.kv_indices, p.i64[5]},
                    p.page_shift,
                    p.page_size,
                    p.batch_size,
                    p.num_kv_indices,
                    p.num_pages,
                    p.max_pos};
  } else {
    return FixedIndex<kForm>{{p.slot_mapping}, {p.batch_indices}, {p.kv_positions}, {p.positions},
                             {p.kv_indptr},    {p.kv_indices},    p.page_shift};
  }
}

// The layout of a decode kernel: warp-uniform for page tables (kIndexTable32),
// by part for shapes without non-rotary parts, by role for the others where
// the vendor layer takes it (kDecodeByRole); packed otherwise (perf/RESULTS.md).
template <int kForm, int kN>
constexpr bool kDecodeByPart = kForm == kIndexTable32 && (kN == 0 || kDecodeByRole);

// The part of decode_unit's units: one part (by-part layout) or any
// (packed layout: found at run time).
constexpr std::uint32_t kAnyPart = kParts;
// The by-role layout's roles: the query's parts (Hq rope rows, then Hq nope
// rows) and the cache's (Hk key rope rows, key nope rows, value rows).
constexpr std::uint32_t kQueryRole = kParts + 1, kCacheRole = kParts + 2;

// A role's units a token, and its unit w.
template <int kR, int kN, int kDv, std::uint32_t P>
__device__ __forceinline__ std::uint32_t role_units(const VecGeometry& g, std::uint32_t hq) {
  const std::uint32_t query = hq * ShapeOf<kR, kN, kDv>::rot_sub(g) + g.q_nope_end - g.rot_units;
  return P == kQueryRole ? query : g.units - query;
}
template <int kR, int kN, int kDv, std::uint32_t P>
__device__ __forceinline__ UnitRef role_unit_ref(const VecGeometry& g, std::uint32_t hq,
                                                 std::uint32_t w) {
  using S = ShapeOf<kR, kN, kDv>;
  constexpr bool kQuery = P == kQueryRole;
  const std::uint32_t rs = S::rot_sub(g), ns = unit_divisor(S::nope_sub(g));
  const std::uint32_t vs = unit_divisor(S::v_sub(g));
  const std::uint32_t rope = kQuery ? hq * rs : g.rot_units - hq * rs;
  const std::uint32_t nope = kQuery ? g.q_nope_end - g.rot_units : g.k_nope_end - g.q_nope_end;
  UnitRef r;
  if (w < rope) {
    r.part = kQuery ? kRotQ : kRotK;
    split_unit(w, rs, r);
  } else if (kQuery || w < rope + nope) {
    r.part = kQuery ? kNopeQ : kNopeK;
    split_unit(w - rope, ns, r);
  } else {  // (never reached for MLA)
    r.part = kValue;
    split_unit(w - rope - nope, vs, r);
  }
  return r;
}

// A unit's input vector: evict-first in the flat layout's streaming kernels
// (kStream: launches whose bytes exceed the L2, so that it keeps the index
// arrays, cos/sin rows and cache lines), else read-only cached (evict-first
// measured slower in the 2D grid at 1-8 tokens, and a run-time choice
// between the two slower in the flat layout: perf/RESULTS.md). kAfterWait:
// the early-index path's loads, which follow the PDL wait in the middle of
// the kernel: coherent (load_coherent), as the assembler moved a read-only
// load above that wait (the other paths wait at the kernel's start).
template <bool kStream, bool kAfterWait = false>
__device__ __forceinline__ uint4 load_unit_input(const uint4* x) {
  if constexpr (kStream) {
    return load_input(x);
  } else if constexpr (kAfterWait) {
    return load_coherent(x);
  } else {
    return load_readonly(x);
  }
}

// decode_unit's phases: the whole unit; its steps up to the input loads
// (kPhaseHead: every load of step 1 and the inputs issued, nothing stored),
// into a UnitHead; the rest from one (kPhaseTail). The flat layout with two
// units a thread runs both units' heads before either's tail, so that both
// units' inputs are in flight at once.
enum : int { kPhaseWhole = 0, kPhaseHead = 1, kPhaseTail = 2 };
// What the head finds, X(type, name) each (Ix: the token's index entries'
// type): UnitHead's fields, and decode_unit's own locals for the whole unit.
// cache: a cache part or role.
// clang-format off
#define ROPEKV_UNIT_HEAD(X, Ix)                                                  \
  X(Ix, ix) X(UnitRef, r) X(const uint4*, x) X(std::uint32_t, half)              \
  X(uint4, va) X(uint4, vb) X(ScaleDivisor, div) X(const float*, scale_ptr)      \
  X(float, dev_scale) X(std::int64_t, begin) X(bool, cache)
// clang-format on
#define ROPEKV_UNIT_HEAD_FIELD(T, name) T name;
template <int kForm>
struct UnitHead {
  using Ix = decltype(load_token_indices(index_view<kForm>(DecodeParams{}), 0));
  ROPEKV_UNIT_HEAD(ROPEKV_UNIT_HEAD_FIELD, Ix)
  bool go;  // the head left the tail to run (not past the units, not padding)
};
#undef ROPEKV_UNIT_HEAD_FIELD

// Unit w of token t: the packed layout's unit w (P = kAnyPart), unit w of
// part P (by-part layout) or of role P (kQueryRole, kCacheRole: by-role
// layout); beyond the token's (or part's, or role's) units, nothing.
// kStyle >= 0: the lean body of that RopeStyle, which returns false, having
// stored nothing, where a device scale needs IEEE division; -1: the general
// body (always true). kStream: load_unit_input's. kAddressFirst, kInputs:
// see the padding test. kPhase: the steps it runs, with `state` the
// UnitHead between them (kPhaseWhole: none).
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, int kForm, std::uint32_t P,
          int kStyle, bool kStream, bool kAddressFirst, int kInputs, int kPhase = kPhaseWhole>
__device__ __forceinline__ bool decode_unit(const DecodeParams& p, std::uint32_t w, std::int64_t t,
                                            UnitHead<kForm>* state = nullptr) {
  using S = ShapeOf<kR, kN, kDv>;
  const VecGeometry g = p.geometry();
  // What the head finds: the whole unit's own locals (one each: in one
  // struct the compiler placed their loads otherwise), else the state's.
  constexpr bool kOwn = kPhase == kPhaseWhole;
#define ROPEKV_UNIT_HEAD_LOCAL(T, name) \
  T own_##name;                         \
  T& name = kOwn ? own_##name : state->name;
  ROPEKV_UNIT_HEAD(ROPEKV_UNIT_HEAD_LOCAL, typename UnitHead<kForm>::Ix)
#undef ROPEKV_UNIT_HEAD_LOCAL
  constexpr bool kRole = P == kQueryRole || P == kCacheRole;
  // The part's fields, each read where it is used (P: at compile time).
  const auto field = [&](auto DecodePart::*m) {
    return part_field(p, P == kAnyPart || kRole ? r.part : P, m);
  };
  // Page tables: kv_indptr[b] heads the longest chain. A query part's or
  // role's body skips the look-ups (the fixed forms are unchecked).
  const auto plan_needed = [&] { return P == kAnyPart || kForm == kIndexAny || cache; };
  if constexpr (kPhase != kPhaseTail) {
    if constexpr (kPhase == kPhaseHead) state->go = false;
    if (!p.early_indices) dependency_wait();
    if (t >= kLateTriggerToken) dependents_launch();
    // 1. The token's index entries (the head of the chain), then the unit's
    //    part, input address and scale, which do not depend on them.
    // (The index view is made at each use: a copy held across the unit's
    // loads costs registers, which kIndexAny's view spilled.)
    ix = load_token_indices(index_view<kForm>(p), t);
    if constexpr (P == kAnyPart) {
      if (w >= p.units) return true;
    } else if constexpr (kRole) {
      if (w >= role_units<kR, kN, kDv, P>(g, p.num_q_heads)) return true;
    } else {
      if (w >= p.part[P].units) return true;
    }
    // kAddressFirst without non-rotary parts: the packed layout's boundaries
    // from the first line's copies (fill_decode_shape), so that the part's line
    // is read without waiting for the second line (which the padding test then
    // reads: below).
    constexpr bool kFirstLine = P == kAnyPart && kAddressFirst && kR > 0 && kN == 0;
    if constexpr (kFirstLine) {
      VecGeometry f = g;
      f.rot_units = f.q_nope_end = f.k_nope_end = p.warp_k;
      r = unit_ref<kR, kN, kDv>(f, p.warp_v, w);
    } else if constexpr (P == kAnyPart) {
      r = unit_ref<kR, kN, kDv>(g, p.num_q_heads, w);
    } else if constexpr (kRole) {
      r = role_unit_ref<kR, kN, kDv, P>(g, p.num_q_heads, w);
    } else {
      r.part = P;
      split_unit(w, part_half<kR, kN, kDv>(g, P) / 8, r);
    }
    x = reinterpret_cast<const uint4*>(
        field(&DecodePart::src) +
        head_offset(t, r.head, field(&DecodePart::src_token), field(&DecodePart::src_head)) * 2);
    half = part_half<kR, kN, kDv>(g, r.part);
    va = {};
    vb = {};
    div = field(&DecodePart::div);
    scale_ptr = field(&DecodePart::scale_ptr);
    dev_scale = scale_ptr != nullptr ? *scale_ptr : 0.f;
    // 2. Not padding: kv_indptr[b] (page tables), the unit's inputs, its
    //    cos/sin (checked mode: position in range first), the page entry.
    // kAddressFirst (the packed layout's 64-register kernels, whose threads
    // find their part at run time): the input address joins the padding test,
    // so that the part's parameter reads go out while the index entries are in
    // flight, not after them; the plan's own test of the key then stays, and
    // with it the slot's split into page and entry goes before the codes
    // (faster both; in the other kernels it cost registers or stack, and with
    // the key's sign assumed the split went back after the codes:
    // perf/RESULTS.md). Device addresses are below 2^63.
    // kFirstLine, fixed forms: the position joins it too (unchecked: a
    // negative one is the caller's error, and its token is then skipped), so
    // that its load goes out beside the key's, and the cos/sin row's byte
    // stride (never negative), so that the second line is read before it.
    // kInputs: the inputs loaded, or their lines prefetched (small launches:
    // kPrefetchThreads), before the test (a padding token's rows may be
    // read: docs/CONTRACT.md); with early indices after the wait (below).
    if constexpr (kInputs == kInputsBeforeTest) {
      if (!p.early_indices) {
        va = load_unit_input<kStream>(x + r.sub);
        vb = load_unit_input<kStream>(x + half / 8 + r.sub);
      }
    } else if constexpr (kInputs == kInputsPrefetched) {
      // (& rather than &&: a branch here let the compiler put the test first.)
      const bool on = !p.early_indices &
                      (std::uint64_t(gridDim.x) * gridDim.y * blockDim.x <= kPrefetchThreads);
      prefetch_l2(x + r.sub, on);
      prefetch_l2(x + half / 8 + r.sub, on);
    }
    const std::int64_t padding_test =
        kAddressFirst ? ix.key | reinterpret_cast<std::int64_t>(x) |
                            (kFirstLine && kForm != kIndexAny ? ix.pos | p.cos_row_bytes : 0)
                      : ix.key;
    if (__builtin_expect(padding_test < 0, 0)) return true;
    cache = P == kQueryRole ? false : (P == kCacheRole ? true : cache_part(r.part));
    begin = plan_needed() ? plan_begin(index_view<kForm>(p), ix) : 0;
    if (kInputs != kInputsBeforeTest && !p.early_indices) {
      va = load_unit_input<kStream>(x + r.sub);
      vb = load_unit_input<kStream>(x + half / 8 + r.sub);
    }
    if constexpr (kPhase == kPhaseHead) {
      state->go = true;
      return true;
    }
  }
  const bool rotary = r.part <= kRotK;
  float cv[8] = {}, sv[8] = {};
  const bool pos_ok =
      !index_view<kForm>(p).checked || position_in_range(index_view<kForm>(p), ix.pos);
  const RopeStyle style = kStyle >= 0 ? RopeStyle(kStyle) : RopeStyle(p.body & 1);
  if (rotary && pos_ok)
    load_unit_cos<Cos>(style, S::rot_half(g), p.cos_sin + ix.pos * p.cos_row_bytes, r.sub, cv, sv);
  if (__builtin_expect(scale_ptr != nullptr, 0)) {  // while the cos/sin loads fly
    div = make_divisor(dev_scale, field(&DecodePart::multiply) != 0 ? ScaleConvention::kMultiply
                                                                    : ScaleConvention::kDivide);
    if (kStyle >= 0 && needs_ieee(div)) return false;
  }
  TokenPlan plan;
  plan.write = true;
  if (plan_needed()) plan = finish_plan(index_view<kForm>(p), ix, begin);
  if (__builtin_expect(!plan.write, 0)) {
    // Counted once a token: by its first unit (every unit plans where a
    // token can be bad).
    const bool first = P == kAnyPart ? w == 0 : blockIdx.x == 0 && threadIdx.x == 0;
    if (plan.bad && first && p.skipped_tokens != nullptr) atomicAdd(p.skipped_tokens, 1ull);
    return true;
  }
  if (p.early_indices) {
    dependency_wait();
    va = load_unit_input<kStream, true>(x + r.sub);
    vb = load_unit_input<kStream, true>(x + half / 8 + r.sub);
  }
  // 3. The codes, then the address (a page-table entry may still be in
  //    flight while they are computed), then the stores.
  uint2 lo, hi;
  encode_unit<In, Out, kStyle >= 0 ? 0 : -1>(style, rotary, div, va, vb, cv, sv, lo, hi);
  const std::int64_t dst_stride[3] = {field(&DecodePart::dst_page), field(&DecodePart::dst_entry),
                                      field(&DecodePart::dst_head)};
  char* dst = field(&DecodePart::dst) +
              cache_offset(cache ? plan.page : t, cache ? plan.entry : 0, r.head, dst_stride);
  store_unit(dst, half, r.sub, lo, hi);
  return true;
}
#undef ROPEKV_UNIT_HEAD

// Calls f(std::integral_constant<int, S>{}) for the body p.body names: S a
// lean body's RoPE style, or -1 for the general body, which also runs when a
// lean body's f returns false (a unit whose device scale needs IEEE division,
// having stored nothing). The run-time index form has the general body only
// (its index resolution is the longer part, and its lean bodies spilled), as
// has HIP (kDecodeLeanBodies). Callers' lambdas are always_inline: without it
// nvcc compiles the decode kernels to other code (same size, reordered).
template <int kForm, class F>
__device__ __forceinline__ void by_body(const DecodeParams& p, F&& f) {
  constexpr int kNeox = int(RopeStyle::kNeox), kInterleaved = int(RopeStyle::kInterleaved);
  if constexpr (kDecodeLeanBodies && kForm != kIndexAny) {
    if (p.body == (kBodyLean | kNeox)) {
      if (f(std::integral_constant<int, kNeox>{})) return;
    } else if (p.body == (kBodyLean | kInterleaved)) {
      if (f(std::integral_constant<int, kInterleaved>{})) return;
    }
  }
  f(std::integral_constant<int, -1>{});
}

// Unit w of token t (as decode_unit) in the body p.body names (by_body).
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, int kForm, std::uint32_t P,
          bool kStream = false, bool kAddressFirst = false, int kInputs = kInputsAfterTest>
__device__ __forceinline__ void decode_body(const DecodeParams& p, std::uint32_t w,
                                            std::int64_t t) {
  by_body<kForm>(
      p, [&](auto style) __attribute__((always_inline)) {
        return decode_unit<In, Out, Cos, kR, kN, kDv, kForm, P, decltype(style)::value, kStream,
                           kAddressFirst, kInputs>(p, w, t);
      });
}

// Units w0 of token t0 (part or role P0) and w1 of t1 (P1) in the body
// p.body names, both units' heads (their inputs in flight) before either's
// tail; a lean body's unit whose device scale needs IEEE division runs again
// in the general body, having stored nothing.
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, int kForm, std::uint32_t P0,
          std::uint32_t P1, bool kStream, int kStyle>
__device__ __forceinline__ void decode_pair_in(const DecodeParams& p, std::uint32_t w0,
                                               std::int64_t t0, std::uint32_t w1, std::int64_t t1) {
  UnitHead<kForm> h0, h1;
  decode_unit<In, Out, Cos, kR, kN, kDv, kForm, P0, kStyle, kStream, false, kInputsAfterTest,
              kPhaseHead>(p, w0, t0, &h0);
  decode_unit<In, Out, Cos, kR, kN, kDv, kForm, P1, kStyle, kStream, false, kInputsAfterTest,
              kPhaseHead>(p, w1, t1, &h1);
  const bool done0 = !h0.go || decode_unit<In, Out, Cos, kR, kN, kDv, kForm, P0, kStyle, kStream,
                                           false, kInputsAfterTest, kPhaseTail>(p, w0, t0, &h0);
  const bool done1 = !h1.go || decode_unit<In, Out, Cos, kR, kN, kDv, kForm, P1, kStyle, kStream,
                                           false, kInputsAfterTest, kPhaseTail>(p, w1, t1, &h1);
  if constexpr (kStyle >= 0) {
    if (!done0)
      decode_unit<In, Out, Cos, kR, kN, kDv, kForm, P0, -1, kStream, false, kInputsAfterTest>(p, w0,
                                                                                              t0);
    if (!done1)
      decode_unit<In, Out, Cos, kR, kN, kDv, kForm, P1, -1, kStream, false, kInputsAfterTest>(p, w1,
                                                                                              t1);
  }
}
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, int kForm, std::uint32_t P0,
          std::uint32_t P1, bool kStream>
__device__ __forceinline__ void decode_pair(const DecodeParams& p, std::uint32_t w0,
                                            std::int64_t t0, std::uint32_t w1, std::int64_t t1) {
  by_body<kForm>(
      p, [&](auto style) __attribute__((always_inline)) {
        decode_pair_in<In, Out, Cos, kR, kN, kDv, kForm, P0, P1, kStream, decltype(style)::value>(
            p, w0, t0, w1, t1);
        return true;
      });
}

template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, int kForm,
          int kMinBlocks = kDecodeMinBlocks<kR, kN>>
__global__ void __launch_bounds__(kVecBlock, kMinBlocks) fused_decode_kernel(const DecodeParams p) {
  if constexpr (!kDecodeByPart<kForm, kN>) {  // packed
    const std::uint32_t u = blockIdx.x * blockDim.x + threadIdx.x;
    const std::int64_t t = blockIdx.y;
    if (t < kLateTriggerToken) dependents_launch();
    decode_body<In, Out, Cos, kR, kN, kDv, kForm, kAnyPart, false,
                kMinBlocks == kDecodeFewMinBlocks, kInputsBeforeTest>(p, u, t);
  } else {  // by role or by part: the warp's role or part (uniform), the thread's unit in it
    static_assert(kR > 0, "the warp-uniform layouts: specialised shapes");
    const std::int64_t t = blockIdx.y;
    if (t < kLateTriggerToken) dependents_launch();
    const std::uint32_t wi = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // of the token
    const std::uint32_t lane = threadIdx.x % 32;
    // (The last block's warps past the token's: no unit.)
    if constexpr (kN > 0) {
      if (wi < p.warp_k)
        decode_body<In, Out, Cos, kR, kN, kDv, kForm, kQueryRole, false, false, kInputsPrefetched>(
            p, wi * 32 + lane, t);
      else
        decode_body<In, Out, Cos, kR, kN, kDv, kForm, kCacheRole, false, false, kInputsPrefetched>(
            p, (wi - p.warp_k) * 32 + lane, t);
    } else {
      static_assert(kDv > 0, "by part: shapes with a value part");
      if (wi < p.warp_k)
        decode_body<In, Out, Cos, kR, kN, kDv, kForm, kRotQ, false, false, kInputsPrefetched>(
            p, wi * 32 + lane, t);
      else if (wi < p.warp_v)
        decode_body<In, Out, Cos, kR, kN, kDv, kForm, kRotK, false, false, kInputsPrefetched>(
            p, (wi - p.warp_k) * 32 + lane, t);
      else
        decode_body<In, Out, Cos, kR, kN, kDv, kForm, kValue, false, false, kInputsPrefetched>(
            p, (wi - p.warp_v) * 32 + lane, t);
    }
  }
}

// The flat layouts, over a 1D grid (the launcher's rule: where the rows
// kernel's teams would take one token each, and beyond one wave of the 2D
// grid; Tuning::decode >= 2 forces them), so a block's threads span tokens
// (no idle lanes past a token's last unit):
//  * packed (slot mapping): thread x takes unit x % units of token x / units;
//  * by role (page tables, kIndexTable32): the query role's units of every
//    token first (FlatRoleFields::query_end threads), then the cache role's,
//    so that only the cache role's warps look pages up (one warp mixes them).
// Each role's token is ROPEKV_FLAT_QUOTIENT (below) of its thread index:
// packed and the query role take m, s from warp_k and warp_v & 0xff; the
// cache role from the fields only kR == 0 reads (FlatRoleFields); warp_v >>
// 8 is the token count (fill_decode_shape, flat). 48 registers: faster than
// 64 at 8192-32768 tokens though the bf16 kernels spill 12-28 bytes
// (perf/RESULTS.md). kStream: inputs loaded evict-first, for launches whose
// bytes exceed the L2 (the launcher's rule for page tables).
template <int kForm>
constexpr bool kDecodeFlatByRole = kForm == kIndexTable32;
// A flat grid's divisor by a token's units: thread x's token is (x * m) >>
// s, exact for x < 2^31 (flat_divisor, cuda/launch_geometry.hpp, makes it).
struct FlatDivisor {
  std::uint32_t m, s;
};
// Thread x's token under FlatDivisor d, x a std::uint32_t. A macro, not a
// function: as an inline function nvcc compiles the flat kernels to other
// code (a 32-bit compare for the 64-bit mask; two kernels spill 4 bytes more).
#define ROPEKV_FLAT_QUOTIENT(x, d) std::uint32_t((std::uint64_t(x) * (d).m) >> (d).s)
// Where the flat by-role layout keeps its cache role's divisor and the
// query role's end (nnz times its units a token): in rot_sub, nope_sub and
// v_sub, which kernels of a fixed shape (kR > 0, the flat kernels') never read.
struct FlatRoleFields {
  static constexpr auto cache_m = &DecodeParams::rot_sub;
  static constexpr auto cache_s = &DecodeParams::nope_sub;
  static constexpr auto query_end = &DecodeParams::v_sub;
};

template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, int kForm, bool kStream = false>
__global__ void __launch_bounds__(kVecBlock, kDecodeManyMinBlocks)
    fused_decode_flat_kernel(const DecodeParams p) {
  static_assert(kR > 0, "FlatRoleFields: the fields kR > 0 leaves unread");
  const std::uint32_t x = blockIdx.x * blockDim.x + threadIdx.x;
  const std::uint32_t nnz = p.warp_v >> 8;
  if constexpr (kDecodeFlatByRole<kForm>) {
    const std::uint32_t query_end = p.*FlatRoleFields::query_end;
    if (x < query_end) {
      const std::uint32_t t = ROPEKV_FLAT_QUOTIENT(x, (FlatDivisor{p.warp_k, p.warp_v & 0xffu}));
      if (t < kLateTriggerToken) dependents_launch();
      const std::uint32_t units = role_units<kR, kN, kDv, kQueryRole>(p.geometry(), p.num_q_heads);
      decode_body<In, Out, Cos, kR, kN, kDv, kForm, kQueryRole, kStream>(p, x - t * units, t);
    } else {
      const std::uint32_t y = x - query_end;
      const std::uint32_t t = ROPEKV_FLAT_QUOTIENT(
          y, (FlatDivisor{p.*FlatRoleFields::cache_m, p.*FlatRoleFields::cache_s}));
      if (t >= nnz) return;
      if (t < kLateTriggerToken) dependents_launch();
      const std::uint32_t units = role_units<kR, kN, kDv, kCacheRole>(p.geometry(), p.num_q_heads);
      decode_body<In, Out, Cos, kR, kN, kDv, kForm, kCacheRole, kStream>(p, y - t * units, t);
    }
  } else {
    const std::uint32_t t = ROPEKV_FLAT_QUOTIENT(x, (FlatDivisor{p.warp_k, p.warp_v & 0xffu}));
    if (t >= nnz) return;
    if (t < kLateTriggerToken) dependents_launch();
    decode_body<In, Out, Cos, kR, kN, kDv, kForm, kAnyPart, kStream>(p, x - t * p.units, t);
  }
}

// The flat layouts with two units a thread (Tuning::flat_pair, a
// measurement): block b's thread i takes units 2b * blockDim.x + i and
// blockDim.x past it (a warp's loads stay coalesced), both units' loads
// issued before either's arithmetic, as in the op floor with two units a
// thread, which beat the rule on the H200 at 8192 tokens (perf/RESULTS.md),
// where the pair kernel is not yet measured. A second unit
// past the last token is none (unit ~0 of the first's token). By role, a
// block's two units may lie in the two roles.
constexpr int kDecodePairMinBlocks = 3;
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, int kForm, bool kStream = false>
__global__ void __launch_bounds__(kVecBlock, kDecodePairMinBlocks)
    fused_decode_flat_pair_kernel(const DecodeParams p) {
  static_assert(kR > 0, "FlatRoleFields: the fields kR > 0 leaves unread");
  const std::uint32_t x0 = blockIdx.x * 2 * blockDim.x + threadIdx.x, x1 = x0 + blockDim.x;
  const std::uint32_t nnz = p.warp_v >> 8;
  const FlatDivisor first{p.warp_k, p.warp_v & 0xffu};
  if constexpr (kDecodeFlatByRole<kForm>) {
    const std::uint32_t query_end = p.*FlatRoleFields::query_end;
    const FlatDivisor second{p.*FlatRoleFields::cache_m, p.*FlatRoleFields::cache_s};
    const VecGeometry g = p.geometry();
    const std::uint32_t qu = role_units<kR, kN, kDv, kQueryRole>(g, p.num_q_heads);
    const std::uint32_t cu = role_units<kR, kN, kDv, kCacheRole>(g, p.num_q_heads);
    if (x1 < query_end) {
      const std::uint32_t t0 = ROPEKV_FLAT_QUOTIENT(x0, first);
      const std::uint32_t t1 = ROPEKV_FLAT_QUOTIENT(x1, first);
      if (t0 < kLateTriggerToken) dependents_launch();
      decode_pair<In, Out, Cos, kR, kN, kDv, kForm, kQueryRole, kQueryRole, kStream>(
          p, x0 - t0 * qu, t0, x1 - t1 * qu, t1);
    } else if (x0 < query_end) {
      const std::uint32_t t0 = ROPEKV_FLAT_QUOTIENT(x0, first);
      const std::uint32_t y1 = x1 - query_end;
      std::uint32_t t1 = ROPEKV_FLAT_QUOTIENT(y1, second), w1 = y1 - t1 * cu;
      if (t1 >= nnz) t1 = t0, w1 = ~0u;
      if (t1 < kLateTriggerToken || t0 < kLateTriggerToken) dependents_launch();
      decode_pair<In, Out, Cos, kR, kN, kDv, kForm, kQueryRole, kCacheRole, kStream>(
          p, x0 - t0 * qu, t0, w1, t1);
    } else {
      const std::uint32_t y0 = x0 - query_end, t0 = ROPEKV_FLAT_QUOTIENT(y0, second);
      if (t0 >= nnz) return;
      const std::uint32_t y1 = x1 - query_end;
      std::uint32_t t1 = ROPEKV_FLAT_QUOTIENT(y1, second), w1 = y1 - t1 * cu;
      if (t1 >= nnz) t1 = t0, w1 = ~0u;
      if (t0 < kLateTriggerToken) dependents_launch();
      decode_pair<In, Out, Cos, kR, kN, kDv, kForm, kCacheRole, kCacheRole, kStream>(
          p, y0 - t0 * cu, t0, w1, t1);
    }
  } else {
    const std::uint32_t t0 = ROPEKV_FLAT_QUOTIENT(x0, first);
    if (t0 >= nnz) return;
    std::uint32_t t1 = ROPEKV_FLAT_QUOTIENT(x1, first), w1 = x1 - t1 * p.units;
    if (t1 >= nnz) t1 = t0, w1 = ~0u;
    if (t0 < kLateTriggerToken) dependents_launch();
    decode_pair<In, Out, Cos, kR, kN, kDv, kForm, kAnyPart, kAnyPart, kStream>(p, x0 - t0 * p.units,
                                                                               t0, w1, t1);
  }
}

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
