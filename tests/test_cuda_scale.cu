// The quantization step on the GPU for both scale conventions and every
// scale (core/detail/element_math.hpp, apply_scale): multiplying is one IEEE
// multiplication, and dividing by a scale outside [2^-60, 2^60] (where the
// reciprocal-based division is not proven) is IEEE division, both bit for
// bit over every float32 input. (Dividing by scales inside the range:
// test_cuda_fp8_hw.cu, CudaScaleDivision.)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "detail/element_math.hpp"
#include "scale_division_cases.hpp"

namespace {

namespace rd = ropekv::detail;
using ropekv::ScaleConvention;

__global__ void exact_sweep(float s, bool multiply, unsigned long long* diff,
                            unsigned* first_bits) {
  const rd::ScaleDivisor d =
      rd::make_divisor(s, multiply ? ScaleConvention::kMultiply : ScaleConvention::kDivide);
  const unsigned long long stride = 1ull * gridDim.x * blockDim.x;
  unsigned long long n = 0;
  for (unsigned long long i = 1ull * blockIdx.x * blockDim.x + threadIdx.x; i <= 0xffffffffull;
       i += stride) {
    const float x = __uint_as_float(unsigned(i));
    const float want = multiply ? __fmul_rn(x, s) : __fdiv_rn(x, s);
    const float got = rd::apply_scale(x, d);
    if (__float_as_uint(want) != __float_as_uint(got) && !(want != want && got != got)) {
      if (n == 0) atomicCAS(first_bits, 0u, unsigned(i) | 1u);
      ++n;
    }
  }
  if (n) atomicAdd(diff, n);
}

bool have_device() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

// Sweeps every float32 input for each listed scale; `pick` selects scales.
void sweep(bool multiply, bool (*pick)(float), const char* what) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)";
  unsigned long long* diff = nullptr;
  unsigned* first = nullptr;
  ASSERT_EQ(cudaMallocManaged(&diff, sizeof(unsigned long long)), cudaSuccess);
  ASSERT_EQ(cudaMallocManaged(&first, sizeof(unsigned)), cudaSuccess);
  int scales = 0;
  unsigned long long total = 0;
  for (int i = 0; i < ropekv_test::kNumDivisionScales; ++i) {
    const float s = ropekv_test::division_scale(i);
    if (!pick(s)) continue;
    *diff = 0;
    *first = 0;
    exact_sweep<<<2048, 256>>>(s, multiply, diff, first);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(*diff, 0ull) << what << " scale " << s << ": first input bits about 0x" << std::hex
                           << *first;
    total += *diff;
    ++scales;
  }
  std::printf("[ scale ] GPU %s: %d scales x 2^32 inputs: %llu results differ from IEEE\n", what,
              scales, total);
  EXPECT_GT(scales, 0);
  cudaFree(diff);
  cudaFree(first);
}

bool any_scale(float) { return true; }
bool outside_fast_range(float s) { return !(s >= 0x1p-60f && s <= 0x1p60f); }

TEST(CudaScaleMultiplication, AllFloat32MatchIeeeMultiplication) {
  sweep(true, &any_scale, "multiplying");
}

TEST(CudaScaleDivision, OutsideFastRangeAllFloat32MatchIeeeDivision) {
  sweep(false, &outside_fast_range, "dividing, scales outside [2^-60, 2^60]");
}

}  // namespace
