// The regression suite of issue 11 on the host backend: Host/Issue11.*
#include "regression_suite.hpp"
ROPEKV_INSTANTIATE_REGRESSION_SUITE(Host, ropekv_test::host_memory);
