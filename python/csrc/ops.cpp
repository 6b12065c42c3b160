// Registers ropekv::rope_quantize_append with PyTorch: the schema, the CPU
// kernel (the host backend) and the Meta kernel (validation without data,
// which torch.compile's fake tensors run). The CUDA kernel is in ops_cuda.cpp.
#include <torch/library.h>

#include "op_arguments.hpp"

namespace ropekv_torch {
namespace {

struct Cpu {
  static void run(const OpArgs& a) { run_op(a, Mode::kCpu, nullptr); }
};
struct Meta {
  static void run(const OpArgs& a) { run_op(a, Mode::kMeta, nullptr); }
};

}  // namespace
}  // namespace ropekv_torch

TORCH_LIBRARY(ropekv, m) { m.def(ropekv_torch::kSchema); }

TORCH_LIBRARY_IMPL(ropekv, CPU, m) {
  m.impl("rope_quantize_append", &ropekv_torch::op_kernel<ropekv_torch::Cpu>);
}

TORCH_LIBRARY_IMPL(ropekv, Meta, m) {
  m.impl("rope_quantize_append", &ropekv_torch::op_kernel<ropekv_torch::Meta>);
}

#if TORCH_VERSION_MAJOR < 2
// torch 1.x has no autograd fallback for Meta tensors; the op has no gradient.
TORCH_LIBRARY_IMPL(ropekv, AutogradMeta, m) {
  m.impl("rope_quantize_append", torch::CppFunction::makeFallthrough());
}
#endif
