// The regression suite of issue 11 on the CUDA backend: Cuda/Issue11.*
#include "regression_suite.hpp"
ROPEKV_INSTANTIATE_REGRESSION_SUITE(Cuda, ropekv_test::cuda_memory);
