// The reference kernels the perf suite times beside the op, and their launches: the floor, the
// data floor, the move floor, the math floor, the chain floor and the op floor (GpuKind::kFloor,
// kDataFloor, kMove, kMathFloor; see cuda_perf.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/launch_geometry.hpp"
#include "cuda/launcher.hpp"
#include "cuda_problem.hpp"

namespace ropekv_perf {

namespace {

// The floor of the op's dependent-load chain: block t, thread r takes output
// row r of token t (q heads, then k heads, then v heads) and does only what
// no version of the op can skip: load the token's index entries, then (not
// padding) its cos/sin value at the position and, for page tables,
// kv_indptr[b] then the page entry, then store one byte of the row.
struct FloorParams {
  const std::int64_t* slots;
  const std::int64_t* positions;
  const std::int32_t* batch_indices;
  const std::int32_t* kv_positions;
  const std::int32_t* kv_indptr;
  const std::int32_t* kv_indices;
  const float* cos_sin;
  std::uint8_t *q_out, *k_cache, *v_cache;
  std::int64_t q_token, q_head;  // bytes
  std::int64_t k_stride[3], v_stride[3];
  int rotary, page_shift, hq, hk, v_rows;
  bool page_table;
};

// The cache page and entry of a token (slot or batch index `key`, position `pos`).
__device__ __forceinline__ void floor_page(const FloorParams& f, std::int64_t key, std::int64_t pos,
                                           std::int64_t* page, std::int64_t* entry) {
  const std::int64_t mask = (std::int64_t(1) << f.page_shift) - 1;
  if (f.page_table) {
    *page = f.kv_indices[f.kv_indptr[key] + (pos >> f.page_shift)];
    *entry = pos & mask;
  } else {
    *page = key >> f.page_shift;
    *entry = key & mask;
  }
}

// Token t's index entries: its key (slot or batch index) and position.
__device__ __forceinline__ void floor_token(const FloorParams& f, std::int64_t t, std::int64_t* key,
                                            std::int64_t* pos) {
  *key = f.page_table ? std::int64_t(f.batch_indices[t]) : f.slots[t];
  *pos = f.page_table ? std::int64_t(f.kv_positions[t]) : f.positions[t];
}

// The first byte of token t's output row: query head h (part 0), or key (1)
// or value (2) head h of its cache entry; k_base: the key cache row's start.
__device__ __forceinline__ std::uint8_t* floor_row(const FloorParams& f, std::uint8_t* k_base,
                                                   std::int64_t t, std::int64_t key,
                                                   std::int64_t pos, int part, int h) {
  if (part == 0) return f.q_out + t * f.q_token + h * f.q_head;
  std::int64_t page, entry;
  floor_page(f, key, pos, &page, &entry);
  return part == 1 ? k_base + page * f.k_stride[0] + entry * f.k_stride[1] + h * f.k_stride[2]
                   : f.v_cache + page * f.v_stride[0] + entry * f.v_stride[1] + h * f.v_stride[2];
}

__global__ void floor_kernel(const FloorParams f) {
  const int row = int(threadIdx.x);
  const std::int64_t t = blockIdx.x;
  if (row >= f.hq + f.hk + f.v_rows) return;
  std::int64_t key, pos;
  floor_token(f, t, &key, &pos);
  if (key < 0) return;
  const float c = __ldg(f.cos_sin + pos * f.rotary + row % f.rotary);
  const int part = row < f.hq ? 0 : (row < f.hq + f.hk ? 1 : 2);
  const int h = part == 0 ? row : (part == 1 ? row - f.hq : row - f.hq - f.hk);
  *floor_row(f, f.k_cache, t, key, pos, part, h) = std::uint8_t(__float_as_uint(c));
}

// The data floor: the floor's chain with every byte of the op moved at the
// decode kernel's grain, and no arithmetic. Block (x, t), thread i takes
// 16-element unit u = x * blockDim.x + i of token t's rows (q heads, k heads:
// D elements each, then v heads: Dv): it loads the index entries, then (not
// padding) the unit's 32 input bytes and, for rotary units, its 8 cos and 8
// sin values (four 16-byte loads), and for cache rows the page entry; it XORs
// them together instead of rotating and quantizing, and stores 16 bytes (two
// 8-byte halves, as the op writes a unit) into q_out or the cache row.
struct DataFloorParams {
  const uint4* in;        // token t's units: in + t * in_units, 2 vectors a unit
  std::int64_t in_units;  // 16-element units per input row (its stride)
  std::uint8_t* k_row;    // a key's cache row (its first byte)
  int units, head_units, rot_units, q_units, kv_units;  // per token / head row
  // u / head_units as a product and a shift (ROPEKV_FLAT_QUOTIENT), as cheap as the
  // fused kernel's compile-time divisions (a run-time division costs a floor that
  // issues every unit's instructions about 20 more).
  ropekv::detail::gpu::FlatDivisor head_div;
};

// Unit u of a token's rows: its row (q and k heads counted together, v heads
// apart), its unit within the row, and whether the op rotates it.
struct FloorUnit {
  int row, sub;
  bool v_row, rotary;
};
__device__ __forceinline__ FloorUnit floor_unit(const DataFloorParams& d, int u) {
  FloorUnit r;
  r.v_row = u >= d.q_units + d.kv_units;
  const int vu = r.v_row ? u - d.q_units - d.kv_units : u;
  r.row = int(ROPEKV_FLAT_QUOTIENT(vu, d.head_div));
  r.sub = vu - r.row * d.head_units;
  r.rotary = !r.v_row && r.sub < d.rot_units;
  return r;
}

// (Both by value: a reference into a kernel parameter makes a local copy of it.)
__global__ void data_floor_kernel(const FloorParams f, const DataFloorParams d) {
  const int u = int(blockIdx.x * blockDim.x + threadIdx.x);
  const std::int64_t t = blockIdx.y;
  if (u >= d.units) return;
  std::int64_t key, pos;
  floor_token(f, t, &key, &pos);
  if (key < 0) return;
  const uint4* x = d.in + (t * d.in_units + u) * 2;
  const uint4 a = __ldg(x), b = __ldg(x + 1);
  const FloorUnit r = floor_unit(d, u);
  const bool v_row = r.v_row;
  const int row = r.row, sub = r.sub;
  uint4 c = make_uint4(0, 0, 0, 0), s = c;
  if (r.rotary) {
    const uint4* cs = reinterpret_cast<const uint4*>(f.cos_sin + pos * f.rotary) + 2 * sub;
    const uint4 c0 = __ldg(cs), c1 = __ldg(cs + 1);
    const uint4 s0 = __ldg(cs + f.rotary / 8), s1 = __ldg(cs + f.rotary / 8 + 1);
    c = make_uint4(c0.x ^ c1.x, c0.y ^ c1.y, c0.z ^ c1.z, c0.w ^ c1.w);
    s = make_uint4(s0.x ^ s1.x, s0.y ^ s1.y, s0.z ^ s1.z, s0.w ^ s1.w);
  }
  const int part = u < d.q_units ? 0 : (v_row ? 2 : 1);
  std::uint8_t* dst = floor_row(f, d.k_row, t, key, pos, part, part == 1 ? row - f.hq : row);
  uint2* out = reinterpret_cast<uint2*>(dst) + 2 * sub;
  out[0] = make_uint2(a.x ^ a.z ^ c.x ^ s.x, a.y ^ a.w ^ c.y ^ s.y);
  out[1] = make_uint2(b.x ^ b.z ^ c.z ^ s.z, b.y ^ b.w ^ c.w ^ s.w);
}

// The move floor: what moving the op's q, k and v bytes alone costs in a
// kernel. Thread u takes 16-element unit u of the input buffer (the nnz
// tokens' rows: two 16-byte loads) and stores 16 bytes (the unit's sixteen
// one-byte codes' worth) at unit u of a contiguous output; no index, no
// cos/sin, no arithmetic but an XOR. With PDL it lets the next launch start at
// once and waits for the previous grid before its loads, which is all a call
// whose inputs the previous kernel writes can do before its data.
// Arith: the same with less arithmetic than any version of the op needs: the
// unit's two 8-element halves widened to float, the first `rot_units` units of
// each token rotated (as many as the op rotates) by one cos/sin pair taken from
// the parameters with the scale folded in (two products a value), the others
// scaled by one product, all converted to e4m3fn by the hardware instruction;
// with PDL it lets the next launch in as the decode kernel does: without
// early indices the first kLateTriggerToken tokens' units at their start, the
// others once past the wait; with them (kEarly: the -pdl-early rows) every
// unit at its start, so that its PDL rows bound the fused kernel's PDL rows.
struct MoveMath {
  ropekv::detail::gpu::FlatDivisor token;  // unit index -> token
  std::uint32_t units, rot_units;          // per token: units, units rotated
  float c, s, inv;                         // cos / scale, sin / scale, 1 / scale
};
// Whether a floor's unit of token t lets the next launch in at its start (else
// past its wait): as the fused decode kernel does, every unit with early
// indices (kEarly), else those of the first kLateTriggerToken tokens.
// (T: the caller's index type, so that the compare keeps its width.)
template <bool kEarly, class T>
__device__ __forceinline__ bool floor_triggers_at_start(T t) {
  return kEarly || t < T(ropekv::detail::gpu::kLateTriggerToken);
}

template <bool Arith, bool kEarly>
__global__ void move_kernel(const uint4* in, uint4* out, std::int64_t units, const MoveMath m) {
  namespace gpu = ropekv::detail::gpu;
  const std::int64_t u = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  const std::uint32_t x = std::uint32_t(u), t = ROPEKV_FLAT_QUOTIENT(x, m.token);
  const bool late = Arith && !floor_triggers_at_start<kEarly>(t);
  if (!late) gpu::dependents_launch();
  gpu::dependency_wait();
  if (late) gpu::dependents_launch();
  if (u >= units) return;
  const uint4 a = __ldg(in + 2 * u), b = __ldg(in + 2 * u + 1);
  if constexpr (!Arith) {
    __stcs(out + u, make_uint4(a.x ^ b.x, a.y ^ b.y, a.z ^ b.z, a.w ^ b.w));
  } else {
    const bool rot = x - t * m.units < m.rot_units;
    float xs[8], ys[8];
    gpu::decode8<ropekv::DType::kBFloat16>(a, xs);
    gpu::decode8<ropekv::DType::kBFloat16>(b, ys);
    std::uint32_t code[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float x0 = xs[2 * i], x1 = xs[2 * i + 1], y0 = ys[2 * i], y1 = ys[2 * i + 1];
      float p0, p1, q0, q1;
      if (rot) {
        p0 = x0 * m.c - y0 * m.s;
        p1 = x1 * m.c - y1 * m.s;
        q0 = y0 * m.c + x0 * m.s;
        q1 = y1 * m.c + x1 * m.s;
      } else {
        p0 = x0 * m.inv;
        p1 = x1 * m.inv;
        q0 = y0 * m.inv;
        q1 = y1 * m.inv;
      }
      gpu::hw_encode_fp8x2<ropekv::DType::kFloat8E4M3FN>(p0, p1, &code[i]);
      gpu::hw_encode_fp8x2<ropekv::DType::kFloat8E4M3FN>(q0, q1, &code[4 + i]);
    }
    __stcs(out + u, make_uint4(code[0] | code[1] << 16, code[2] | code[3] << 16,
                               code[4] | code[5] << 16, code[6] | code[7] << 16));
  }
}

FloorParams floor_params(const ropekv::Arguments& a, const Shape& s) {
  FloorParams f = {};
  const ropekv::CacheIndex& ci = a.cache_index;
  f.page_table = ci.form == ropekv::Addressing::kPageTable;
  f.slots = static_cast<const std::int64_t*>(ci.slot_mapping.data);
  f.positions = static_cast<const std::int64_t*>(a.positions.data);
  f.batch_indices = static_cast<const std::int32_t*>(ci.batch_indices.data);
  f.kv_positions = static_cast<const std::int32_t*>(ci.kv_positions.data);
  f.kv_indptr = static_cast<const std::int32_t*>(ci.kv_indptr.data);
  f.kv_indices = static_cast<const std::int32_t*>(ci.kv_indices.data);
  f.cos_sin = static_cast<const float*>(a.cos_sin_cache.data);
  f.q_out = static_cast<std::uint8_t*>(a.q_rope_out.data);
  f.k_cache = static_cast<std::uint8_t*>(a.k_cache_rope.data);
  f.v_cache = static_cast<std::uint8_t*>(a.v_cache.data);
  f.q_token = a.q_rope_out.stride[0];
  f.q_head = a.q_rope_out.stride[1];
  for (int i = 0; i < 3; ++i) {
    f.k_stride[i] = a.k_cache_rope.stride[i];
    f.v_stride[i] = a.v_cache.present() ? a.v_cache.stride[i] : 0;
  }
  f.rotary = int(s.rotary);
  f.page_shift = 0;
  while ((std::int64_t(1) << f.page_shift) < s.page_size) ++f.page_shift;
  f.hq = int(s.hq);
  f.hk = int(s.hk);
  f.v_rows = a.v_cache.present() ? int(s.hk) : 0;
  return f;
}

// A unit's codes by the op's arithmetic (the library's element math, the lean
// body's form), stored into the floors' contiguous output: its first half at
// unit t * units + u, its second nnz * units units further (where `write`).
__device__ __forceinline__ void store_floor_codes(const ropekv::detail::ScaleDivisor& div,
                                                  bool rotary, const uint4& a, const uint4& b,
                                                  const float (&cv)[8], const float (&sv)[8],
                                                  uint2* out, std::int64_t nnz, int units,
                                                  std::int64_t t, int u, bool write = true) {
  uint2 lo, hi;
  ropekv::detail::gpu::encode_unit<ropekv::DType::kBFloat16, ropekv::DType::kFloat8E4M3FN, 0>(
      ropekv::RopeStyle::kNeox, rotary, div, a, b, cv, sv, lo, hi);
  const std::int64_t i = t * units + u;
  if (write) {
    __stcs(out + i, lo);
    __stcs(out + nnz * units + i, hi);
  }
}

// The math floor: the move floor with the op's arithmetic. A thread takes
// unit u of token t's rows (the data floor's units); a rotary unit loads its
// cos/sin values of row 0 before the PDL wait (as the early-index path may);
// after it the unit's two input vectors (half a row apart within the token's
// units, as the op's loads), rotation, scale step and conversion by the
// library's element math (the lean body's form), and two 8-byte stores into a
// contiguous output. No index, no page look-up: what the arithmetic adds to
// moving the bytes. With PDL it lets the next launch in as the decode kernel
// does: without early indices a token's units at their start in the first
// kLateTriggerToken tokens, once past the wait in the others; with them
// (kEarly: the -pdl-early rows) every unit at its start; so that its PDL rows
// bound the fused kernel's. Two grids: block (x, t), thread i takes u = x *
// blockDim.x + i (math_floor_kernel), or thread x of a 1D grid takes unit x
// of the tokens' units back to back, no idle lanes (math_floor_flat_kernel).
template <bool kEarly>
__device__ __forceinline__ void math_floor_unit(const float* cos_sin, const DataFloorParams& d,
                                                int rotary, const ropekv::detail::ScaleDivisor& div,
                                                uint2* out, std::int64_t nnz, int u,
                                                std::int64_t t) {
  namespace gpu = ropekv::detail::gpu;
  const FloorUnit r = floor_unit(d, u);
  float cv[8] = {}, sv[8] = {};
  if (r.rotary)
    gpu::load_unit_cos<ropekv::DType::kFloat32>(ropekv::RopeStyle::kNeox, unsigned(rotary / 2),
                                                reinterpret_cast<const char*>(cos_sin),
                                                unsigned(r.sub), cv, sv);
  // The cos/sin values read before the wait, as the fused kernel's early path
  // reads them: in straight-line code the assembler moved these read-only loads
  // past it. Behind a branch (nnz > 0 always) they stay before it in the -pdl
  // kernels; the early-trigger kernels still moved them, so there the branch
  // tests the values (cos and sin lie in [-1, 1]: always taken), which holds
  // the wait until they are in.
  const bool wait = kEarly ? cv[0] + cv[4] + sv[0] + sv[4] < 8.0f : nnz > 0;
  if (wait) gpu::dependency_wait();
  if (!floor_triggers_at_start<kEarly>(t)) gpu::dependents_launch();
  const uint4* x = d.in + t * d.in_units * 2;
  const uint4 a = __ldg(x + u), b = __ldg(x + d.in_units + u);
  store_floor_codes(div, r.rotary, a, b, cv, sv, out, nnz, d.units, t, u);
}
template <bool kEarly>
__global__ void math_floor_kernel(const float* cos_sin, const DataFloorParams d, int rotary,
                                  const ropekv::detail::ScaleDivisor div, uint2* out,
                                  std::int64_t nnz) {
  if (floor_triggers_at_start<kEarly>(blockIdx.y)) ropekv::detail::gpu::dependents_launch();
  const int u = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (u >= d.units) return;
  math_floor_unit<kEarly>(cos_sin, d, rotary, div, out, nnz, u, blockIdx.y);
}
template <bool kEarly>
__global__ void math_floor_flat_kernel(const float* cos_sin, const DataFloorParams d, int rotary,
                                       const ropekv::detail::ScaleDivisor div, uint2* out,
                                       std::int64_t nnz, const ropekv::detail::gpu::FlatDivisor q) {
  const std::uint32_t x = blockIdx.x * blockDim.x + threadIdx.x;
  const std::uint32_t t = ROPEKV_FLAT_QUOTIENT(x, q);
  if (t >= nnz) return;
  if (floor_triggers_at_start<kEarly>(t)) ropekv::detail::gpu::dependents_launch();
  math_floor_unit<kEarly>(cos_sin, d, rotary, div, out, nnz, int(x - t * std::uint32_t(d.units)),
                          t);
}

// The chain floor: the math floor behind the floor's index chain. Block (x, t),
// thread i takes unit u = x * blockDim.x + i of token t (math_floor_kernel's
// grid): its two input vectors (cached, as the math floor's: they do not
// depend on the index) with the token's index entries (floor_token: slot and
// position, or batch index and position), then its cos/sin at the position;
// the op's arithmetic and, not padding, two 8-byte stores into a contiguous
// output. What every version of the op does for its query units (no page
// look-up, no cache address): a decode row slower than a mark where this row
// already is, is beyond the device by measurement.
__global__ void chain_floor_kernel(const FloorParams f, const DataFloorParams d,
                                   const ropekv::detail::ScaleDivisor div, uint2* out,
                                   std::int64_t nnz) {
  namespace gpu = ropekv::detail::gpu;
  const int u = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (u >= d.units) return;
  const std::int64_t t = blockIdx.y;
  const uint4* x = d.in + t * d.in_units * 2;
  const uint4 a = __ldg(x + u), b = __ldg(x + d.in_units + u);
  std::int64_t key, pos;
  floor_token(f, t, &key, &pos);
  // No branch on padding before the stores: behind one the compiler sinks the
  // input loads past the index round trip (the op keeps them before it).
  const bool write = key >= 0;
  if (!write) pos = 0;
  const FloorUnit r = floor_unit(d, u);
  float cv[8] = {}, sv[8] = {};
  if (r.rotary)
    gpu::load_unit_cos<ropekv::DType::kFloat32>(
        ropekv::RopeStyle::kNeox, unsigned(f.rotary / 2),
        reinterpret_cast<const char*>(f.cos_sin + pos * f.rotary), unsigned(r.sub), cv, sv);
  store_floor_codes(div, r.rotary, a, b, cv, sv, out, nnz, d.units, t, u, write);
}

// The op floor: the op's whole work in the plainest form a kernel can take,
// the flat math floor with the op's own index chain and destinations. Thread
// x takes unit u of token t (as math_floor_flat_kernel); it loads the unit's
// two input vectors at once (evict-first, as the library's kernels; a padding
// token's rows may be read) beside the token's index entries, then, not
// padding, its cos/sin at the position; the op's arithmetic; 16 bytes into
// q_out or the cache row (floor_row: for page tables kv_indptr[b] and the
// page entry first), its two 8-byte halves half a row apart as the op stores
// a unit. With U > 1 a thread takes U units a block's width apart, all their
// input loads and then all their index loads issued before the first unit's
// arithmetic: U times the bytes in flight a thread.
template <int U>
__global__ void op_floor_kernel(const FloorParams f, const DataFloorParams d,
                                const ropekv::detail::ScaleDivisor div, std::int64_t nnz,
                                const ropekv::detail::gpu::FlatDivisor q) {
  namespace gpu = ropekv::detail::gpu;
  const std::uint32_t x0 = blockIdx.x * blockDim.x * U + threadIdx.x;
  std::uint32_t t[U];
  uint4 a[U], b[U];
#pragma unroll
  for (int j = 0; j < U; ++j) {
    const std::uint32_t x = x0 + j * blockDim.x;
    t[j] = ROPEKV_FLAT_QUOTIENT(x, q);
    if (t[j] < nnz) {
      const uint4* in = d.in + std::int64_t(t[j]) * d.in_units * 2;
      const int u = int(x - t[j] * std::uint32_t(d.units));
      a[j] = gpu::load_input(in + u);
      b[j] = gpu::load_input(in + d.in_units + u);
    }
  }
  std::int64_t key[U], pos[U];
#pragma unroll
  for (int j = 0; j < U; ++j)
    if (t[j] < nnz) floor_token(f, t[j], &key[j], &pos[j]);
#pragma unroll
  for (int j = 0; j < U; ++j) {
    if (t[j] >= nnz || key[j] < 0) continue;
    const int u = int(x0 + j * blockDim.x - t[j] * std::uint32_t(d.units));
    const FloorUnit r = floor_unit(d, u);
    float cv[8] = {}, sv[8] = {};
    if (r.rotary)
      gpu::load_unit_cos<ropekv::DType::kFloat32>(
          ropekv::RopeStyle::kNeox, unsigned(f.rotary / 2),
          reinterpret_cast<const char*>(f.cos_sin + pos[j] * f.rotary), unsigned(r.sub), cv, sv);
    uint2 lo, hi;
    gpu::encode_unit<ropekv::DType::kBFloat16, ropekv::DType::kFloat8E4M3FN, 0>(
        ropekv::RopeStyle::kNeox, r.rotary, div, a[j], b[j], cv, sv, lo, hi);
    const int part = u < d.q_units ? 0 : (r.v_row ? 2 : 1);
    std::uint8_t* dst =
        floor_row(f, d.k_row, t[j], key[j], pos[j], part, part == 1 ? r.row - f.hq : r.row);
    uint2* out = reinterpret_cast<uint2*>(dst) + r.sub;
    __stcs(out, lo);
    __stcs(out + d.head_units, hi);
  }
}

ropekv::Result launch_result(const char* what) { return error_result(what, cudaGetLastError()); }

// The data floor's unit geometry of (a, s).
DataFloorParams data_floor_params(const ropekv::Arguments& a, const Shape& s, const Sizes& z,
                                  const FloorParams& f) {
  DataFloorParams d = {};
  d.in = static_cast<const uint4*>(a.q_rope.data);
  d.in_units = z.in_row / 16;
  d.k_row = f.k_cache;
  if (a.k_cache_nope.present())
    d.k_row = std::min(d.k_row, static_cast<std::uint8_t*>(a.k_cache_nope.data));
  d.head_units = int(s.head_dim() / 16);
  d.rot_units = int(s.rotary / 16);
  d.q_units = int(s.hq) * d.head_units;
  d.kv_units = int(s.hk) * d.head_units;
  d.units = d.q_units + d.kv_units + f.v_rows * int(s.v_dim / 16);
  d.head_div = ropekv::detail::gpu::flat_divisor(std::uint32_t(d.head_units));
  return d;
}

}  // namespace

ropekv::Result launch_data_floor(const ropekv::Arguments& a, const Shape& s, const Sizes& z,
                                 cudaStream_t stream) {
  const FloorParams f = floor_params(a, s);
  const DataFloorParams d = data_floor_params(a, s, z, f);
  const unsigned block = unsigned(std::min(128, (d.units + 31) / 32 * 32));
  const dim3 grid((unsigned(d.units) + block - 1) / block, unsigned(a.q_rope.extent[0]));
  data_floor_kernel<<<grid, block, 0, stream>>>(f, d);
  return launch_result("data floor kernel");
}

ropekv::Result launch_floor(const ropekv::Arguments& a, const Shape& s, cudaStream_t stream) {
  const FloorParams f = floor_params(a, s);
  const int rows = f.hq + f.hk + f.v_rows;
  floor_kernel<<<unsigned(a.q_rope.extent[0]), unsigned((rows + 31) / 32 * 32), 0, stream>>>(f);
  return launch_result("floor kernel");
}

ropekv::Result launch_math_floor(const ropekv::Arguments& a, DeviceProblem& dp, int set,
                                 const GpuCase& c, cudaStream_t stream) {
  const Shape& s = *dp.shape;
  const FloorParams f = floor_params(a, s);
  const DataFloorParams d = data_floor_params(a, s, dp.sizes, f);
  const float* cos_sin = f.cos_sin;
  int rotary = int(s.rotary);
  const ropekv::detail::ScaleDivisor div =
      ropekv::detail::make_divisor(s.q_scale, ropekv::ScaleConvention::kDivide);
  uint2* out = reinterpret_cast<uint2*>(static_cast<char*>(dp.copy_dst.ptr) +
                                        dp.copy_bytes * std::size_t(set));
  std::int64_t nnz = a.q_rope.extent[0];
  const unsigned block = unsigned(c.block > 0 ? c.block : 128);
  // The flat kernels' divisor (the math floor's seventh parameter).
  ropekv::detail::gpu::FlatDivisor q = ropekv::detail::gpu::flat_divisor(std::uint32_t(d.units));
  // The flat grid: one thread a unit, its index (and the quotient's bound) under 2^31.
  const std::uint64_t flat_units = std::uint64_t(nnz) * std::uint64_t(d.units);
  if (c.flat && !ropekv::detail::gpu::flat_grid_fits(flat_units, block))
    return error_result(c.op ? "op floor kernel (more than 2^31 units)"
                             : "math floor kernel (flat grid: more than 2^31 units)",
                        cudaErrorInvalidConfiguration);
  if (c.chain) {
    if (nnz > 65535)  // (a block row a token: gridDim.y)
      return error_result("chain floor kernel (more than 65535 tokens)",
                          cudaErrorInvalidConfiguration);
    const dim3 grid((unsigned(d.units) + block - 1) / block, unsigned(nnz));
    chain_floor_kernel<<<grid, block, 0, stream>>>(f, d, div, out, nnz);
    return launch_result("chain floor kernel");
  }
  if (c.op) {  // (a flat case)
    const unsigned blocks = unsigned((flat_units + block * c.units - 1) / (block * c.units));
    if (c.units == 4)
      op_floor_kernel<4><<<blocks, block, 0, stream>>>(f, d, div, nnz, q);
    else if (c.units == 2)
      op_floor_kernel<2><<<blocks, block, 0, stream>>>(f, d, div, nnz, q);
    else
      op_floor_kernel<1><<<blocks, block, 0, stream>>>(f, d, div, nnz, q);
    return launch_result("op floor kernel");
  }
  void* args[] = {&cos_sin, const_cast<DataFloorParams*>(&d),
                  &rotary,  const_cast<ropekv::detail::ScaleDivisor*>(&div),
                  &out,     &nnz,
                  &q};
  const bool early = c.pdl && c.early;  // (the -pdl-early rows: every unit lets the next in)
  const void* kernel = c.flat
                           ? (early ? reinterpret_cast<const void*>(&math_floor_flat_kernel<true>)
                                    : reinterpret_cast<const void*>(&math_floor_flat_kernel<false>))
                           : (early ? reinterpret_cast<const void*>(&math_floor_kernel<true>)
                                    : reinterpret_cast<const void*>(&math_floor_kernel<false>));
  const dim3 grid = c.flat ? dim3(unsigned((flat_units + block - 1) / block))
                           : dim3((unsigned(d.units) + block - 1) / block, unsigned(nnz));
  const cudaError_t e =
      ropekv::detail::gpu::launch(kernel, grid, dim3(block), 0, stream, c.pdl, args);
  const cudaError_t last = cudaGetLastError();  // (cleared either way)
  return error_result("math floor kernel", e != cudaSuccess ? e : last);
}

ropekv::Result launch_move(DeviceProblem& dp, int set, const GpuCase& c, cudaStream_t stream) {
  const Shape& s = *dp.shape;
  const uint4* in = static_cast<const uint4*>(dp.bufs[std::size_t(set)].in);
  uint4* out = reinterpret_cast<uint4*>(static_cast<char*>(dp.copy_dst.ptr) +
                                        dp.copy_bytes * std::size_t(set));
  std::int64_t units = dp.sizes.in_elems / 16;
  MoveMath m = {};
  m.units = std::uint32_t(dp.sizes.in_row / 16);
  m.token = ropekv::detail::gpu::flat_divisor(m.units);
  m.rot_units = std::uint32_t((s.hq + s.hk) * (s.rotary / 16));
  m.inv = 1.0f / s.q_scale;
  m.c = 0.8f * m.inv;
  m.s = 0.6f * m.inv;
  constexpr unsigned kBlock = 128;
  void* args[] = {&in, &out, &units, &m};
  const void* kernel =
      c.arith ? (c.pdl && c.early ? reinterpret_cast<const void*>(&move_kernel<true, true>)
                                  : reinterpret_cast<const void*>(&move_kernel<true, false>))
              : reinterpret_cast<const void*>(&move_kernel<false, false>);
  const cudaError_t e = ropekv::detail::gpu::launch(
      kernel, dim3(unsigned((units + kBlock - 1) / kBlock)), dim3(kBlock), 0, stream, c.pdl, args);
  const cudaError_t last = cudaGetLastError();  // (cleared either way)
  return error_result("move kernel", e != cudaSuccess ? e : last);
}

}  // namespace ropekv_perf
