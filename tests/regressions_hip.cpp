// The regression suite of issue 11 on the HIP backend: Hip/Issue11.*
#include "regression_suite.hpp"
ROPEKV_INSTANTIATE_REGRESSION_SUITE(Hip, ropekv_test::hip_memory);
