// The GPU backend's launcher: picks the decode, vector (direct, staged,
// rows) or generic path,
// sizes the grid from the device's multiprocessor count (read once per
// device), launches on the caller's stream and reports launch errors.
// One source for CUDA and HIP (hip/ compiles this file as HIP).
//
// Safe inside graph capture: no allocation, no synchronisation and no host
// read of device data happen during a call.
//
// Per-device state (issue 16): every call reads the calling thread's current
// device (current_device) and never changes it; the caller's stream must
// belong to that device. Keyed by that device index:
//  * sm_count: the multiprocessor count, one atomic slot per device;
//  * resident_per_sm: blocks per multiprocessor per (kernel, block, device),
//    shared under a mutex, plus each thread's last answer (same key); its
//    miss also makes the dynamic shared-memory opt-in (cudaFuncSetAttribute
//    applies to the current device), which per (kernel, device) only rises;
//  * each thread's last launch decision, keyed by the device among all else
//    the decision reads (prepare_launch).
// The tuning overrides are process-wide (measurements only). Tested by
// tests/test_cuda_multidevice.cu.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

#include "backends/backend.hpp"
#include "cuda/launcher.hpp"
#include "detail/dispatch.hpp"
#include "detail/result.hpp"

namespace ropekv {
namespace detail {
namespace gpu {
namespace {

constexpr int kMaxDevices = 64;
constexpr std::size_t kDefaultShared = 48 * 1024;  // dynamic shared memory without opt-in

std::atomic<int> g_tune_decode{0}, g_tune_trigger{0}, g_tune_bulk{0}, g_tune_rows{0},
    g_tune_decode_warps{0};

// Multiprocessor count of `dev`, read from the device once.
int sm_count(int dev) {
  static std::atomic<int> cache[kMaxDevices] = {};
  if (dev < 0 || dev >= kMaxDevices) return 132;
  int n = cache[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (multiprocessor_count(dev, &n) != kSuccess || n <= 0) {
      (void)last_error();  // not left for the caller's next query
      n = 132;
    }
    cache[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

// The occupancy cache of resident_per_sm: one entry per (kernel, block,
// device), in the order they were made; `shared` is the dynamic shared
// memory `kernel` may use on `dev` when the entry was made.
struct ResidentEntry {
  const void* kernel;
  unsigned block;
  int dev, blocks;
  std::size_t shared;
};
struct ResidentCache {
  std::mutex mu;
  std::vector<ResidentEntry> entries;
};
ResidentCache& resident_cache() {
  static ResidentCache c;
  return c;
}

// Blocks of `block` threads of `kernel` (each with `smem` bytes of dynamic
// shared memory, allowed first where that is above the default) resident
// per multiprocessor, asked of the runtime once per (kernel, block, device)
// and cached; 0 if the kernel cannot run so. Host-side calls only (no
// device work, nothing on a stream), so it is safe during graph capture.
int resident_per_sm(const void* kernel, unsigned block, std::size_t smem, int dev) {
  // The calling thread's last answer first (an engine repeats its launches),
  // then the shared cache.
  thread_local ResidentEntry last = {nullptr, 0, -1, 0, 0};
  if (last.kernel == kernel && last.block == block && last.dev == dev) return last.blocks;
  ResidentCache& c = resident_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  // The opt-in is an attribute of (kernel, device), set for the device in
  // use: only ever raised, so that a smaller block's opt-in never takes
  // away what a cached larger block's launch needs.
  std::size_t shared = kDefaultShared;
  for (const ResidentEntry& e : c.entries) {
    if (e.kernel != kernel || e.dev != dev) continue;
    if (e.block == block) {
      last = e;
      return e.blocks;
    }
    if (e.shared > shared) shared = e.shared;
  }
  int n = 0;
  if (smem > shared) {
    if (allow_shared(kernel, smem) == kSuccess) shared = smem;
  }
  if (smem > shared || resident_blocks(kernel, int(block), smem, &n) != kSuccess || n < 0) {
    (void)last_error();
    n = 0;
  }
  c.entries.push_back(ResidentEntry{kernel, block, dev, n, shared});
  last = c.entries.back();
  return n;
}

// The low address bits of a tensor's rows: of its data pointer and byte
// strides (0 for an absent tensor); rows are `bytes`-aligned (a power of
// two) when (bits & (bytes - 1)) == 0.
std::uintptr_t row_bits(const HeadTensor& t, std::int64_t es) {
  if (t.data == nullptr) return 0;
  return reinterpret_cast<std::uintptr_t>(t.data) | std::uintptr_t(t.token_stride * es) |
         std::uintptr_t(t.head_stride * es);
}
std::uintptr_t row_bits(const CacheTensor& c) {
  if (c.data == nullptr) return 0;
  return reinterpret_cast<std::uintptr_t>(c.data) | std::uintptr_t(c.stride[0]) |
         std::uintptr_t(c.stride[1]) | std::uintptr_t(c.stride[2]);
}

// The vector path's conditions (see cuda/kernels/).
bool vector_eligible(const LaunchParams& p) {
  if (p.in.dtype != DType::kBFloat16 && p.in.dtype != DType::kFloat16) return false;
  if (!dtype_info(p.q_out.dtype).quantized || p.cache.dtype != p.q_out.dtype) return false;
  if (p.rotary_dim % kItem != 0 || p.nope_dim % kItem != 0 || p.v_dim % kItem != 0) return false;
  if (p.rotary_dim / kItem > kVecBlock) return false;  // a team of S_r lanes fits in a block
  // Unit counts fit 32 bits.
  if ((p.num_q_heads + p.num_kv_heads) * (p.rotary_dim + p.nope_dim + p.v_dim) / kItem >=
      (std::int64_t(1) << 31))
    return false;
  // Input rows (2-byte elements) and the cos/sin rows 16-byte aligned, output
  // rows (1-byte codes) 8-byte aligned.
  const std::uintptr_t in = row_bits(p.q_rope, 2) | row_bits(p.q_nope, 2) | row_bits(p.k_rope, 2) |
                            row_bits(p.k_nope, 2) | row_bits(p.v, 2) |
                            reinterpret_cast<std::uintptr_t>(p.cos_sin) |
                            std::uintptr_t(p.cos_row_stride * p.cos.bytes);
  const std::uintptr_t out = row_bits(p.q_rope_out, 1) | row_bits(p.q_nope_out, 1) |
                             row_bits(p.k_cache_rope) | row_bits(p.k_cache_nope) |
                             row_bits(p.v_cache);
  return (in & 15u) == 0 && (out & 7u) == 0;
}

// Teams. Decode-sized launches (two-round teams for every token would fill
// at most half of the threads the device holds at once) use teams that
// cover a token in one round where a block holds it and the whole launch
// fits on the device so (each lane one unit: the shortest chain), else in
// two rounds, so each lane's loads all go out at once. Large launches use
// teams of about kLargeTeam threads and at least kLargeRounds rounds per
// token, so each lane reuses its token's indices and cos/sin over several
// units and more tokens are in flight. Each choice is the fastest measured
// (perf/RESULTS.md, "tried and not kept").
constexpr std::uint32_t kDecodeRounds = 2;
constexpr std::uint32_t kLargeRounds = 5;
constexpr std::uint32_t kLargeTeam = 64;
// Launch sizes, in waves of decode-sized teams (decode_threads against the
// device's capacity): beyond half a wave a launch takes the large-launch
// teams, beyond one wave the staged kernel (where the vendor layer has
// asynchronous copies): faster than one and two waves (perf/RESULTS.md).

// *staged: the launch is beyond one wave (the staged kernel's, where the
// vendor layer has asynchronous copies).
VecGeometry geometry(const LaunchParams& p, int sms, bool* staged) {
  VecGeometry g;
  g.rot_sub = std::uint32_t(p.rotary_dim / kItem);
  g.nope_sub = std::uint32_t(p.nope_dim / kItem);
  g.v_sub = std::uint32_t(p.v_dim / kItem);
  const std::uint32_t hq = std::uint32_t(p.num_q_heads), hk = std::uint32_t(p.num_kv_heads);
  g.rot_units = (hq + hk) * g.rot_sub;
  g.q_nope_end = g.rot_units + hq * g.nope_sub;
  g.k_nope_end = g.q_nope_end + hk * g.nope_sub;
  g.units = g.k_nope_end + hk * g.v_sub;
  const std::uint64_t capacity = std::uint64_t(sms) * 2048;
  const std::uint64_t decode_threads = std::uint64_t(p.nnz) * ((g.units + 1) / 2);
  const std::uint32_t max_team = kVecBlock / g.rot_sub * g.rot_sub;  // fits in a block
  const bool one_round = g.units <= max_team && std::uint64_t(p.nnz) * g.units <= capacity;
  std::uint32_t rounds = one_round ? 1 : kDecodeRounds;
  const bool large = 2 * decode_threads > capacity;
  *staged = decode_threads > capacity;
  if (large) {
    rounds = (g.units + kLargeTeam - 1) / kLargeTeam;
    if (rounds < kLargeRounds) rounds = kLargeRounds;
  }
  std::uint32_t team = (g.units + rounds - 1) / rounds;
  team = (team + g.rot_sub - 1) / g.rot_sub * g.rot_sub;  // a multiple of S_r
  g.team = team < max_team ? team : max_team;
  g.teams = kVecBlock / g.team;
  g.early_trigger = 0;
  return g;
}

// A token's units per row part, from the geometry's part boundaries (its
// rotary rows: hq query heads, then the key heads).
void part_units(const VecGeometry& g, std::uint32_t hq, std::uint32_t (&units)[kParts]) {
  units[kRotQ] = hq * g.rot_sub;
  units[kRotK] = g.rot_units - units[kRotQ];
  units[kNopeQ] = g.q_nope_end - g.rot_units;
  units[kNopeK] = g.k_nope_end - g.q_nope_end;
  units[kValue] = g.units - g.k_nope_end;
}

// The rows kernel's team (fused_vec_rows_kernel): the largest power of two
// from the largest units-a-row of the parts up to 64 (so a multiple of each:
// the specialised shapes' are powers of two, and a lane keeps its unit within
// a row in every part) whose rounds over each part leave at most 1/16 of the
// lanes idle, else the one that leaves the fewest idle.
std::uint32_t rows_team(const VecGeometry& g, std::uint32_t hq) {
  std::uint32_t units[kParts];
  part_units(g, hq, units);
  const std::uint32_t subs[kParts] = {g.rot_sub, g.rot_sub, g.nope_sub, g.nope_sub, g.v_sub};
  std::uint32_t lo = 1;
  for (int i = 0; i < kParts; ++i)
    if (units[i] > 0 && subs[i] > lo) lo = subs[i];
  std::uint32_t best = lo, best_idle = ~0u;
  for (std::uint32_t t = 64; t >= lo; t /= 2) {
    std::uint32_t slots = 0;
    for (int i = 0; i < kParts; ++i) slots += (units[i] + t - 1) / t * t;
    const std::uint32_t idle = slots - g.units;
    if (16 * idle <= slots) return t;
    if (idle < best_idle) {
      best = t;
      best_idle = idle;
    }
  }
  return best;
}

// The decode kernel's index form for p (see cuda/kernels/): one of the two
// common forms where p is one, else kIndexAny.
int decode_form(const LaunchParams& p) {
  if (p.checked || p.page_shift < 0) return kIndexAny;
  if (p.addressing == Addressing::kSlotMapping)
    return p.slot_mapping.i64 && p.positions.i64 ? kIndexSlot64 : kIndexAny;
  const bool all32 = !p.batch_indices.i64 && !p.kv_positions.i64 && !p.kv_indptr.i64 &&
                     !p.kv_indices.i64 && !p.positions.i64;
  return all32 ? kIndexTable32 : kIndexAny;
}

// The kernels of the vector paths for a (dtypes, shape); the decode kernels
// of the specialised shapes also come in the fixed index forms.
// kRowsOneRound: the rows kernel with every part of a token in one round
// (shapes without non-rotary parts only).
// kDecodeFew: a decode kernel's 64-register twin (kDecodeFewBlocks), else none.
enum class VecFamily { kDirect, kStaged, kBulk, kRows, kRowsOneRound, kDecode, kDecodeFew };
// *by_part: the decode kernel takes the by-part layout (kDecodeByPart).
template <VecFamily F, DType In, DType Out, DType Cos, int kR, int kN, int kDv>
const void* vec_kernel(const LaunchParams& p, bool* by_part) {
  if constexpr (F == VecFamily::kStaged)
    return reinterpret_cast<const void*>(&fused_vec_staged_kernel<In, Out, Cos, kR, kN, kDv>);
  if constexpr (F == VecFamily::kRows || F == VecFamily::kRowsOneRound) {
    constexpr bool kOne = F == VecFamily::kRowsOneRound;
    if constexpr (kRowsKernel && kR > 0 && !(kOne && (kN > 0 || kDv == 0)))
      return reinterpret_cast<const void*>(&fused_vec_rows_kernel<In, Out, Cos, kR, kN, kDv, kOne>);
    return nullptr;
  }
  if constexpr (F == VecFamily::kBulk) {
    if constexpr (kBulkCopy)
      return reinterpret_cast<const void*>(&fused_vec_bulk_kernel<In, Out, Cos, kR, kN, kDv>);
    return nullptr;
  }
  if constexpr (F == VecFamily::kDecodeFew && !kDecodeFewBlocks<kR, kN>) {
    return nullptr;
  } else if constexpr (F == VecFamily::kDecode || F == VecFamily::kDecodeFew) {
    constexpr int kB = F == VecFamily::kDecodeFew ? kDecodeFewMinBlocks : kDecodeMinBlocks<kR, kN>;
    if constexpr (kR > 0) {
      switch (decode_form(p)) {
        case kIndexSlot64:
          return reinterpret_cast<const void*>(
              &fused_decode_kernel<In, Out, Cos, kR, kN, kDv, kIndexSlot64, kB>);
        case kIndexTable32:
          *by_part = kDecodeByPart<kIndexTable32, kN>;
          return reinterpret_cast<const void*>(
              &fused_decode_kernel<In, Out, Cos, kR, kN, kDv, kIndexTable32, kB>);
        default: break;
      }
    }
    return reinterpret_cast<const void*>(
        &fused_decode_kernel<In, Out, Cos, kR, kN, kDv, kIndexAny, kB>);
  }
  (void)p;
  (void)by_part;
  return reinterpret_cast<const void*>(&fused_vec_kernel<In, Out, Cos, kR, kN, kDv>);
}

// The perf suite's canonical shapes get their own specialisation (bf16/fp16 in,
// e4m3fn out, fp32 cos/sin); every other eligible case the run-time shape
// kernel.
template <VecFamily F, DType In, DType Out, DType Cos>
const void* pick_shape(const LaunchParams& p, bool* by_part) {
  if constexpr (Out == DType::kFloat8E4M3FN && Cos == DType::kFloat32) {
    const std::int64_t r = p.rotary_dim, n = p.nope_dim, dv = p.v_dim;
    if (r == 64 && n == 0 && dv == 64) return vec_kernel<F, In, Out, Cos, 64, 0, 64>(p, by_part);
    if (r == 128 && n == 0 && dv == 128)
      return vec_kernel<F, In, Out, Cos, 128, 0, 128>(p, by_part);
    if (r == 64 && n == 64 && dv == 128)
      return vec_kernel<F, In, Out, Cos, 64, 64, 128>(p, by_part);
    if (r == 64 && n == 512 && dv == 0) return vec_kernel<F, In, Out, Cos, 64, 512, 0>(p, by_part);
  }
  return vec_kernel<F, In, Out, Cos, 0, 0, 0>(p, by_part);
}

// The vector path's inputs (its 16-byte loads hold 8 elements of 2 bytes),
// each ending with its fallback (dispatch.hpp).
using VecInputs = DTypeList<DType::kFloat16, DType::kBFloat16>;
template <VecFamily F>
const void* pick_vec(const LaunchParams& p, bool* by_part = nullptr) {
  bool unused = false;
  if (by_part == nullptr) by_part = &unused;
  return dispatch<VecInputs>(p.in.dtype, [&](auto in) {
    constexpr DType kIn = decltype(in)::value;
    return dispatch<Fp8DTypes>(p.q_out.dtype, [&](auto out) {
      constexpr DType kOut = decltype(out)::value;
      return p.cos.dtype == DType::kFloat32 ? pick_shape<F, kIn, kOut, DType::kFloat32>(p, by_part)
                                            : pick_shape<F, kIn, kOut, kIn>(p, by_part);
    });
  });
}

// The decode path's blocks (see fused_decode_kernel's layouts), of whole
// warps, up to max_warps (4: 128 threads; registers are allocated to blocks
// in groups of four warps, so 4-warp blocks waste none; decide() takes 2 or
// 8 where that measured faster, perf/RESULTS.md); `even`: a token's warps
// spread evenly over its blocks (no idle warps in its last block).
//  * packed: the token's units in `chunks` blocks;
//  * by part: each part's units on warps of its own, the warps in blocks.
struct DecodeLayout {
  unsigned block = 0, chunks = 0;
  std::uint32_t units[kParts] = {};
  std::uint32_t warp_begin[kParts + 1] = {};
};
DecodeLayout decode_layout(const VecGeometry& g, std::uint32_t hq, bool by_part,
                           unsigned max_warps = 4, bool even = false) {
  DecodeLayout d;
  part_units(g, hq, d.units);
  for (int i = 0; i < kParts; ++i)
    d.warp_begin[i + 1] = d.warp_begin[i] + (by_part ? (d.units[i] + 31) / 32 : 0);
  const unsigned warps = by_part ? d.warp_begin[kParts] : (g.units + 31) / 32;
  d.chunks = (warps + max_warps - 1) / max_warps;
  const unsigned block_warps = even ? (warps + d.chunks - 1) / d.chunks : max_warps;
  d.block = 32 * (warps < block_warps ? warps : block_warps);
  return d;
}

// Whether every stride of p fits in 32 bits (the decode kernel's, DecodePart).
bool strides_fit32(const LaunchParams& p) {
  const auto fits = [](std::int64_t s) { return s >= INT32_MIN && s <= INT32_MAX; };
  for (const HeadTensor* t :
       {&p.q_rope, &p.k_rope, &p.q_nope, &p.k_nope, &p.v, &p.q_rope_out, &p.q_nope_out})
    if (!fits(t->token_stride) || !fits(t->head_stride)) return false;
  for (const CacheTensor* c : {&p.k_cache_rope, &p.k_cache_nope, &p.v_cache})
    for (const std::int64_t s : c->stride)
      if (!fits(s)) return false;
  return true;
}
// Whether the decode kernel can take p: its strides in 32 bits and a part's
// units in 16 (DecodePart).
bool decode_fits(const LaunchParams& p, const VecGeometry& g) {
  if (!strides_fit32(p)) return false;
  std::uint32_t units[kParts];
  part_units(g, std::uint32_t(p.num_q_heads), units);
  for (const std::uint32_t u : units)
    if (u > 0xffffu) return false;
  return true;
}

// The scale of row part `part`'s output (scale_index's choice).
const ScaleParam& part_scale(const LaunchParams& p, std::uint32_t part) {
  const std::uint32_t i = scale_index(part);
  return i == 0 ? p.q_scale : (i == 1 ? p.k_scale : p.v_scale);
}

// The decode kernel's view of p (see DecodeParams), every field written in
// place, in two parts as lowering has them (core/src/lower.cpp): the shape
// (host scales become divisors here, once per decision) and the step's data.
void fill_decode_shape(const LaunchParams& p, const VecGeometry& g, bool by_part, DecodeParams& d) {
  d.units = g.units;
  d.rot_units = g.rot_units;
  d.q_nope_end = g.q_nope_end;
  d.k_nope_end = g.k_nope_end;
  d.rot_sub = g.rot_sub;
  d.nope_sub = g.nope_sub;
  d.v_sub = g.v_sub;
  d.num_q_heads = std::uint32_t(p.num_q_heads);
  d.page_shift = p.page_shift;
  d.early_indices = p.pdl && p.early_indices;
  d.checked = p.checked;
  d.addressing = std::uint8_t(p.addressing);
  d.cos_row_bytes = p.cos_row_stride * p.cos.bytes;
  const DecodeLayout layout = decode_layout(g, std::uint32_t(p.num_q_heads), by_part);
  d.warp_k = layout.warp_begin[kRotK];
  d.warp_v = layout.warp_begin[kValue];
  const IndexArray* arrays[6] = {&p.slot_mapping, &p.positions, &p.batch_indices,
                                 &p.kv_positions, &p.kv_indptr, &p.kv_indices};
  for (int i = 0; i < 6; ++i) d.i64[i] = arrays[i]->i64;
  d.page_size = p.page_size;
  d.num_pages = p.num_pages;
  d.max_pos = p.max_pos;
  auto part = [&](std::uint32_t i, const HeadTensor& in, std::int64_t s0, std::int64_t s1,
                  std::int64_t s2) {
    DecodePart& r = d.part[i];
    const ScaleParam& sc = part_scale(p, i);
    r.div = sc.divisor_of(sc.value);
    r.multiply = sc.convention == ScaleConvention::kMultiply ? 1 : 0;
    r.units = std::uint16_t(layout.units[i]);
    r.src_token = std::int32_t(in.token_stride);  // (decode_fits)
    r.src_head = std::int32_t(in.head_stride);
    r.dst_page = std::int32_t(s0);
    r.dst_entry = std::int32_t(s1);
    r.dst_head = std::int32_t(s2);
  };
  part(kRotQ, p.q_rope, p.q_rope_out.token_stride, 0, p.q_rope_out.head_stride);
  part(kRotK, p.k_rope, p.k_cache_rope.stride[0], p.k_cache_rope.stride[1],
       p.k_cache_rope.stride[2]);
  part(kNopeQ, p.q_nope, p.q_nope_out.token_stride, 0, p.q_nope_out.head_stride);
  part(kNopeK, p.k_nope, p.k_cache_nope.stride[0], p.k_cache_nope.stride[1],
       p.k_cache_nope.stride[2]);
  part(kValue, p.v, p.v_cache.stride[0], p.v_cache.stride[1], p.v_cache.stride[2]);
  // The lean body unless a present part's host divisor needs IEEE division
  // (a device scale's is tested in the kernel).
  bool lean = true;
  for (std::uint32_t i = 0; i < kParts; ++i)
    lean = lean && (layout.units[i] == 0 || !needs_ieee(d.part[i].div));
  d.body = std::uint8_t((lean ? kBodyLean : kBodyGeneral) | std::uint8_t(p.style));
}
void fill_decode_data(const LaunchParams& p, DecodeParams& d) {
  d.slot_mapping = p.slot_mapping.data;
  d.batch_indices = p.batch_indices.data;
  d.kv_positions = p.kv_positions.data;
  d.positions = p.positions.data;
  d.kv_indptr = p.kv_indptr.data;
  d.kv_indices = p.kv_indices.data;
  d.batch_size = p.batch_size;
  d.num_kv_indices = p.num_kv_indices;
  d.skipped_tokens = p.skipped_tokens;
  d.cos_sin = p.cos_sin;
  auto part = [&](std::uint32_t i, const HeadTensor& in, char* out) {
    d.part[i].src = in.data;
    d.part[i].dst = out;
    d.part[i].scale_ptr = part_scale(p, i).device;
  };
  part(kRotQ, p.q_rope, p.q_rope_out.data);
  part(kRotK, p.k_rope, p.k_cache_rope.data);
  part(kNopeQ, p.q_nope, p.q_nope_out.data);
  part(kNopeK, p.k_nope, p.k_cache_nope.data);
  part(kValue, p.v, p.v_cache.data);
}

// The bulk kernel's view of p's inputs (see BulkPlan), for `tokens_max`
// tokens a block and `slot_max` bytes a ring slot at most (one token at least): false where the
// input parts of a token do not tile one span of at most kBulkSpanMax bytes with a common token
// stride.
constexpr std::uint32_t kBulkSpanMax = 32 * 1024;  // bytes of one token's inputs
constexpr std::uint32_t kBulkSlotMax = 32 * 1024;  // bytes of a ring slot (default)
struct BulkPart {
  const HeadTensor* t;
  std::int64_t heads, len;  // rows and their elements; 0: absent
  bool present() const { return len != 0 && heads != 0; }
};
struct BulkParts {
  BulkPart part[kParts];
  const char* base = nullptr;  // the lowest part's data
  std::int64_t stride = -1;    // the parts' common token stride (elements), -1: none
};
BulkParts bulk_parts(const LaunchParams& p) {
  static_assert(kRotQ == 0 && kRotK == 1 && kNopeQ == 2 && kNopeK == 3 && kValue == 4,
                "bulk_parts lists the parts in their order");
  BulkParts b = {{{&p.q_rope, p.num_q_heads, p.rotary_dim},
                  {&p.k_rope, p.num_kv_heads, p.rotary_dim},
                  {&p.q_nope, p.num_q_heads, p.nope_dim},
                  {&p.k_nope, p.num_kv_heads, p.nope_dim},
                  {&p.v, p.num_kv_heads, p.v_dim}}};
  for (const BulkPart& x : b.part) {
    if (!x.present()) continue;
    if (b.stride >= 0 && x.t->token_stride != b.stride) return BulkParts{};
    b.stride = x.t->token_stride;
    if (b.base == nullptr || x.t->data < b.base) b.base = x.t->data;
  }
  return b;
}
bool bulk_plan(const LaunchParams& p, std::uint32_t tokens_max, std::uint32_t slot_max,
               BulkPlan* b) {
  const BulkParts bp = bulk_parts(p);
  if (bp.base == nullptr || bp.stride <= 0) return false;
  // Every row of every part as a byte interval of the span; they must tile
  // [0, span) exactly (sorted, each starting where the last ended).
  struct Row {
    std::int64_t lo, hi;
  };
  std::vector<Row> rows;
  for (std::uint32_t i = 0; i < kParts; ++i) {
    const BulkPart& x = bp.part[i];
    b->off[i] = 0;
    b->head_stride[i] = x.t->head_stride;
    if (!x.present()) continue;
    const std::int64_t off = x.t->data - bp.base;
    if (off >= kBulkSpanMax) return false;
    b->off[i] = std::uint32_t(off);
    for (std::int64_t h = 0; h < x.heads; ++h) {
      const std::int64_t lo = off + h * x.t->head_stride * 2;
      rows.push_back(Row{lo, lo + x.len * 2});
    }
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& c) { return a.lo < c.lo; });
  std::int64_t end = 0;
  for (const Row& r : rows) {
    if (r.lo != end) return false;
    end = r.hi;
  }
  if (end > kBulkSpanMax || end > bp.stride * 2 || end % 16 != 0) return false;
  b->base = bp.base;
  b->token_bytes = bp.stride * 2;
  b->span = std::uint32_t(end);
  b->contiguous = b->token_bytes == end;
  std::uint32_t tokens = slot_max / b->span;
  if (tokens > tokens_max) tokens = tokens_max;
  b->tokens = tokens > 0 ? tokens : 1;
  return true;
}
// A kept bulk decision for a call of the same decision key: its plan holds
// where the parts keep their strides and places relative to each other (the
// tiling is translation-invariant); then only the base moves.
bool bulk_holds(const LaunchParams& p, BulkPlan& b) {
  const BulkParts bp = bulk_parts(p);
  if (bp.base == nullptr || bp.stride * 2 != b.token_bytes) return false;
  for (std::uint32_t i = 0; i < kParts; ++i) {
    const BulkPart& x = bp.part[i];
    if (!x.present()) continue;
    if (x.t->head_stride != b.head_stride[i] || x.t->data - bp.base != std::int64_t(b.off[i]))
      return false;
  }
  b.base = bp.base;
  return true;
}

// The generic kernel for p's dtypes: the output dtype fixed when the query
// output and the cache share an FP8 dtype, else (kInvalid, the fallback)
// dispatched per element; the cos/sin table fp32 or the input dtype
// (validated).
using GenericKernel = void (*)(const LaunchParams);
using GenericOutputs =
    DTypeList<DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E4M3FNUZ, DType::kInvalid>;
GenericKernel pick_generic(const LaunchParams& p) {
  const DType out = p.q_out.dtype == p.cache.dtype ? p.cache.dtype : DType::kInvalid;
  return dispatch<InputDTypes>(p.in.dtype, [&](auto in) {
    return dispatch<GenericOutputs>(out, [&](auto o) -> GenericKernel {
      constexpr DType kIn = decltype(in)::value, kOut = decltype(o)::value;
      return p.cos.dtype == DType::kFloat32 ? &fused_generic_kernel<kIn, kOut, true>
                                            : &fused_generic_kernel<kIn, kOut, false>;
    });
  });
}

unsigned grid_for(std::uint64_t work, unsigned block, int sms, unsigned per_sm) {
  const std::uint64_t want = (work + block - 1) / block;
  const std::uint64_t cap = std::uint64_t(sms) * per_sm;
  return unsigned(want < cap ? (want > 0 ? want : 1) : cap);
}

// [[maybe_unused]]: HIP's device passes see these but not their one user.
[[maybe_unused]] bool gpu_available() noexcept {
  int n = 0;
  const bool ok = device_count(&n) == kSuccess && n > 0;
  (void)last_error();  // clear the sticky "no device" error of a failed query
  return ok;
}

const PreparedLaunch* prepare_in_thread(const LaunchParams& p) noexcept;
const PreparedLaunch* prepare_in_state(const LaunchParams& p, LaunchState& state) noexcept;
Result no_current_device() {
  return make_result(Status::kErrorNoDevice, "%s backend: no current device", kVendorName);
}

[[maybe_unused]] Result gpu_launch(const LaunchParams& p, LaunchState* state) noexcept {
  const PreparedLaunch* l = state != nullptr ? prepare_in_state(p, *state) : prepare_in_thread(p);
  if (l == nullptr) return no_current_device();
  // The vendor launch reports this launch's errors itself (cuda/vendor.hpp,
  // hip/vendor.hpp): no second query on success.
  const Error err = launch_prepared(*l);
  if (err != kSuccess) {
    (void)last_error();  // the error is reported here, not left for the caller's next query
    return make_result(Status::kErrorLaunchFailed, "%s backend: kernel launch failed: %s",
                       kVendorName, error_string(err));
  }
  return Result{};
}

}  // namespace

const char* to_string(Path path) noexcept {
  switch (path) {
    case Path::kDecode: return "decode";
    case Path::kVector: return "vector";
    case Path::kStaged: return "staged";
    case Path::kBulk: return "bulk";
    case Path::kRows: return "rows";
    case Path::kGeneric: return "generic";
  }
  return "unknown";
}

void set_tuning(const Tuning& t) noexcept {
  g_tune_decode.store(t.decode, std::memory_order_relaxed);
  g_tune_trigger.store(t.pdl_trigger, std::memory_order_relaxed);
  g_tune_bulk.store(t.bulk, std::memory_order_relaxed);
  g_tune_rows.store(t.rows, std::memory_order_relaxed);
  g_tune_decode_warps.store(t.decode_warps, std::memory_order_relaxed);
}
Tuning tuning() noexcept {
  Tuning t;
  t.decode = g_tune_decode.load(std::memory_order_relaxed);
  t.pdl_trigger = g_tune_trigger.load(std::memory_order_relaxed);
  t.bulk = g_tune_bulk.load(std::memory_order_relaxed);
  t.rows = g_tune_rows.load(std::memory_order_relaxed);
  t.decode_warps = g_tune_decode_warps.load(std::memory_order_relaxed);
  return t;
}

ResidentCacheProbe probe_resident_cache(const void* kernel, unsigned block, int dev) noexcept {
  ResidentCache& c = resident_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  ResidentCacheProbe probe;
  probe.entries = int(c.entries.size());
  for (std::size_t i = 0; i < c.entries.size(); ++i) {
    const ResidentEntry& e = c.entries[i];
    if (e.kernel == kernel && e.block == block && e.dev == dev) {
      probe.position = int(i);
      probe.shared = e.shared;
    }
  }
  return probe;
}

namespace {

// The launch decision for p on `dev`: path, kernel, grid, block, dynamic
// shared memory and geometry (not the call's own fields: stream, params,
// decode parameters).
void decide(const LaunchParams& p, int dev, const Tuning& tune, PreparedLaunch& l) {
  const int sms = sm_count(dev);
  l.smem = 0;
  l.geometry = VecGeometry{};
  l.decode_by_part = false;
  if (!vector_eligible(p)) {
    l.path = Path::kGeneric;
    l.kernel = reinterpret_cast<const void*>(pick_generic(p));
    l.grid = dim3(grid_for(std::uint64_t(p.nnz) * kGenericBlock, kGenericBlock, sms, 8));
    l.block = dim3(kGenericBlock);
    return;
  }
  bool staged = false;
  VecGeometry g = geometry(p, sms, &staged);
  // Decode: the whole one-unit-per-thread grid resident at once.
  if (tune.decode >= 0 && p.nnz <= 65535 && decode_fits(p, g)) {
    bool by_part = false;
    const void* kernel = pick_vec<VecFamily::kDecode>(p, &by_part);
    const void* few = pick_vec<VecFamily::kDecodeFew>(p);  // a 48-register kernel's twin
    const std::uint32_t hq = std::uint32_t(p.num_q_heads);
    DecodeLayout d = tune.decode_warps > 0
                         ? decode_layout(g, hq, by_part, unsigned(tune.decode_warps), true)
                         : decode_layout(g, hq, by_part);
    std::uint64_t blocks = std::uint64_t(d.chunks) * std::uint64_t(p.nnz);
    // Without PDL, at 4 or more blocks a multiprocessor: blocks of up to 8
    // warps, a token's warps spread evenly over them (fewer blocks, no idle
    // warps), where that grid fits at once too; for the 64-register kernels
    // (MLA's 48-register kernels, which have a twin, keep 4: not measured).
    // With PDL larger blocks measured 1.2-1.4x slower at 256 tokens: they
    // hold back the next launch's blocks (perf/RESULTS.md).
    if (tune.decode_warps == 0 && !p.pdl && blocks >= 4 * std::uint64_t(sms) && few == nullptr) {
      const DecodeLayout wide = decode_layout(g, hq, by_part, 8, true);
      const std::uint64_t wide_blocks = std::uint64_t(wide.chunks) * std::uint64_t(p.nnz);
      const int wide_per_sm = resident_per_sm(kernel, wide.block, 0, dev);
      if (wide_per_sm > 0 && wide_blocks <= std::uint64_t(wide_per_sm) * std::uint64_t(sms)) {
        d = wide;
        blocks = wide_blocks;
      }
    }
    // Packed, with PDL and early indices: blocks of 2 warps while those of
    // 4 are fewer than 4 a multiprocessor (0.74-0.88 of the 4-warp time at
    // 64 tokens; with more blocks, or without early indices, no gain).
    if (!by_part && p.pdl && p.early_indices && blocks < 4 * std::uint64_t(sms)) {
      d = decode_layout(g, hq, false, 2);
      blocks = std::uint64_t(d.chunks) * std::uint64_t(p.nnz);
    }
    const int per_sm = resident_per_sm(kernel, d.block, 0, dev);
    if (per_sm > 0 && (tune.decode > 0 || blocks <= std::uint64_t(per_sm) * std::uint64_t(sms))) {
      // A 48-register kernel's 64-register twin where its grid fits at once
      // too (MLA: 0.97-0.99 at 1-8 tokens).
      if (few != nullptr) {
        const int few_per_sm = resident_per_sm(few, d.block, 0, dev);
        if (few_per_sm > 0 && blocks <= std::uint64_t(few_per_sm) * std::uint64_t(sms))
          kernel = few;
      }
      l.path = Path::kDecode;
      l.kernel = kernel;
      l.decode_by_part = by_part;
      l.grid = dim3(d.chunks, unsigned(p.nnz));
      l.block = dim3(d.block);
      l.geometry = g;
      return;
    }
  }
  // Vector kernels: at most one wave of resident blocks, teams loop over
  // tokens (and prefetch the next token's indices). Large launches take the
  // staged kernel where the vendor has asynchronous copies (and it fits).
  // Under PDL their blocks let the next kernel launch when they exit.
  g.early_trigger = tune.pdl_trigger > 0 ? 1u : 0u;
  if constexpr (kBulkCopy) {
    BulkPlan b;
    const std::uint32_t slot_max = tune.bulk > 1 ? std::uint32_t(tune.bulk) * 1024 : kBulkSlotMax;
    if (tune.bulk > 0 && bulk_plan(p, g.teams, slot_max, &b)) {
      const void* kernel = pick_vec<VecFamily::kBulk>(p);
      const unsigned bulk_block = g.team * b.tokens;
      const std::size_t smem = bulk_shared_bytes(b);
      const int bulk_per_sm =
          bulk_copy_built(kernel) ? resident_per_sm(kernel, bulk_block, smem, dev) : 0;
      if (bulk_per_sm > 0) {
        l.path = Path::kBulk;
        l.kernel = kernel;
        l.smem = smem;
        l.bulk = b;
        l.grid = dim3(grid_for((std::uint64_t(p.nnz) + b.tokens - 1) / b.tokens, 1, sms,
                               unsigned(bulk_per_sm)));
        l.block = dim3(bulk_block);
        l.geometry = g;
        return;
      }
    }
  }
  // The rows kernel, where the vendor layer builds it: for the specialised
  // shapes without non-rotary parts launches past the decode kernel's whose
  // grid has a block for every other multiprocessor; for the others launches
  // beyond one wave whose grid has a block for every multiprocessor (with
  // fewer blocks slower). Beyond one wave, where the query's rotary units
  // take one round, the one-round kernel (perf/RESULTS.md).
  const bool no_nope = p.nope_dim == 0;
  if (tune.rows > 0 || (tune.rows == 0 && (staged || no_nope))) {
    const std::uint32_t team = rows_team(g, std::uint32_t(p.num_q_heads));
    const bool one_round =
        staged && no_nope && std::uint64_t(p.num_q_heads) * g.rot_sub <= kRowsQueryUnits * team;
    const void* kernel =
        one_round ? pick_vec<VecFamily::kRowsOneRound>(p) : pick_vec<VecFamily::kRows>(p);
    const int rows_per_sm = kernel != nullptr ? resident_per_sm(kernel, kVecBlock, 0, dev) : 0;
    const std::uint64_t blocks = (std::uint64_t(p.nnz) + kVecBlock / team - 1) / (kVecBlock / team);
    const std::uint64_t min_blocks = std::uint64_t(sms) / (no_nope ? 2 : 1);
    if (rows_per_sm > 0 && (tune.rows > 0 || blocks >= min_blocks)) {
      g.team = team;
      g.teams = kVecBlock / g.team;
      l.path = Path::kRows;
      l.kernel = kernel;
      l.grid = dim3(grid_for(blocks, 1, sms, unsigned(rows_per_sm)));
      l.block = dim3(g.team * g.teams);
      l.geometry = g;
      return;
    }
  }
  const unsigned block = g.team * g.teams;
  unsigned per_sm = 0;
  if constexpr (kAsyncCopy) {
    if (staged) {
      l.path = Path::kStaged;
      l.kernel = pick_vec<VecFamily::kStaged>(p);
      l.smem = staged_shared_bytes(block);
      per_sm = unsigned(resident_per_sm(l.kernel, block, l.smem, dev));
    }
  }
  if (per_sm == 0) {
    l.path = Path::kVector;
    l.kernel = pick_vec<VecFamily::kDirect>(p);
    l.smem = 0;
    per_sm = unsigned(resident_per_sm(l.kernel, block, 0, dev));
    if (per_sm == 0) per_sm = 1;
  }
  l.grid = dim3(grid_for((std::uint64_t(p.nnz) + g.teams - 1) / g.teams, 1, sms, per_sm));
  l.block = dim3(block);
  l.geometry = g;
}

// Everything decide() reads: equal keys, equal decisions (the data
// pointers enter only through vector_eligible's alignment verdict). No
// padding: keys compare as bytes.
struct DecisionKey {
  std::int64_t nnz, num_q_heads, num_kv_heads, rotary_dim, nope_dim, v_dim;
  std::int32_t dev, tune_decode, tune_trigger, page_shift;
  std::int32_t in, q_out, cache, cos, addressing;
  std::uint32_t flags;  // vector-eligible, checked, the index arrays' widths, tuning bulk, rows,
                        // strides beyond 32 bits, PDL with early indices, PDL, decode_warps
};
constexpr std::uint32_t kKeyBulk = 256, kKeyRows = 512, kKeyNoRows = 1024, kKeyWide = 2048,
                        kKeyEarly = 4096, kKeyPdl = 8192, kKeyDecodeWarpsShift = 16;
static_assert(std::has_unique_object_representations_v<DecisionKey>,
              "DecisionKey must have no padding (compared with memcmp)");

DecisionKey decision_key(const LaunchParams& p, int dev, const Tuning& tune) {
  DecisionKey k;
  k.nnz = p.nnz;
  k.num_q_heads = p.num_q_heads;
  k.num_kv_heads = p.num_kv_heads;
  k.rotary_dim = p.rotary_dim;
  k.nope_dim = p.nope_dim;
  k.v_dim = p.v_dim;
  k.dev = dev;
  k.tune_decode = tune.decode;
  k.tune_trigger = tune.pdl_trigger;
  k.page_shift = p.page_shift;
  k.in = std::int32_t(p.in.dtype);
  k.q_out = std::int32_t(p.q_out.dtype);
  k.cache = std::int32_t(p.cache.dtype);
  k.cos = std::int32_t(p.cos.dtype);
  k.addressing = std::int32_t(p.addressing);
  k.flags = (vector_eligible(p) ? 1u : 0u) | (p.checked ? 2u : 0u) |
            (p.slot_mapping.i64 ? 4u : 0u) | (p.positions.i64 ? 8u : 0u) |
            (p.batch_indices.i64 ? 16u : 0u) | (p.kv_positions.i64 ? 32u : 0u) |
            (p.kv_indptr.i64 ? 64u : 0u) | (p.kv_indices.i64 ? 128u : 0u) |
            (tune.bulk > 0 ? kKeyBulk : 0u) | (tune.rows > 0 ? kKeyRows : 0u) |
            (tune.rows < 0 ? kKeyNoRows : 0u) | (strides_fit32(p) ? 0u : kKeyWide) |
            (p.pdl && p.early_indices ? kKeyEarly : 0u) | (p.pdl ? kKeyPdl : 0u) |
            (std::uint32_t(std::uint8_t(std::int8_t(tune.decode_warps))) << kKeyDecodeWarpsShift);
  return k;
}

}  // namespace

namespace {

// The calling thread's launch of p: its last decision, reused for a call
// that decides alike (an engine repeats its shapes: every layer of a step),
// with this call's own fields filled in place. Valid until the thread's
// next call; null without a current device.
// The calling thread's current device; false (its error cleared) without one.
bool calling_device(int* dev) {
  if (current_device(dev) == kSuccess) return true;
  (void)last_error();
  return false;
}

// A decided launch's per-call fields from p: stream, parameters, and the
// decode parameters' data (with `shape`, their shape part too).
void fill_call(const LaunchParams& p, PreparedLaunch& l, bool shape) {
  l.stream = static_cast<Stream>(p.stream);
  l.pdl = p.pdl;
  l.params = &p;
  if (l.path != Path::kDecode) return;
  if (shape) fill_decode_shape(p, l.geometry, l.decode_by_part, l.decode);
  fill_decode_data(p, l.decode);
}

const PreparedLaunch* prepare_in_thread(const LaunchParams& p) noexcept {
  int dev = 0;
  if (!calling_device(&dev)) return nullptr;
  struct Last {
    bool valid = false;
    DecisionKey key;
    PreparedLaunch launch;
  };
  thread_local Last last;
  const DecisionKey key = decision_key(p, dev, tuning());
  PreparedLaunch& l = last.launch;
  const Tuning tune{key.tune_decode, key.tune_trigger, (key.flags & kKeyBulk) != 0 ? 1 : 0,
                    (key.flags & kKeyRows) != 0 ? 1 : ((key.flags & kKeyNoRows) != 0 ? -1 : 0),
                    int(std::int8_t(std::uint8_t(key.flags >> kKeyDecodeWarpsShift)))};
  if (!last.valid || std::memcmp(&key, &last.key, sizeof key) != 0) {
    decide(p, dev, tune, l);
    last.key = key;
    last.valid = true;
  }
  // The bulk kernel's plan reads the inputs' relative places, which the key
  // leaves out.
  if (l.path == Path::kBulk && !bulk_holds(p, l.bulk)) decide(p, dev, tune, l);
  fill_call(p, l, true);  // the decision's key leaves strides out: shape too
  return &l;
}

// A caller's launch (LaunchState: its calls differ only in lower_data's
// fields): the kept decision while the token count, the device, the tuning
// and the alignment verdict stay, with only the step's data filled in;
// else decided and filled afresh. Null without a current device.
struct StateLaunch {
  std::int64_t nnz = 0;
  int dev = -1;
  Tuning tune;
  bool eligible = false;
  PreparedLaunch launch;
};
static_assert(sizeof(StateLaunch) <= LaunchState::kBytes && alignof(StateLaunch) <= 16,
              "StateLaunch must fit in LaunchState");
const PreparedLaunch* prepare_in_state(const LaunchParams& p, LaunchState& state) noexcept {
  int dev = 0;
  if (!calling_device(&dev)) return nullptr;
  const Tuning tune = tuning();
  const bool eligible = vector_eligible(p);
  if (!state.valid) new (state.bytes) StateLaunch;
  StateLaunch& s = *std::launder(reinterpret_cast<StateLaunch*>(state.bytes));
  PreparedLaunch& l = s.launch;
  bool decided = state.valid && s.nnz == p.nnz && s.dev == dev && s.tune.decode == tune.decode &&
                 s.tune.pdl_trigger == tune.pdl_trigger && s.tune.bulk == tune.bulk &&
                 s.tune.rows == tune.rows && s.tune.decode_warps == tune.decode_warps &&
                 s.eligible == eligible;
  if (decided && l.path == Path::kBulk && !bulk_holds(p, l.bulk)) decided = false;
  if (!decided) {
    decide(p, dev, tune, l);
    s.nnz = p.nnz;
    s.dev = dev;
    s.tune = tune;
    s.eligible = eligible;
    state.valid = true;
  }
  fill_call(p, l, !decided);
  return &l;
}

}  // namespace

Result prepare_launch(const LaunchParams& p, PreparedLaunch* out, LaunchState* state) noexcept {
  const PreparedLaunch* l = state != nullptr ? prepare_in_state(p, *state) : prepare_in_thread(p);
  if (l == nullptr) return no_current_device();
  *out = *l;
  return Result{};
}

Error launch_prepared(const PreparedLaunch& l) noexcept {
  void* args[3] = {nullptr, nullptr, nullptr};
  switch (l.path) {
    case Path::kDecode: args[0] = const_cast<DecodeParams*>(&l.decode); break;
    case Path::kGeneric: args[0] = const_cast<LaunchParams*>(l.params); break;
    case Path::kBulk:
      args[0] = const_cast<LaunchParams*>(l.params);
      args[1] = const_cast<VecGeometry*>(&l.geometry);
      args[2] = const_cast<BulkPlan*>(&l.bulk);
      break;
    default:
      args[0] = const_cast<LaunchParams*>(l.params);
      args[1] = const_cast<VecGeometry*>(&l.geometry);
      break;
  }
  return launch(l.kernel, l.grid, l.block, l.smem, l.stream, l.pdl, args);
}

}  // namespace gpu

#if defined(ROPEKV_GPU_HIP)
#if !defined(__HIP_DEVICE_COMPILE__)  // a host object: not part of HIP's device passes
const BackendOps kHipBackendOps = {gpu::kBackendId, &gpu::gpu_available, &gpu::gpu_launch};
#endif
#else
const BackendOps kCudaBackendOps = {gpu::kBackendId, &gpu::gpu_available, &gpu::gpu_launch};
#endif

}  // namespace detail
}  // namespace ropekv
