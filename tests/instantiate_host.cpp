// The grid suite on the host (Kokkos) backend: Host/GridCase.*, Host/GridSummary.*
#include "grid_suite.hpp"
ROPEKV_INSTANTIATE_GRID_SUITE(Host, ropekv_test::host_memory);
