// The row-loop vector kernel (fused_vec_rows_kernel): the vector path of the
// specialised shapes' larger launches (the launcher's rule), each row part walked by
// a loop of its own, so that a unit costs its loads, math and stores plus two
// pointer increments (the other vector kernels find each unit's part, head
// and addresses anew: most of a unit's instructions there).
#pragma once

#include "cuda/kernels/vec_unit.cuh"

namespace ropekv {
namespace detail {
namespace gpu {

// Blocks per multiprocessor the kernel is compiled for (2: a cap of 128
// registers, no spills; at 3 it spills) and query units a lane has in
// flight per round (the query parts have the most heads): 2 and 4, the
// fastest measured (perf/RESULTS.md); the macros exist for such measurements.
#ifndef ROPEKV_ROWS_MIN_BLOCKS
#define ROPEKV_ROWS_MIN_BLOCKS 2
#endif
constexpr int kRowsMinBlocks = ROPEKV_ROWS_MIN_BLOCKS;
#ifndef ROPEKV_ROWS_QUERY_UNITS
#define ROPEKV_ROWS_QUERY_UNITS 4
#endif
constexpr int kRowsQueryUnits = ROPEKV_ROWS_QUERY_UNITS;

// A lane's walk over one row part of a token: heads h0, h0 + step, ...
// below the part's head count (h0 = lane / kSubs, step = team / kSubs), its
// unit lane % kSubs of each row (kSubs units a row: the unit's two input
// vectors 16 * kSubs bytes apart, its two output rows 8 * kSubs).
template <int kSubs>
struct RowWalk {
  const char* src;
  char* dst;
  std::int64_t src_step, dst_step;  // bytes, per step heads
  std::int32_t left;                // units left (<= 0: done)
  __device__ __forceinline__ RowWalk(const HeadTensor& in, std::int64_t t, char* out_head0,
                                     std::int64_t out_head_stride, std::uint32_t heads,
                                     std::uint32_t lane, std::uint32_t team) {
    const std::uint32_t h = lane / kSubs, step = team / kSubs;
    left = h < heads ? std::int32_t((heads - h + step - 1) / step) : 0;
    src = in.row(t, h, 2) + 16 * (lane % kSubs);
    dst = out_head0 + std::int64_t(h) * out_head_stride + 8 * (lane % kSubs);
    src_step = std::int64_t(step) * in.head_stride * 2;
    dst_step = std::int64_t(step) * out_head_stride;
  }
  __device__ __forceinline__ bool live(std::int32_t k = 0) const { return k < left; }
  __device__ __forceinline__ void load(std::int32_t k, uint4& a, uint4& b) const {
    const uint4* x = reinterpret_cast<const uint4*>(src + k * src_step);
    a = load_readonly(x);
    b = load_readonly(x + kSubs);
  }
  __device__ __forceinline__ void store(std::int32_t k, const uint2& lo, const uint2& hi) const {
    char* o = dst + k * dst_step;
    store_streaming(reinterpret_cast<uint2*>(o), lo);
    store_streaming(reinterpret_cast<uint2*>(o + 8 * kSubs), hi);
  }
  __device__ __forceinline__ void advance(std::int32_t k) {
    left -= k;
    src += k * src_step;
    dst += k * dst_step;
  }
};

// A walk's next kU units (those it has): their loads, then their codes and
// stores.
template <int kU, class W, int kN>
__device__ __forceinline__ void issue_rows(const W& w, uint4 (&x)[kN][2]) {
#pragma unroll
  for (int k = 0; k < kU; ++k)
    if (w.live(k)) w.load(k, x[k][0], x[k][1]);
}
template <DType In, DType Out, int kIeee, bool kRot, int kU, class W, int kN>
__device__ __forceinline__ void finish_rows(const W& w, const uint4 (&x)[kN][2], RopeStyle style,
                                            ScaleDivisor div, const float (&cv)[8],
                                            const float (&sv)[8]) {
#pragma unroll
  for (int k = 0; k < kU; ++k)
    if (w.live(k)) {
      uint2 lo, hi;
      encode_unit<In, Out, kIeee>(style, kRot, div, x[k][0], x[k][1], cv, sv, lo, hi);
      w.store(k, lo, hi);
    }
}

// Walks A, B and C (kUa, kUb, kUc units a round; 0: no such walk)
// together: each round issues the loads of the walks' next units, then
// encodes and stores them, so that the units of all parts are in flight at
// once.
template <DType In, DType Out, int kIeee, bool kRotA, bool kRotB, bool kRotC, int kUa, int kUb,
          int kUc, class WA, class WB, class WC>
__device__ __forceinline__ void walk_rows(WA& a, WB& b, WC& c, RopeStyle style, ScaleDivisor da,
                                          ScaleDivisor db, ScaleDivisor dc, const float (&cv)[8],
                                          const float (&sv)[8]) {
  while (a.live() || (kUb > 0 && b.live()) || (kUc > 0 && c.live())) {
    uint4 xa[kUa][2], xb[kUb > 0 ? kUb : 1][2], xc[kUc > 0 ? kUc : 1][2];
    issue_rows<kUa>(a, xa);
    issue_rows<kUb>(b, xb);
    issue_rows<kUc>(c, xc);
    finish_rows<In, Out, kIeee, kRotA, kUa>(a, xa, style, da, cv, sv);
    finish_rows<In, Out, kIeee, kRotB, kUb>(b, xb, style, db, cv, sv);
    finish_rows<In, Out, kIeee, kRotC, kUc>(c, xc, style, dc, cv, sv);
    a.advance(kUa);
    if constexpr (kUb > 0) b.advance(kUb);
    if constexpr (kUc > 0) c.advance(kUc);
  }
}

// One planned token's units for a lane: the rotary parts first (key rope
// with the values beside it, then query rope kRowsQueryUnits units a round,
// or all three in one round where that covers the query), so that the
// cos/sin values are dead before the non-rotary parts.
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, bool kOne, int kIeee>
__device__ __forceinline__ void rows_token(const LaunchParams& p, const Divisors& d, std::int64_t t,
                                           const TokenPlan& plan, std::uint32_t lane,
                                           std::uint32_t team) {
  constexpr int kRs = kR / kItem, kNs = kN / kItem, kVs = kDv / kItem;
  const std::uint32_t hq = std::uint32_t(p.num_q_heads), hk = std::uint32_t(p.num_kv_heads);
  float cv[8], sv[8];
  load_unit_cos<Cos>(p.style, kR / 2, p.cos_sin + plan.pos * p.cos_row_stride * p.cos.bytes,
                     lane % kRs, cv, sv);
  RowWalk<kRs> kr(p.k_rope, t, p.k_cache_rope.row(plan.page, plan.entry, 0, 1),
                  p.k_cache_rope.stride[2], hk, lane, team);
  RowWalk<kRs> qr(p.q_rope, t, p.q_rope_out.row(t, 0, 1), p.q_rope_out.head_stride, hq, lane, team);
  if constexpr (kDv > 0) {
    RowWalk<kVs> v(p.v, t, p.v_cache.row(plan.page, plan.entry, 0, 1), p.v_cache.stride[2], hk,
                   lane, team);
    if constexpr (kOne) {  // the launcher's promise: the query rope takes one round
      walk_rows<In, Out, kIeee, true, false, true, 1, 1, kRowsQueryUnits>(kr, v, qr, p.style, d.k,
                                                                          d.v, d.q, cv, sv);
      return;
    }
    walk_rows<In, Out, kIeee, true, false, false, 1, 1, 0>(kr, v, v, p.style, d.k, d.v, d.v, cv,
                                                           sv);
  } else {
    walk_rows<In, Out, kIeee, true, false, false, 1, 0, 0>(kr, kr, kr, p.style, d.k, d.k, d.k, cv,
                                                           sv);
  }
  walk_rows<In, Out, kIeee, true, false, false, kRowsQueryUnits, 0, 0>(qr, qr, qr, p.style, d.q,
                                                                       d.q, d.q, cv, sv);
  if constexpr (kN > 0) {
    RowWalk<kNs> kn(p.k_nope, t, p.k_cache_nope.row(plan.page, plan.entry, 0, 1),
                    p.k_cache_nope.stride[2], hk, lane, team);
    RowWalk<kNs> qn(p.q_nope, t, p.q_nope_out.row(t, 0, 1), p.q_nope_out.head_stride, hq, lane,
                    team);
    walk_rows<In, Out, kIeee, false, false, false, kRowsQueryUnits, 1, 0>(qn, kn, kn, p.style, d.q,
                                                                          d.k, d.k, cv, sv);
  }
}

// The dynamic token order's counter (a measurement: the launcher's
// rows_dynamic): [0] tickets taken, [1] teams done; the last team done sets
// both back to 0, so a launch finds them at 0 (launches of one stream run
// one after the other: the rows kernel waits for the previous grid before it
// reads them).
static __device__ unsigned int rows_tickets[2];

// Lane 0's ticket to every lane of its team (a power of two of lanes, at
// most 64, warp-aligned; `in_block` its index in the block): through a
// register shuffle within a warp, else through shared memory (two slots,
// used in turn: `round` counts the calls) and the team's named barrier.
__device__ __forceinline__ unsigned team_broadcast(unsigned v, std::uint32_t team,
                                                   std::uint32_t in_block, unsigned round) {
  __shared__ unsigned slots[2][kVecBlock / 32];
  if (team <= 32) {
    const unsigned base = (threadIdx.x % 32) & ~(team - 1);
    const unsigned mask = (team == 32 ? 0xffffffffu : ((1u << team) - 1u) << base);
    return group_broadcast(mask, v, int(team));
  }
  if (threadIdx.x % team == 0) slots[round & 1][in_block] = v;
  named_barrier(1 + in_block, team);
  return slots[round & 1][in_block];
}

#ifdef ROPEKV_ROWS_TRACE
// A measurement build's trace of the rows kernel (scripts/gpu_rows_trace.sh):
// per team (lane 0), the global timer (ns) at its start and after each of
// its tokens' stores are issued, 0 after the last, its multiprocessor last.
constexpr int kRowsTraceTeams = 8192, kRowsTraceSlots = 64;
__device__ unsigned long long rows_trace[kRowsTraceTeams][kRowsTraceSlots];
__device__ __forceinline__ void rows_trace_mark(std::uint32_t team, int& slot, bool last) {
  if (team >= kRowsTraceTeams) return;
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  if (slot < kRowsTraceSlots - 2) rows_trace[team][slot++] = now;
  if (last) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    rows_trace[team][slot] = 0;
    rows_trace[team][kRowsTraceSlots - 1] = sm;
  }
}
#endif

// Teams of g.team threads (rows_team), one token per team at a time
// (grid-stride over tokens; kDynamic: past its third token a team takes the
// next free one from rows_tickets, a token ahead); while the current
// token's units are in flight, the index entries of the token after next
// and the next token's first page-table look-up are on their way (faster
// than loading only the next token's entries, slot mapping too:
// perf/RESULTS.md). kForm: the index arrays' form (index_view).
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, bool kOne, int kForm, int kIeee,
          bool kDynamic>
__device__ __forceinline__ void rows_tokens(const LaunchParams& p, const VecGeometry& g,
                                            const Divisors& d) {
  const std::uint32_t lane = threadIdx.x % g.team;
  std::int64_t team_stride = std::int64_t(gridDim.x) * g.teams, end = p.nnz;
  std::int64_t t = std::int64_t(blockIdx.x) * g.teams + threadIdx.x / g.team;
  if (!kDynamic && kForm != kIndexAny && g.guided_blocks != 0) {  // (the guided order: VecGeometry)
    const std::int64_t tail = std::int64_t(gridDim.x - g.guided_blocks) * g.teams;
    if (blockIdx.x < g.guided_blocks) {
      team_stride = std::int64_t(g.guided_blocks) * g.teams;
      end = p.nnz - tail;
    } else {
      t += p.nnz - tail - std::int64_t(g.guided_blocks) * g.teams;
      team_stride = tail;
    }
  }
  // kDynamic: the next two tokens, lane 0's next ticket, the tickets taken.
  std::int64_t t1 = 0, t2 = 0;
  unsigned pending = 0, round = 0;
  if constexpr (kDynamic) {
    if (lane == 0) pending = atomicAdd(&rows_tickets[0], 1u);
  }
#ifdef ROPEKV_ROWS_TRACE
  const std::uint32_t trace_team = blockIdx.x * g.teams + threadIdx.x / g.team;
  int trace_slot = 0;
  if (lane == 0) rows_trace_mark(trace_team, trace_slot, t >= end);
#endif
  if (t >= end) return;  // (kDynamic: the launcher's promise, every team has 3 tokens)
  if constexpr (kDynamic) {
    t1 = t + team_stride;
    t2 = t1 + team_stride;
  }
  auto ix = load_token_indices(index_view<kForm>(p), t);
  // Three tokens in the pipeline: t (its page look-up begun a token ago),
  // next (indices in), after (indices on their way); their entries in the
  // index arrays' width (a fixed page-table form's 32 bits: no spills).
  auto begin = plan_begin(index_view<kForm>(p), ix);
  decltype(ix) ix1, ix2;
  if (t + team_stride < end) ix1 = load_token_indices(index_view<kForm>(p), t + team_stride);
  while (true) {
    const TokenPlan plan = finish_plan(index_view<kForm>(p), ix, begin);
    const std::int64_t next = kDynamic ? t1 : t + team_stride;
    const bool more = next < end;
    decltype(begin) begin1 = 0;
    if (more) {
      begin1 = plan_begin(index_view<kForm>(p), ix1);
      const std::int64_t after = kDynamic ? t2 : next + team_stride;
      if (after < end) ix2 = load_token_indices(index_view<kForm>(p), after);
    }
    if (plan.write) {
      rows_token<In, Out, Cos, kR, kN, kDv, kOne, kIeee>(p, d, t, plan, lane, g.team);
    } else if (plan.bad && lane == 0 && p.skipped_tokens != nullptr) {
      atomicAdd(p.skipped_tokens, 1ull);
    }
#ifdef ROPEKV_ROWS_TRACE
    if (lane == 0) rows_trace_mark(trace_team, trace_slot, !more);
#endif
    if (!more) break;
    t = next;
    ix = ix1;
    begin = begin1;
    ix1 = ix2;
    if constexpr (kDynamic) {
      t1 = t2;
      t2 = 3 * team_stride + team_broadcast(pending, g.team, threadIdx.x / g.team, round++);
      if (lane == 0 && t2 < end) pending = atomicAdd(&rows_tickets[0], 1u);
    }
  }
  if (kDynamic && lane == 0) {
    __threadfence();  // this team's tickets before its count
    if (atomicAdd(&rows_tickets[1], 1u) == unsigned(team_stride) - 1) {
      atomicExch(&rows_tickets[0], 0u);
      atomicExch(&rows_tickets[1], 0u);
    }
  }
}

// kOne: every part of a token in one round (shapes without non-rotary parts,
// launches whose query rope takes one round: the launcher's choice). kForm:
// the index arrays' form, fixed where the launch has a common one.
// kDynamic: the dynamic token order (a measurement; where no scale needs
// IEEE division), a kernel of its own so that the rule's keep their code.
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, bool kOne, int kForm,
          bool kDynamic = false>
__global__ void __launch_bounds__(kVecBlock, kRowsMinBlocks)
    fused_vec_rows_kernel(const LaunchParams p, const VecGeometry g) {
  static_assert(kR > 0 && kR % kItem == 0 && kN % kItem == 0 && kDv % kItem == 0,
                "the rows kernel takes the specialised shapes");
  static_assert(!kOne || (kN == 0 && kDv > 0), "one round: no non-rotary parts");
  dependency_wait();
  if (g.early_trigger) dependents_launch();
  const Divisors d = load_divisors(p);
  // The scale step's form, once for the launch (see encode8).
  if (needs_ieee(d.q) || needs_ieee(d.k) || needs_ieee(d.v))
    rows_tokens<In, Out, Cos, kR, kN, kDv, kOne, kForm, 1, false>(p, g, d);
  else
    rows_tokens<In, Out, Cos, kR, kN, kDv, kOne, kForm, 0, kDynamic>(p, g, d);
}

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
