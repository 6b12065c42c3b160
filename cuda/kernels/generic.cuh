// The generic kernel (fused_generic_kernel): any valid shape, alignment and
// dtype combination. One block per token (grid-stride); groups of kGroup
// threads take whole head rows, lanes stride over pairs and elements.
#pragma once

#include <cstdint>

#include "cuda/vendor.hpp"
#include "detail/element_math.hpp"
#include "detail/params.hpp"

namespace ropekv {
namespace detail {
namespace gpu {

constexpr int kGenericBlock = 256;
// Blocks per multiprocessor the generic kernels are compiled for (a cap of
// 64 registers): the fastest measured (perf/RESULTS.md).
constexpr int kGenericMinBlocks = 4;
// Threads per head row in the generic path (a logical group: any warp
// width): fewer spread a row's set-up over more elements per thread; 16 was
// the fastest measured (perf/RESULTS.md).
constexpr int kGroup = 16;

// Element i of a row of dtype D (input and cos/sin dtypes: f32, f16, bf16).
template <DType D>
__device__ __forceinline__ float load_elem(const char* base, std::int64_t i) {
  if constexpr (D == DType::kFloat32) {
    return reinterpret_cast<const float*>(base)[i];
  } else {
    return Format<D>::decode(reinterpret_cast<const std::uint16_t*>(base)[i]);
  }
}

// One FP8 code: the hardware conversion where the vendor layer has one
// (proven equal to the shared encoder), else the shared encoder.
template <DType Out>
__device__ __forceinline__ std::uint8_t encode_fp8(float v) {
  std::uint32_t pair;
  if (hw_encode_fp8x2<Out>(v, 0.f, &pair)) return std::uint8_t(pair & 0xffu);
  return Format<Out>::encode(v);
}

// The scale step of the generic kernels: kIeee when a divisor of the launch
// needs IEEE division (decided once per launch), else the Markstein form.
template <bool kIeee>
__device__ __forceinline__ float scale_step(float v, ScaleDivisor scale) {
  return kIeee ? apply_scale(v, scale) : apply_scale_fast(v, scale);
}

// The stored value of v in output dtype D (FP8: the scale step, then the
// hardware or shared encoder).
template <DType D, bool kIeee>
__device__ __forceinline__ void store_in(char* base, std::int64_t i, float v, ScaleDivisor scale) {
  using Storage = typename Format<D>::storage;
  if constexpr (kQuantized<D>)
    reinterpret_cast<Storage*>(base)[i] = encode_fp8<D>(scale_step<kIeee>(v, scale));
  else
    reinterpret_cast<Storage*>(base)[i] = store_value<D>(v, scale);
}

// The stored value of v in output dtype Out, or in `d` when Out is kInvalid
// (output dtype known at run time only).
template <DType Out, bool kIeee>
__device__ __forceinline__ void store_as(char* base, DType d, std::int64_t i, float v,
                                         ScaleDivisor scale) {
  if constexpr (Out != DType::kInvalid) {
    store_in<Out, kIeee>(base, i, v, scale);
  } else {
    // Per element: a switch (one indexed jump), not dispatch's chain of tests.
    switch (d) {
      case DType::kFloat8E4M3FN: store_in<DType::kFloat8E4M3FN, kIeee>(base, i, v, scale); break;
      case DType::kFloat8E5M2: store_in<DType::kFloat8E5M2, kIeee>(base, i, v, scale); break;
      case DType::kFloat8E4M3FNUZ:
        store_in<DType::kFloat8E4M3FNUZ, kIeee>(base, i, v, scale);
        break;
      case DType::kBFloat16: store_in<DType::kBFloat16, kIeee>(base, i, v, scale); break;
      case DType::kFloat16: store_in<DType::kFloat16, kIeee>(base, i, v, scale); break;
      default: store_in<DType::kFloat32, kIeee>(base, i, v, scale); break;
    }
  }
}

// A cos/sin value: fp32 table (kCosF32) or the input dtype's.
template <DType In, bool kCosF32>
__device__ __forceinline__ float load_cos(const char* cs, std::int64_t i) {
  return load_elem < kCosF32 ? DType::kFloat32 : In > (cs, i);
}

// One head row: rotary part (if `rope_dst`), then `copy_n` pass-through
// elements; lanes stride over pairs / elements.
template <DType In, DType Out, bool kCosF32, bool kIeee>
__device__ __forceinline__ void generic_row(const LaunchParams& p, const char* rope_src,
                                            char* rope_dst, const char* copy_src, char* copy_dst,
                                            std::int64_t copy_n, DType out, const char* cs,
                                            ScaleDivisor scale, int lane) {
  if (rope_dst != nullptr) {
    const std::int64_t half = p.rotary_dim / 2;
    for (std::int64_t q = lane; q < half; q += kGroup) {
      const PairIndex ix = pair_index(p.style, q, half);
      const RotatedPair r =
          rotate_pair(load_elem<In>(rope_src, ix.first), load_elem<In>(rope_src, ix.second),
                      load_cos<In, kCosF32>(cs, q), load_cos<In, kCosF32>(cs, half + q));
      store_as<Out, kIeee>(rope_dst, out, ix.first, r.y, scale);
      store_as<Out, kIeee>(rope_dst, out, ix.second, r.yp, scale);
    }
  }
  for (std::int64_t e = lane; e < copy_n; e += kGroup)
    store_as<Out, kIeee>(copy_dst, out, e, load_elem<In>(copy_src, e), scale);
}

// One block per token (grid-stride); groups of kGroup threads take whole
// head rows. In, Out (kInvalid: run time) and the cos/sin dtype are fixed at
// compile time, so the per-element work has no dtype branch.
template <DType In, DType Out, bool kCosF32, bool kIeee>
__device__ __forceinline__ void generic_tokens(const LaunchParams& p, const Divisors& d) {
  const int lane = int(threadIdx.x) % kGroup;
  const int group = int(threadIdx.x) / kGroup;
  const int groups = int(blockDim.x) / kGroup;
  const std::int64_t in_es = p.in.bytes, qo_es = p.q_out.bytes, c_es = p.cache.bytes;
  const std::int64_t rows = p.num_q_heads + p.num_kv_heads * (p.v_dim > 0 ? 2 : 1);
  for (std::int64_t t = blockIdx.x; t < p.nnz; t += gridDim.x) {
    const TokenPlan plan = plan_token(p, t);
    if (!plan.write) {
      if (plan.bad && threadIdx.x == 0 && p.skipped_tokens != nullptr)
        atomicAdd(p.skipped_tokens, 1ull);
      continue;
    }
    const char* cs = p.cos_sin + plan.pos * p.cos_row_stride * p.cos.bytes;
    for (std::int64_t r = group; r < rows; r += groups) {
      if (r < p.num_q_heads) {
        const std::int64_t h = r;
        generic_row<In, Out, kCosF32, kIeee>(
            p, p.q_rope.row(t, h, in_es), p.q_rope_out.row(t, h, qo_es), p.q_nope.row(t, h, in_es),
            p.q_nope_out.row(t, h, qo_es), p.nope_dim, p.q_out.dtype, cs, d.q, lane);
      } else if (r < p.num_q_heads + p.num_kv_heads) {
        const std::int64_t h = r - p.num_q_heads;
        generic_row<In, Out, kCosF32, kIeee>(
            p, p.k_rope.row(t, h, in_es), p.k_cache_rope.row(plan.page, plan.entry, h, c_es),
            p.k_nope.row(t, h, in_es), p.k_cache_nope.row(plan.page, plan.entry, h, c_es),
            p.nope_dim, p.cache.dtype, cs, d.k, lane);
      } else {
        const std::int64_t h = r - p.num_q_heads - p.num_kv_heads;
        generic_row<In, Out, kCosF32, kIeee>(p, nullptr, nullptr, p.v.row(t, h, in_es),
                                             p.v_cache.row(plan.page, plan.entry, h, c_es), p.v_dim,
                                             p.cache.dtype, cs, d.v, lane);
      }
    }
  }
}

// One kernel per (input dtype, FP8 output dtype or kInvalid, cos/sin fp32 or
// input dtype): each gets the registers of its own body. The launcher picks.
template <DType In, DType Out, bool kCosF32>
__global__ void __launch_bounds__(kGenericBlock, kGenericMinBlocks)
    fused_generic_kernel(const LaunchParams p) {
  dependency_wait();
  dependents_launch();
  const Divisors d = load_divisors(p);
  if (needs_ieee(d.q) || needs_ieee(d.k) || needs_ieee(d.v))
    generic_tokens<In, Out, kCosF32, true>(p, d);
  else
    generic_tokens<In, Out, kCosF32, false>(p, d);
}

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
