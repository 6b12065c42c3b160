// The GPU backend's launcher: picks the vector path or the generic path,
// sizes the grid from the device's multiprocessor count (read once per
// device), launches on the caller's stream and reports launch errors.
// One source for CUDA and HIP (hip/ compiles this file as HIP).
//
// Safe inside graph capture: no allocation, no synchronisation and no host
// read of device data happen during a call.
#include <atomic>
#include <cstdint>

#include "backends/backend.hpp"
#include "cuda/kernels.cuh"
#include "detail/lower.hpp"

namespace ropekv {
namespace detail {
namespace gpu {
namespace {

constexpr int kMaxDevices = 64;

// Multiprocessor count of `dev`, read from the device once.
int sm_count(int dev) {
  static std::atomic<int> cache[kMaxDevices] = {};
  if (dev < 0 || dev >= kMaxDevices) return 132;
  int n = cache[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (multiprocessor_count(dev, &n) != kSuccess || n <= 0) n = 132;
    cache[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

bool aligned(const void* ptr, std::int64_t bytes) {
  return reinterpret_cast<std::uintptr_t>(ptr) % std::uintptr_t(bytes) == 0;
}
// Every row of a [nnz, H, dim] view starts `bytes`-aligned.
bool rows_aligned(const HeadTensor& t, std::int64_t es, std::int64_t bytes) {
  return t.data == nullptr || (aligned(t.data, bytes) && (t.token_stride * es) % bytes == 0 &&
                               (t.head_stride * es) % bytes == 0);
}
bool rows_aligned(const CacheTensor& c, std::int64_t bytes) {
  return c.data == nullptr || (aligned(c.data, bytes) && c.stride[0] % bytes == 0 &&
                               c.stride[1] % bytes == 0 && c.stride[2] % bytes == 0);
}

bool is_fp8(DType d) {
  return d == DType::kFloat8E4M3FN || d == DType::kFloat8E5M2 || d == DType::kFloat8E4M3FNUZ;
}

// The vector path's conditions (see kernels.cuh).
bool vector_eligible(const LaunchParams& p) {
  if (p.in_dtype != DType::kBFloat16 && p.in_dtype != DType::kFloat16) return false;
  if (!is_fp8(p.q_out_dtype) || p.cache_dtype != p.q_out_dtype) return false;
  if (p.rotary_dim % kItem != 0 || p.nope_dim % kItem != 0 || p.v_dim % kItem != 0) return false;
  const std::int64_t in_es = 2;
  for (const HeadTensor* t : {&p.q_rope, &p.q_nope, &p.k_rope, &p.k_nope, &p.v})
    if (!rows_aligned(*t, in_es, 16)) return false;
  for (const HeadTensor* t : {&p.q_rope_out, &p.q_nope_out})
    if (!rows_aligned(*t, 1, 8)) return false;
  for (const CacheTensor* c : {&p.k_cache_rope, &p.k_cache_nope, &p.v_cache})
    if (!rows_aligned(*c, 8)) return false;
  return aligned(p.cos_sin, 16) && (p.cos_row_stride * p.cos_size) % 16 == 0;
}

// Thread items of kV sub-items of 16 elements.
VecGeometry geometry(const LaunchParams& p, int kv) {
  VecGeometry g;
  const std::int64_t span = std::int64_t(kItem) * kv;
  g.rope_items = std::uint32_t(p.rotary_dim / span);
  g.nope_items = std::uint32_t(p.nope_dim / span);
  g.v_items = std::uint32_t(p.v_dim / span);
  g.q_items = std::uint32_t(p.num_q_heads) * (g.rope_items + g.nope_items);
  g.k_items = std::uint32_t(p.num_kv_heads) * (g.rope_items + g.nope_items);
  g.items_per_token = g.q_items + g.k_items + std::uint32_t(p.num_kv_heads) * g.v_items;
  g.total_items = std::uint64_t(p.nnz) * g.items_per_token;
  return g;
}

using VecKernel = void (*)(const LaunchParams, const VecGeometry);
struct VecChoice {
  VecKernel kernel;
  int kv;  // sub-items of 16 elements per thread
};

// Canonical shapes of PERF.md get their own specialisation (bf16/fp16 in,
// e4m3fn out, fp32 cos/sin) with 32 elements per thread; every other
// eligible case the run-time shape kernel with 16.
// 32 elements per thread: measured on the H200 (perf/RESULTS.md) against 16
// (more integer overhead per byte) and 64 (registers cut occupancy).
constexpr int kCanonicalSubItems = 2;
template <DType In, DType Out, DType Cos>
VecChoice pick_shape(const LaunchParams& p) {
  if constexpr (Out == DType::kFloat8E4M3FN && Cos == DType::kFloat32) {
    constexpr int V = kCanonicalSubItems;
    const std::int64_t r = p.rotary_dim, n = p.nope_dim, dv = p.v_dim;
    if (r == 64 && n == 0 && dv == 64) return {&fused_vec_kernel<In, Out, Cos, 64, 0, 64, V>, V};
    if (r == 128 && n == 0 && dv == 128)
      return {&fused_vec_kernel<In, Out, Cos, 128, 0, 128, V>, V};
    if (r == 64 && n == 64 && dv == 128)
      return {&fused_vec_kernel<In, Out, Cos, 64, 64, 128, V>, V};
    if (r == 64 && n == 512 && dv == 0) return {&fused_vec_kernel<In, Out, Cos, 64, 512, 0, V>, V};
  }
  return {&fused_vec_kernel<In, Out, Cos, 0, 0, 0, 1>, 1};
}

template <DType In>
VecChoice pick_out(const LaunchParams& p) {
  const bool cos_f32 = p.cos_dtype == DType::kFloat32;
  switch (p.q_out_dtype) {
    case DType::kFloat8E5M2:
      return cos_f32 ? pick_shape<In, DType::kFloat8E5M2, DType::kFloat32>(p)
                     : pick_shape<In, DType::kFloat8E5M2, In>(p);
    case DType::kFloat8E4M3FNUZ:
      return cos_f32 ? pick_shape<In, DType::kFloat8E4M3FNUZ, DType::kFloat32>(p)
                     : pick_shape<In, DType::kFloat8E4M3FNUZ, In>(p);
    default:
      return cos_f32 ? pick_shape<In, DType::kFloat8E4M3FN, DType::kFloat32>(p)
                     : pick_shape<In, DType::kFloat8E4M3FN, In>(p);
  }
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

[[maybe_unused]] Result gpu_launch(const LaunchParams& p) noexcept {
  int dev = 0;
  if (current_device(&dev) != kSuccess) {
    (void)last_error();
    return make_result(Status::kErrorNoDevice, "%s backend: no current device", kVendorName);
  }
  const int sms = sm_count(dev);
  Stream stream = static_cast<Stream>(p.stream);
  Error err;
  if (vector_eligible(p)) {
    const VecChoice k = p.in_dtype == DType::kFloat16 ? pick_out<DType::kFloat16>(p)
                                                      : pick_out<DType::kBFloat16>(p);
    const VecGeometry g = geometry(p, k.kv);
    err = launch(k.kernel, grid_for(g.total_items, kVecBlock, sms, 16), kVecBlock, stream, p.pdl,
                 p, g);
  } else {
    const unsigned grid = grid_for(std::uint64_t(p.nnz) * kGenericBlock, kGenericBlock, sms, 8);
    err = launch(&fused_generic_kernel, grid, kGenericBlock, stream, p.pdl, p);
  }
  if (err == kSuccess) err = last_error();
  if (err != kSuccess)
    return make_result(Status::kErrorLaunchFailed, "%s backend: kernel launch failed: %s",
                       kVendorName, error_string(err));
  return Result{};
}

}  // namespace
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
