// The CUDA kernel of ropekv::rope_quantize_append: the CUDA backend on the
// tensors' device and that device's current torch stream (so it is captured
// by torch.cuda.CUDAGraph and ordered with the caller's kernels). Built only
// against a torch with CUDA.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "op_arguments.hpp"

namespace ropekv_torch {
namespace {

struct Cuda {
  static void run(const OpArgs& a) {
    TORCH_CHECK_VALUE(a.q_rope.is_cuda(), "ropekv: q_rope must be a CUDA tensor, got ",
                      a.q_rope.device());
    // ropekv launches on the calling thread's current device.
    const c10::cuda::CUDAGuard guard(a.q_rope.device());
    run_op(a, Mode::kCuda, c10::cuda::getCurrentCUDAStream(a.q_rope.device().index()).stream());
  }
};

}  // namespace
}  // namespace ropekv_torch

TORCH_LIBRARY_IMPL(ropekv, CUDA, m) {
  m.impl("rope_quantize_append", &ropekv_torch::op_kernel<ropekv_torch::Cuda>);
}
