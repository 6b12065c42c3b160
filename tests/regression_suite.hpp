// Regression tests of issue 11 (hostile input, threads), one per defect,
// written once against BackendMemory and instantiated per backend by a
// three-line file:
//
//   #include "regression_suite.hpp"
//   ROPEKV_INSTANTIATE_REGRESSION_SUITE(Cuda, ropekv_test::cuda_memory);
//
// which registers <Prefix>/Issue11.Defect<N><What>/<backend>.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "backend_memory.hpp"

namespace ropekv_test {
// The backend under test.
struct RegressionParam {
  const BackendMemory& (*memory)();
};
void PrintTo(const RegressionParam& param, std::ostream* os);
std::string regression_name(const ::testing::TestParamInfo<RegressionParam>& info);
}  // namespace ropekv_test

class Issue11 : public ::testing::TestWithParam<ropekv_test::RegressionParam> {};
// PreparedCall's suite (prepared_call_suite.cpp), instantiated alongside.
class PreparedCallSuite : public ::testing::TestWithParam<ropekv_test::RegressionParam> {};

#define ROPEKV_INSTANTIATE_REGRESSION_SUITE(Prefix, memory_fn)                            \
  INSTANTIATE_TEST_SUITE_P(Prefix, Issue11,                                               \
                           ::testing::Values(::ropekv_test::RegressionParam{&memory_fn}), \
                           ::ropekv_test::regression_name);                               \
  INSTANTIATE_TEST_SUITE_P(Prefix, PreparedCallSuite,                                     \
                           ::testing::Values(::ropekv_test::RegressionParam{&memory_fn}), \
                           ::ropekv_test::regression_name)
