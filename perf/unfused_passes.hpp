// The element operations of the three unfused passes (see unfused.hpp), host
// + device, over already lowered launch parameters. The host loops
// (unfused_host.cpp) and the CUDA kernels (unfused_cuda.cu) only decide which
// thread does which element; every formula comes from core/detail.
#pragma once

#include <cstdint>

#include "detail/element_math.hpp"
#include "detail/params.hpp"
#include "unfused.hpp"

namespace ropekv_perf {
namespace unfused {

using ropekv::detail::LaunchParams;
using ropekv::detail::ScaleDivisor;
using ropekv::detail::TokenPlan;
using Bf16 = ropekv::detail::Format<ropekv::DType::kBFloat16>;
using Fp8 = ropekv::detail::Format<ropekv::DType::kFloat8E4M3FN>;

ROPEKV_HD bool supported(const LaunchParams& p) {
  return p.in.dtype == kUnfusedInput && p.cos.dtype == ropekv::DType::kFloat32 &&
         p.q_out.dtype == ropekv::DType::kFloat8E4M3FN &&
         p.cache.dtype == ropekv::DType::kFloat8E4M3FN;
}

// Rows of the supported case: bf16 inputs, e4m3fn outputs.
ROPEKV_HD const std::uint16_t* in_row(const ropekv::detail::HeadTensor& v, std::int64_t t,
                                      std::int64_t h) {
  return reinterpret_cast<const std::uint16_t*>(v.row(t, h, 2));
}
ROPEKV_HD std::uint8_t* out_row(const ropekv::detail::HeadTensor& v, std::int64_t t,
                                std::int64_t h) {
  return reinterpret_cast<std::uint8_t*>(v.row(t, h, 1));
}
ROPEKV_HD std::uint8_t* cache_row(const ropekv::detail::CacheTensor& c, const TokenPlan& plan,
                                  std::int64_t h) {
  return reinterpret_cast<std::uint8_t*>(c.row(plan.page, plan.entry, h, 1));
}

// ---- pass 1: RoPE in bf16 into the scratch buffers.
// Rotation pair `pair` of head `h` of token t; h < Hq is a q head, else k head h - Hq.
ROPEKV_HD void rope_pair(const LaunchParams& p, std::int64_t t, std::int64_t h, std::int64_t pair,
                         std::uint16_t* q_rot, std::uint16_t* k_rot) {
  const std::int64_t r = p.rotary_dim, half = r / 2;
  const std::int64_t pos = p.positions[t];
  const float* cs = reinterpret_cast<const float*>(p.cos_sin) + pos * p.cos_row_stride;
  const bool is_q = h < p.num_q_heads;
  const std::int64_t hh = is_q ? h : h - p.num_q_heads;
  const std::uint16_t* x = in_row(is_q ? p.q_rope : p.k_rope, t, hh);
  std::uint16_t* y =
      is_q ? q_rot + (t * p.num_q_heads + hh) * r : k_rot + (t * p.num_kv_heads + hh) * r;
  const ropekv::detail::PairIndex ix = ropekv::detail::pair_index(p.style, pair, half);
  const ropekv::detail::RotatedPair o = ropekv::detail::rotate_pair(
      Bf16::decode(x[ix.first]), Bf16::decode(x[ix.second]), cs[pair], cs[half + pair]);
  y[ix.first] = Bf16::encode(o.y);
  y[ix.second] = Bf16::encode(o.yp);
}

// ---- pass 2: quantize element i (0 <= i < R + N) of q head h of token t.
ROPEKV_HD void quantize_q(const LaunchParams& p, std::int64_t t, std::int64_t h, std::int64_t i,
                          const std::uint16_t* q_rot, ScaleDivisor qs) {
  const std::int64_t r = p.rotary_dim;
  if (i < r) {
    const float x = Bf16::decode(q_rot[(t * p.num_q_heads + h) * r + i]);
    out_row(p.q_rope_out, t, h)[i] =
        ropekv::detail::store_value<ropekv::DType::kFloat8E4M3FN>(x, qs);
  } else {
    const float x = Bf16::decode(in_row(p.q_nope, t, h)[i - r]);
    out_row(p.q_nope_out, t, h)[i - r] =
        ropekv::detail::store_value<ropekv::DType::kFloat8E4M3FN>(x, qs);
  }
}

// ---- pass 3: cache write of element i of kv head h of token t, where
// i < R: rotated k (scratch), R <= i < R + N: non-rotary k, then v (Dv).
ROPEKV_HD void cache_element(const LaunchParams& p, std::int64_t t, const TokenPlan& plan,
                             std::int64_t h, std::int64_t i, const std::uint16_t* k_rot,
                             ScaleDivisor ks, ScaleDivisor vs) {
  using ropekv::detail::store_value;
  constexpr ropekv::DType kOut = ropekv::DType::kFloat8E4M3FN;
  const std::int64_t r = p.rotary_dim, kd = r + p.nope_dim;
  if (i < r) {
    const float x = Bf16::decode(k_rot[(t * p.num_kv_heads + h) * r + i]);
    cache_row(p.k_cache_rope, plan, h)[i] = store_value<kOut>(x, ks);
  } else if (i < kd) {
    const float x = Bf16::decode(in_row(p.k_nope, t, h)[i - r]);
    cache_row(p.k_cache_nope, plan, h)[i - r] = store_value<kOut>(x, ks);
  } else {
    const float x = Bf16::decode(in_row(p.v, t, h)[i - kd]);
    cache_row(p.v_cache, plan, h)[i - kd] = store_value<kOut>(x, vs);
  }
}

}  // namespace unfused
}  // namespace ropekv_perf
