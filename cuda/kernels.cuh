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

// Per-launch geometry of the vector path, computed once on the host.
struct VecGeometry {
  std::uint32_t rope_items;   // R / 16 per row
  std::uint32_t nope_items;   // N / 16 per row
  std::uint32_t v_items;      // Dv / 16 per row
  std::uint32_t q_items;      // Hq * (rope + nope)
  std::uint32_t k_items;      // Hk * (rope + nope)
  std::uint32_t items_per_token;
  std::uint64_t total_items;  // nnz * items_per_token
};

__device__ __forceinline__ float token_scale(const float* ptr, float value) {
  return ptr != nullptr ? *ptr : value;
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

// Eight cos (or sin) values starting at `row + first`.
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
__device__ __forceinline__ uint2 encode8(const float (&v)[8], float scale) {
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

template <int kR, int kN, int kDv>
struct ShapeOf {
  __device__ __forceinline__ static std::int64_t rotary(const LaunchParams& p) {
    return kR > 0 ? kR : p.rotary_dim;
  }
  __device__ __forceinline__ static std::uint32_t rope_items(const VecGeometry& g) {
    return kR > 0 ? std::uint32_t(kR / kItem) : g.rope_items;
  }
  __device__ __forceinline__ static std::uint32_t row_items(const VecGeometry& g) {
    return kR > 0 ? std::uint32_t((kR + kN) / kItem) : g.rope_items + g.nope_items;
  }
  __device__ __forceinline__ static std::uint32_t v_items(const VecGeometry& g) {
    return kR > 0 ? std::uint32_t(kDv / kItem) : g.v_items;
  }
};

// One vector-path work item of token t.
template <DType In, DType Out, DType Cos, int kR, int kN, int kDv>
__device__ __forceinline__ void vec_item(const LaunchParams& p, const VecGeometry& g,
                                         std::int64_t t, std::uint32_t c) {
  using S = ShapeOf<kR, kN, kDv>;
  const TokenPlan plan = plan_token(p, t);
  if (!plan.write) {
    if (plan.bad && c == 0 && p.skipped_tokens != nullptr) atomicAdd(p.skipped_tokens, 1ull);
    return;
  }
  // Which row, which part, which item of it.
  const std::uint32_t row_items = S::row_items(g);
  const std::uint32_t rope_items = S::rope_items(g);
  const HeadTensor* src;
  char* dst;
  std::uint32_t j;
  float scale;
  bool rope;
  if (c < g.q_items + g.k_items) {
    const bool is_q = c < g.q_items;
    const std::uint32_t cc = is_q ? c : c - g.q_items;
    const std::uint32_t h = cc / row_items;
    j = cc - h * row_items;
    rope = j < rope_items;
    if (!rope) j -= rope_items;
    if (is_q) {
      src = rope ? &p.q_rope : &p.q_nope;
      const HeadTensor& o = rope ? p.q_rope_out : p.q_nope_out;
      dst = o.data + t * o.token_stride + std::int64_t(h) * o.head_stride;
      scale = token_scale(p.q_scale_ptr, p.q_scale);
    } else {
      src = rope ? &p.k_rope : &p.k_nope;
      const CacheTensor& o = rope ? p.k_cache_rope : p.k_cache_nope;
      dst = o.data + cache_offset(plan.page, plan.entry, h, o.stride);
      scale = token_scale(p.k_scale_ptr, p.k_scale);
    }
    const std::int64_t off = t * src->token_stride + std::int64_t(h) * src->head_stride;
    const char* x = src->data + off * 2;
    if (rope) {
      const std::int64_t half = S::rotary(p) / 2;
      const char* cs = p.cos_sin + plan.pos * p.cos_row_stride * p.cos_size;
      float a[8], b[8], cv[8], sv[8];
      if (p.style == RopeStyle::kNeox) {
        const uint4 ra = load_readonly(reinterpret_cast<const uint4*>(x) + j);
        const uint4 rb = load_readonly(reinterpret_cast<const uint4*>(x + half * 2) + j);
        load_cos8<Cos>(cs, 8 * std::int64_t(j), cv);
        load_cos8<Cos>(cs, half + 8 * std::int64_t(j), sv);
        decode8<In>(ra, a);
        decode8<In>(rb, b);
        float ya[8], yb[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const RotatedPair r = rotate_pair(a[e], b[e], cv[e], sv[e]);
          ya[e] = r.y;
          yb[e] = r.yp;
        }
        store_streaming(reinterpret_cast<uint2*>(dst) + j, encode8<Out>(ya, scale));
        store_streaming(reinterpret_cast<uint2*>(dst + half) + j, encode8<Out>(yb, scale));
      } else {
        const uint4 ra = load_readonly(reinterpret_cast<const uint4*>(x) + 2 * j);
        const uint4 rb = load_readonly(reinterpret_cast<const uint4*>(x) + 2 * j + 1);
        load_cos8<Cos>(cs, 8 * std::int64_t(j), cv);
        load_cos8<Cos>(cs, half + 8 * std::int64_t(j), sv);
        decode8<In>(ra, a);
        decode8<In>(rb, b);
        float ya[8], yb[8];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const RotatedPair r0 = rotate_pair(a[2 * e], a[2 * e + 1], cv[e], sv[e]);
          const RotatedPair r1 = rotate_pair(b[2 * e], b[2 * e + 1], cv[4 + e], sv[4 + e]);
          ya[2 * e] = r0.y;
          ya[2 * e + 1] = r0.yp;
          yb[2 * e] = r1.y;
          yb[2 * e + 1] = r1.yp;
        }
        store_streaming(reinterpret_cast<uint2*>(dst) + 2 * j, encode8<Out>(ya, scale));
        store_streaming(reinterpret_cast<uint2*>(dst) + 2 * j + 1, encode8<Out>(yb, scale));
      }
      return;
    }
    // non-rotary part of q or k: falls through to the copy below
    const uint4 ra = load_readonly(reinterpret_cast<const uint4*>(x) + 2 * j);
    const uint4 rb = load_readonly(reinterpret_cast<const uint4*>(x) + 2 * j + 1);
    float a[8], b[8];
    decode8<In>(ra, a);
    decode8<In>(rb, b);
    store_streaming(reinterpret_cast<uint2*>(dst) + 2 * j, encode8<Out>(a, scale));
    store_streaming(reinterpret_cast<uint2*>(dst) + 2 * j + 1, encode8<Out>(b, scale));
    return;
  }
  // value
  const std::uint32_t cc = c - g.q_items - g.k_items;
  const std::uint32_t vi = S::v_items(g);
  const std::uint32_t h = cc / vi;
  j = cc - h * vi;
  const char* x = p.v.data + (t * p.v.token_stride + std::int64_t(h) * p.v.head_stride) * 2;
  dst = p.v_cache.data + cache_offset(plan.page, plan.entry, h, p.v_cache.stride);
  scale = token_scale(p.v_scale_ptr, p.v_scale);
  const uint4 ra = load_readonly(reinterpret_cast<const uint4*>(x) + 2 * j);
  const uint4 rb = load_readonly(reinterpret_cast<const uint4*>(x) + 2 * j + 1);
  float a[8], b[8];
  decode8<In>(ra, a);
  decode8<In>(rb, b);
  store_streaming(reinterpret_cast<uint2*>(dst) + 2 * j, encode8<Out>(a, scale));
  store_streaming(reinterpret_cast<uint2*>(dst) + 2 * j + 1, encode8<Out>(b, scale));
}

template <DType In, DType Out, DType Cos, int kR, int kN, int kDv>
__global__ void __launch_bounds__(kVecBlock)
    fused_vec_kernel(const LaunchParams p, const VecGeometry g) {
  dependency_wait();
  dependents_launch();
  const std::uint64_t stride = std::uint64_t(gridDim.x) * blockDim.x;
  std::uint64_t i = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g.total_items <= 0xffffffffull) {
    for (; i < g.total_items; i += stride) {
      const std::uint32_t i32 = std::uint32_t(i);
      const std::uint32_t t = i32 / g.items_per_token;
      vec_item<In, Out, Cos, kR, kN, kDv>(p, g, t, i32 - t * g.items_per_token);
    }
  } else {
    for (; i < g.total_items; i += stride) {
      const std::uint64_t t = i / g.items_per_token;
      vec_item<In, Out, Cos, kR, kN, kDv>(p, g, std::int64_t(t),
                                          std::uint32_t(i - t * g.items_per_token));
    }
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
                                          float scale) {
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
                                            float scale, int lane) {
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
