// The grid suite on the HIP backend: every case bit-identical with the host backend.
#include "grid_suite.hpp"
ROPEKV_INSTANTIATE_GRID_SUITE(Hip, ropekv_test::hip_memory);
