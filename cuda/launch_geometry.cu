// The launcher's arithmetic for a call (cuda/launch_geometry.hpp). One
// source for CUDA and HIP.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/launch_geometry.hpp"

namespace ropekv {
namespace detail {
namespace gpu {

namespace {

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

// A token's units per row part, from the geometry's part boundaries (its
// rotary rows: hq query heads, then the key heads).
void part_units(const VecGeometry& g, std::uint32_t hq, std::uint32_t (&units)[kParts]) {
  units[kRotQ] = hq * g.rot_sub;
  units[kRotK] = g.rot_units - units[kRotQ];
  units[kNopeQ] = g.q_nope_end - g.rot_units;
  units[kNopeK] = g.k_nope_end - g.q_nope_end;
  units[kValue] = g.units - g.k_nope_end;
}

// The scale of row part `part`'s output (scale_index's choice).
const ScaleParam& part_scale(const LaunchParams& p, std::uint32_t part) {
  const std::uint32_t i = scale_index(part);
  return i == 0 ? p.q_scale : (i == 1 ? p.k_scale : p.v_scale);
}

// A token's input parts for the bulk kernel: each part's rows, the lowest
// part's data and their common token stride.
constexpr std::uint32_t kBulkSpanMax = 32 * 1024;  // bytes of one token's inputs
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

}  // namespace

// The vector path's conditions (see cuda/kernels/).
bool vector_eligible(const LaunchParams& p) {
  if (p.in.dtype != DType::kBFloat16 && p.in.dtype != DType::kFloat16) return false;
  if (!dtype_info(p.q_out.dtype).quantized || p.cache.dtype != p.q_out.dtype) return false;
  if (p.rotary_dim % kItem != 0 || p.nope_dim % kItem != 0 || p.v_dim % kItem != 0) return false;
  if (p.rotary_dim / kItem > kVecBlock) return false;  // a team of S_r lanes fits in a block
  // Unit counts fit 32 bits: heads * units a head < 2^31, tested without a
  // product that could overflow (validation bounds each factor, not both).
  const std::int64_t head_units = (p.rotary_dim + p.nope_dim + p.v_dim) / kItem;
  if (head_units > 0 && p.num_q_heads + p.num_kv_heads > ((std::int64_t(1) << 31) - 1) / head_units)
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
// (perf/RESULTS.md).
constexpr std::uint32_t kDecodeRounds = 2;
constexpr std::uint32_t kLargeRounds = 5;
constexpr std::uint32_t kLargeTeam = 64;
// Launch sizes, in waves of decode-sized teams (decode_threads against the
// device's capacity): beyond half a wave a launch takes the large-launch
// teams, beyond one wave the staged kernel (where the vendor layer has
// asynchronous copies): the thresholds that measured fastest (perf/RESULTS.md).

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
  g.guided_blocks = 0;
  return g;
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

DecodeLayout decode_layout(const VecGeometry& g, std::uint32_t hq, bool by_part, unsigned max_warps,
                           bool even) {
  DecodeLayout d;
  part_units(g, hq, d.units);
  if (decode_by_role(g, by_part)) {
    // (warp_begin[kRotK]: the cache's first warp.)
    const std::uint32_t query = d.units[kRotQ] + d.units[kNopeQ];
    const std::uint32_t cache = g.units - query;
    d.warp_begin[kRotK] = (query + 31) / 32;
    for (int i = kRotK + 1; i <= kParts; ++i)
      d.warp_begin[i] = d.warp_begin[kRotK] + (cache + 31) / 32;
  } else {
    for (int i = 0; i < kParts; ++i)
      d.warp_begin[i + 1] = d.warp_begin[i] + (by_part ? (d.units[i] + 31) / 32 : 0);
  }
  const unsigned warps = by_part ? d.warp_begin[kParts] : (g.units + 31) / 32;
  d.chunks = (warps + max_warps - 1) / max_warps;
  const unsigned block_warps = even ? (warps + d.chunks - 1) / d.chunks : max_warps;
  d.block = 32 * (warps < block_warps ? warps : block_warps);
  return d;
}

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
bool decode_fits(const LaunchParams& p, const VecGeometry& g) {
  if (!strides_fit32(p)) return false;
  std::uint32_t units[kParts];
  part_units(g, std::uint32_t(p.num_q_heads), units);
  for (const std::uint32_t u : units)
    if (u > 0xffffu) return false;
  return true;
}

FlatDivisor flat_divisor(std::uint32_t units) {
  std::uint32_t k = 0;
  while ((std::uint64_t(1) << k) < units) ++k;
  return {std::uint32_t(((std::uint64_t(1) << (31 + k)) + units - 1) / units), 31 + k};
}

void fill_decode_shape(const LaunchParams& p, const VecGeometry& g, bool by_part, bool flat,
                       DecodeParams& d) {
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
  // Packed: copies of the second line's rot_units and num_q_heads, which the
  // 2D kernels of shapes without non-rotary parts read instead (kFirstLine).
  d.warp_k = by_part ? layout.warp_begin[kRotK] : g.rot_units;
  d.warp_v = by_part ? layout.warp_begin[kValue] : std::uint32_t(p.num_q_heads);
  if (flat) {
    // Thread x's token (flat_divisor), the token count beside the shift
    // (decode_flat's bound: nnz < 2^24). By role (by_part): the query
    // role's divisor there, the cache role's and the query role's end in
    // FlatRoleFields.
    const std::uint32_t query = by_part ? layout.units[kRotQ] + layout.units[kNopeQ] : g.units;
    const FlatDivisor q = flat_divisor(query);
    d.warp_k = q.m;
    d.warp_v = (std::uint32_t(p.nnz) << 8) | q.s;
    if (by_part) {
      const FlatDivisor c = flat_divisor(g.units - query);
      d.*FlatRoleFields::cache_m = c.m;
      d.*FlatRoleFields::cache_s = c.s;
      d.*FlatRoleFields::query_end = std::uint32_t(p.nnz) * query;
    }
  }
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

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
