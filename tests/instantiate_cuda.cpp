// The grid suite on the CUDA backend: every case bit-identical with the host backend.
#include "grid_suite.hpp"
ROPEKV_INSTANTIATE_GRID_SUITE(Cuda, ropekv_test::cuda_memory);
