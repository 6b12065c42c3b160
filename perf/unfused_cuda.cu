// The unfused baseline on CUDA: three simple kernels, as serving engines run
// the op without fusion (see unfused.hpp). Like vLLM's rotary_embedding,
// static_scaled_fp8_quant and reshape_and_cache_flash, each kernel gives a
// token to a block and lets its threads walk the token's elements one at a
// time; the element operations are those of unfused_passes.hpp (shared math).
#include <cuda_runtime.h>

#include <cstdint>

#include "detail/lower.hpp"
#include "unfused.hpp"
#include "unfused_passes.hpp"

namespace ropekv_perf {

namespace {

using namespace unfused;

constexpr int kThreads = 256;

// Pass 1: block t rotates the rotary pairs of every q and k head of token t.
__global__ void rope_kernel(const LaunchParams p, std::uint16_t* q_rot, std::uint16_t* k_rot) {
  const std::int64_t t = blockIdx.x;
  const int half = int(p.rotary_dim / 2);
  const int pairs = int(p.num_q_heads + p.num_kv_heads) * half;
  for (int j = threadIdx.x; j < pairs; j += blockDim.x) {
    const int h = j / half;
    rope_pair(p, t, h, j - h * half, q_rot, k_rot);
  }
}

// Pass 2: block t quantizes every element of every q head of token t.
__global__ void quantize_kernel(const LaunchParams p, const std::uint16_t* q_rot) {
  const std::int64_t t = blockIdx.x;
  const ScaleDivisor qs = p.q_scale.divisor();
  const int d = int(p.rotary_dim + p.nope_dim);
  const int n = int(p.num_q_heads) * d;
  for (int e = threadIdx.x; e < n; e += blockDim.x) {
    const int h = e / d;
    quantize_q(p, t, h, e - h * d, q_rot, qs);
  }
}

// Pass 3: block t writes k and v of token t into its cache slot.
__global__ void cache_kernel(const LaunchParams p, const std::uint16_t* k_rot) {
  const std::int64_t t = blockIdx.x;
  const TokenPlan plan = ropekv::detail::plan_token(p, t);
  if (!plan.write) return;
  const ScaleDivisor ks = p.k_scale.divisor();
  const ScaleDivisor vs = p.v_scale.divisor();
  const int row = int(p.rotary_dim + p.nope_dim + p.v_dim);
  const int n = int(p.num_kv_heads) * row;
  for (int e = threadIdx.x; e < n; e += blockDim.x) {
    const int h = e / row;
    cache_element(p, t, plan, h, e - h * row, k_rot, ks, vs);
  }
}

ropekv::Result launch_error(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return ropekv::Result{};
  return ropekv::detail::make_result(ropekv::Status::kErrorLaunchFailed, "unfused %s: %s", what,
                                     cudaGetErrorString(e));
}

}  // namespace

ropekv::Result unfused_cuda(const ropekv::Arguments& args, void* q_rot_v, void* k_rot_v) {
  LaunchParams p;
  ropekv::Result res = ropekv::detail::lower(args, &p);
  if (!res.ok() || p.nnz == 0) return res;
  if (!supported(p))
    return ropekv::detail::make_result(ropekv::Status::kErrorUnsupportedDType,
                                       "unfused baseline: bf16 in, fp32 cos/sin, e4m3fn out only");
  if (p.nnz > 0x7fffffff)
    return ropekv::detail::make_result(ropekv::Status::kErrorInvalidArgument,
                                       "unfused baseline: nnz must fit a grid dimension");
  auto* q_rot = static_cast<std::uint16_t*>(q_rot_v);
  auto* k_rot = static_cast<std::uint16_t*>(k_rot_v);
  cudaStream_t stream = static_cast<cudaStream_t>(args.stream);
  const dim3 grid(static_cast<unsigned>(p.nnz));
  rope_kernel<<<grid, kThreads, 0, stream>>>(p, q_rot, k_rot);
  res = launch_error("rope_kernel");
  if (!res.ok()) return res;
  quantize_kernel<<<grid, kThreads, 0, stream>>>(p, q_rot);
  res = launch_error("quantize_kernel");
  if (!res.ok()) return res;
  cache_kernel<<<grid, kThreads, 0, stream>>>(p, k_rot);
  return launch_error("cache_kernel");
}

}  // namespace ropekv_perf
