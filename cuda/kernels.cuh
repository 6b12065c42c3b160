// The fused device kernels, one source for CUDA and HIP.
//
// vector path (fused_vec_kernel): the hand-tuned path for aligned shapes
//   (R, N, Dv multiples of 16; 16-byte aligned input rows; 8-byte aligned FP8
//   output rows; fp32 or input-dtype cos/sin). One work item = 16 elements of
//   one head row: a NeoX item holds both members of its 8 rotation pairs
//   (x[8j..8j+8) and x[R/2+8j..R/2+8j+8)), an interleaved item 8 adjacent
//   pairs, a copy item 16 pass-through elements. Each thread issues two
//   16-byte loads, rotates in registers and writes FP8 with streaming stores.
//   Consecutive threads take consecutive items of one row, so every warp
//   access is coalesced. Canonical shapes are template specialisations
//   (kR/kN/kDv > 0); 0 means "read at run time".
// generic path (fused_generic_kernel): any valid shape, alignment and dtype
//   combination. One block per token (grid-stride); groups of kGroup threads
//   take whole head rows, lanes stride over pairs / elements.
//
// Both read a token's slot (or batch index) first and nothing else of a
// padding token; every element goes through the shared element math.
#pragma once

#include <cstdint>

#include "cuda/gpu_runtime.hpp"
#include "detail/element_math.hpp"
#include "detail/params.hpp"

namespace ropekv {
namespace detail {
namespace gpu {

constexpr int kItem = 16;         // elements per vector-path work item
constexpr int kVecBlock = 256;    // threads per block, vector path
constexpr int kGenericBlock = 256;
constexpr int kGroup = 32;        // logical row group of the generic path (any warp width)


// Per-launch geometry of the vector path, computed once on the host. A
// thread item is kV sub-items of 16 elements of one row part (see vec_issue).
struct VecGeometry {
  std::uint32_t rope_items;   // thread items per row, rotary part: R / (16 kV)
  std::uint32_t nope_items;   // N / (16 kV)
  std::uint32_t v_items;      // Dv / (16 kV)
  std::uint32_t q_items;      // Hq * (rope + nope)
  std::uint32_t k_items;      // Hk * (rope + nope)
  std::uint32_t items_per_token;
  std::uint64_t total_items;  // nnz * items_per_token
};

__device__ __forceinline__ ScaleDivisor token_scale(const float* ptr, float value) {
  return make_divisor(ptr != nullptr ? *ptr : value);
}

// Element e (0..7) of eight packed 16-bit values.
__device__ __forceinline__ std::uint16_t half_lane(const uint4& v, int e) {
  const std::uint32_t w = e < 2 ? v.x : (e < 4 ? v.y : (e < 6 ? v.z : v.w));
  return std::uint16_t((e & 1) ? (w >> 16) : (w & 0xffffu));
}

template <DType In>
__device__ __forceinline__ void decode8(const uint4& v, float (&out)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) out[e] = Format<In>::decode(half_lane(v, e));
}

// Eight cos (or sin) values starting at `row + first` elements.
template <DType Cos>
__device__ __forceinline__ void load_cos8(const char* row, std::int64_t first, float (&out)[8]) {
  if constexpr (Cos == DType::kFloat32) {
    const float4* p = reinterpret_cast<const float4*>(row + first * 4);
    const float4 a = load_readonly(p), b = load_readonly(p + 1);
    out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
    out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
  } else {
    decode8<Cos>(load_readonly(reinterpret_cast<const uint4*>(row + first * 2)), out);
  }
}

// Eight values -> eight FP8 codes (value / scale, then the format's encoder).
template <DType Out>
__device__ __forceinline__ uint2 encode8(const float (&v)[8], ScaleDivisor scale) {
  std::uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float a = apply_scale(v[2 * i], scale), b = apply_scale(v[2 * i + 1], scale);
    std::uint32_t pair;
    if (!hw_encode_fp8x2<Out>(a, b, &pair))
      pair = std::uint32_t(Format<Out>::encode(a)) | (std::uint32_t(Format<Out>::encode(b)) << 8);
    w[i] = pair;
  }
  return make_uint2(w[0] | (w[1] << 16), w[2] | (w[3] << 16));
}

// Compile-time shape of a specialisation (kR > 0), or the launch's own.
template <int kR, int kN, int kDv, int kV>
struct ShapeOf {
  static constexpr int kSpan = kItem * kV;  // elements per thread item
  __device__ __forceinline__ static std::int64_t rotary(const LaunchParams& p) {
    return kR > 0 ? kR : p.rotary_dim;
  }
  __device__ __forceinline__ static std::uint32_t rope_items(const VecGeometry& g) {
    return kR > 0 ? std::uint32_t(kR / kSpan) : g.rope_items;
  }
  __device__ __forceinline__ static std::uint32_t row_items(const VecGeometry& g) {
    return kR > 0 ? std::uint32_t((kR + kN) / kSpan) : g.rope_items + g.nope_items;
  }
  __device__ __forceinline__ static std::uint32_t v_items(const VecGeometry& g) {
    return kR > 0 ? std::uint32_t(kDv / kSpan) : g.v_items;
  }
};

// One thread item once its token is planned: where it reads and writes,
// and its input vectors. Sub-item s of thread item j of a part with n thread
// items is 16-element item j + s*n of that part, so each load and store
// instruction of a warp covers consecutive 16-byte vectors.
template <int kV>
struct VecItem {
  const char* cs;      // cos/sin row (rotary items)
  char* dst;           // output row part
  std::uint32_t j, n;  // thread item within its part, thread items in the part
  std::uint32_t kind;  // 0: NeoX rotary, 1: interleaved rotary, 2: copy
  ScaleDivisor scale;
  uint4 a[kV], b[kV];
};

// Resolves item c of planned token t and issues its input loads.
template <DType In, int kR, int kN, int kDv, int kV>
__device__ __forceinline__ void vec_issue(const LaunchParams& p, const VecGeometry& g,
                                          std::int64_t t, std::uint32_t c, const TokenPlan& plan,
                                          VecItem<kV>& it) {
  using S = ShapeOf<kR, kN, kDv, kV>;
  const HeadTensor* src;
  std::uint32_t h;
  bool rope = false;
  if (c < g.q_items + g.k_items) {
    const bool is_q = c < g.q_items;
    const std::uint32_t cc = is_q ? c : c - g.q_items;
    const std::uint32_t row_items = S::row_items(g), rope_items = S::rope_items(g);
    h = cc / row_items;
    it.j = cc - h * row_items;
    rope = it.j < rope_items;
    it.n = rope ? rope_items : row_items - rope_items;
    if (!rope) it.j -= rope_items;
    if (is_q) {
      src = rope ? &p.q_rope : &p.q_nope;
      const HeadTensor& o = rope ? p.q_rope_out : p.q_nope_out;
      it.dst = o.data + t * o.token_stride + std::int64_t(h) * o.head_stride;
      it.scale = token_scale(p.q_scale_ptr, p.q_scale);
    } else {
      src = rope ? &p.k_rope : &p.k_nope;
      const CacheTensor& o = rope ? p.k_cache_rope : p.k_cache_nope;
      it.dst = o.data + cache_offset(plan.page, plan.entry, h, o.stride);
      it.scale = token_scale(p.k_scale_ptr, p.k_scale);
    }
  } else {
    const std::uint32_t cc = c - g.q_items - g.k_items;
    it.n = S::v_items(g);
    h = cc / it.n;
    it.j = cc - h * it.n;
    src = &p.v;
    it.dst = p.v_cache.data + cache_offset(plan.page, plan.entry, h, p.v_cache.stride);
    it.scale = token_scale(p.v_scale_ptr, p.v_scale);
  }
  const uint4* x = reinterpret_cast<const uint4*>(
      src->data + (t * src->token_stride + std::int64_t(h) * src->head_stride) * 2);
  it.kind = !rope ? 2u : (p.style == RopeStyle::kNeox ? 0u : 1u);
#pragma unroll
  for (int s = 0; s < kV; ++s) {
    const std::uint32_t jj = it.j + std::uint32_t(s) * it.n;  // 16-element item
    if (it.kind == 0u) {  // x[8jj..8jj+8) and its partners x[R/2 + 8jj..)
      it.a[s] = load_readonly(x + jj);
      it.b[s] = load_readonly(x + S::rotary(p) / 16 + jj);
    } else {  // x[16jj..16jj+16)
      it.a[s] = load_readonly(x + 2 * jj);
      it.b[s] = load_readonly(x + 2 * jj + 1);
    }
  }
  it.cs = p.cos_sin + plan.pos * p.cos_row_stride * p.cos_size;
}

// Rotates (if rotary), quantizes and stores one issued thread item.
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, int kV>
__device__ __forceinline__ void vec_finish(const LaunchParams& p, const VecItem<kV>& it) {
  using S = ShapeOf<kR, kN, kDv, kV>;
  uint2* dst = reinterpret_cast<uint2*>(it.dst);
  const std::int64_t half = S::rotary(p) / 2;
#pragma unroll
  for (int s = 0; s < kV; ++s) {
    const std::uint32_t jj = it.j + std::uint32_t(s) * it.n;
    float a[8], b[8];
    decode8<In>(it.a[s], a);
    decode8<In>(it.b[s], b);
    if (it.kind == 2u) {
      store_streaming(dst + 2 * jj, encode8<Out>(a, it.scale));
      store_streaming(dst + 2 * jj + 1, encode8<Out>(b, it.scale));
      continue;
    }
    float cv[8], sv[8];
    load_cos8<Cos>(it.cs, 8 * std::int64_t(jj), cv);
    load_cos8<Cos>(it.cs, half + 8 * std::int64_t(jj), sv);
    float ya[8], yb[8];
    if (it.kind == 0u) {  // NeoX: a = x[8jj..8jj+8), b = their partners
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const RotatedPair r = rotate_pair(a[e], b[e], cv[e], sv[e]);
        ya[e] = r.y;
        yb[e] = r.yp;
      }
      store_streaming(dst + jj, encode8<Out>(ya, it.scale));
      store_streaming(reinterpret_cast<uint2*>(it.dst + half) + jj, encode8<Out>(yb, it.scale));
    } else {  // interleaved: a, b = the 8 adjacent pairs of x[16jj..16jj+16)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const RotatedPair r0 = rotate_pair(a[2 * e], a[2 * e + 1], cv[e], sv[e]);
        const RotatedPair r1 = rotate_pair(b[2 * e], b[2 * e + 1], cv[4 + e], sv[4 + e]);
        ya[2 * e] = r0.y;
        ya[2 * e + 1] = r0.yp;
        yb[2 * e] = r1.y;
        yb[2 * e + 1] = r1.yp;
      }
      store_streaming(dst + 2 * jj, encode8<Out>(ya, it.scale));
      store_streaming(dst + 2 * jj + 1, encode8<Out>(yb, it.scale));
    }
  }
}

// One thread item per thread (grid-stride). The token's index entries are
// read first; its input vectors are loaded only once it is known not to be
// padding, then rotated, quantized and stored.
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv, int kV>
__global__ void __launch_bounds__(kVecBlock)
    fused_vec_kernel(const LaunchParams p, const VecGeometry g) {
  dependency_wait();
  dependents_launch();
  const std::uint64_t stride = std::uint64_t(gridDim.x) * blockDim.x;
  for (std::uint64_t i = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < g.total_items;
       i += stride) {
    std::int64_t t;
    std::uint32_t c;
    if (g.total_items <= 0xffffffffull) {
      const std::uint32_t tt = std::uint32_t(i) / g.items_per_token;
      t = tt;
      c = std::uint32_t(i) - tt * g.items_per_token;
    } else {
      const std::uint64_t tt = i / g.items_per_token;
      t = std::int64_t(tt);
      c = std::uint32_t(i - tt * g.items_per_token);
    }
    const TokenPlan plan = plan_token(p, t);
    if (!plan.write) {
      if (plan.bad && c == 0 && p.skipped_tokens != nullptr) atomicAdd(p.skipped_tokens, 1ull);
      continue;
    }
    VecItem<kV> it;
    vec_issue<In, kR, kN, kDv, kV>(p, g, t, c, plan, it);
    vec_finish<In, Out, Cos, kR, kN, kDv, kV>(p, it);
  }
}

// ---------------------------------------------------------------- generic path
__device__ __forceinline__ float load_f32(const char* base, DType d, std::int64_t i) {
  switch (d) {
    case DType::kBFloat16:
      return Format<DType::kBFloat16>::decode(reinterpret_cast<const std::uint16_t*>(base)[i]);
    case DType::kFloat16:
      return Format<DType::kFloat16>::decode(reinterpret_cast<const std::uint16_t*>(base)[i]);
    default:
      return reinterpret_cast<const float*>(base)[i];
  }
}

__device__ __forceinline__ void store_out(char* base, DType d, std::int64_t i, float v,
                                          ScaleDivisor scale) {
  switch (d) {
    case DType::kFloat8E4M3FN:
      reinterpret_cast<std::uint8_t*>(base)[i] = store_value<DType::kFloat8E4M3FN>(v, scale);
      break;
    case DType::kFloat8E5M2:
      reinterpret_cast<std::uint8_t*>(base)[i] = store_value<DType::kFloat8E5M2>(v, scale);
      break;
    case DType::kFloat8E4M3FNUZ:
      reinterpret_cast<std::uint8_t*>(base)[i] = store_value<DType::kFloat8E4M3FNUZ>(v, scale);
      break;
    case DType::kBFloat16:
      reinterpret_cast<std::uint16_t*>(base)[i] = store_value<DType::kBFloat16>(v, scale);
      break;
    case DType::kFloat16:
      reinterpret_cast<std::uint16_t*>(base)[i] = store_value<DType::kFloat16>(v, scale);
      break;
    default:
      reinterpret_cast<float*>(base)[i] = store_value<DType::kFloat32>(v, scale);
      break;
  }
}

// One head row: rotary part (if `rope_dst`), then `copy_n` pass-through elements.
__device__ __forceinline__ void generic_row(const LaunchParams& p, const char* rope_src,
                                            char* rope_dst, const char* copy_src, char* copy_dst,
                                            std::int64_t copy_n, DType out, const char* cs,
                                            ScaleDivisor scale, int lane) {
  const DType in = p.in_dtype;
  if (rope_dst != nullptr) {
    const std::int64_t half = p.rotary_dim / 2;
    for (std::int64_t q = lane; q < half; q += kGroup) {
      const PairIndex ix = pair_index(p.style, q, half);
      const RotatedPair r =
          rotate_pair(load_f32(rope_src, in, ix.first), load_f32(rope_src, in, ix.second),
                      load_f32(cs, p.cos_dtype, q), load_f32(cs, p.cos_dtype, half + q));
      store_out(rope_dst, out, ix.first, r.y, scale);
      store_out(rope_dst, out, ix.second, r.yp, scale);
    }
  }
  for (std::int64_t e = lane; e < copy_n; e += kGroup)
    store_out(copy_dst, out, e, load_f32(copy_src, in, e), scale);
}

__global__ void __launch_bounds__(kGenericBlock) fused_generic_kernel(const LaunchParams p) {
  dependency_wait();
  dependents_launch();
  const int lane = int(threadIdx.x) % kGroup;
  const int group = int(threadIdx.x) / kGroup;
  const int groups = int(blockDim.x) / kGroup;
  const std::int64_t in_es = p.in_size, qo_es = p.q_out_size, c_es = p.cache_size;
  const std::int64_t rows = p.num_q_heads + p.num_kv_heads * (p.v_dim > 0 ? 2 : 1);
  for (std::int64_t t = blockIdx.x; t < p.nnz; t += gridDim.x) {
    const TokenPlan plan = plan_token(p, t);
    if (!plan.write) {
      if (plan.bad && threadIdx.x == 0 && p.skipped_tokens != nullptr)
        atomicAdd(p.skipped_tokens, 1ull);
      continue;
    }
    const char* cs = p.cos_sin + plan.pos * p.cos_row_stride * p.cos_size;
    for (std::int64_t r = group; r < rows; r += groups) {
      if (r < p.num_q_heads) {
        const std::int64_t h = r;
        generic_row(p, p.q_rope.data + (t * p.q_rope.token_stride + h * p.q_rope.head_stride) * in_es,
                    p.q_rope_out.data +
                        (t * p.q_rope_out.token_stride + h * p.q_rope_out.head_stride) * qo_es,
                    p.q_nope.data + (t * p.q_nope.token_stride + h * p.q_nope.head_stride) * in_es,
                    p.q_nope_out.data +
                        (t * p.q_nope_out.token_stride + h * p.q_nope_out.head_stride) * qo_es,
                    p.nope_dim, p.q_out_dtype, cs, token_scale(p.q_scale_ptr, p.q_scale), lane);
      } else if (r < p.num_q_heads + p.num_kv_heads) {
        const std::int64_t h = r - p.num_q_heads;
        generic_row(p, p.k_rope.data + (t * p.k_rope.token_stride + h * p.k_rope.head_stride) * in_es,
                    p.k_cache_rope.data +
                        cache_offset(plan.page, plan.entry, h, p.k_cache_rope.stride) * c_es,
                    p.k_nope.data + (t * p.k_nope.token_stride + h * p.k_nope.head_stride) * in_es,
                    p.k_cache_nope.data +
                        cache_offset(plan.page, plan.entry, h, p.k_cache_nope.stride) * c_es,
                    p.nope_dim, p.cache_dtype, cs, token_scale(p.k_scale_ptr, p.k_scale), lane);
      } else {
        const std::int64_t h = r - p.num_q_heads - p.num_kv_heads;
        generic_row(p, nullptr, nullptr,
                    p.v.data + (t * p.v.token_stride + h * p.v.head_stride) * in_es,
                    p.v_cache.data + cache_offset(plan.page, plan.entry, h, p.v_cache.stride) * c_es,
                    p.v_dim, p.cache_dtype, cs, token_scale(p.v_scale_ptr, p.v_scale), lane);
      }
    }
  }
}

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
