// The randomized grid suite, written once against BackendMemory and
// instantiated per backend by a three-line file:
//
//   #include "grid_suite.hpp"
//   ROPEKV_INSTANTIATE_GRID_SUITE(Cuda, ropekv_test::cuda_memory);
//
// which registers
//   <Prefix>/GridCase.Run/cNNN_...   one test per generated case, and
//   <Prefix>/GridSummary.AllCases/all  every case (those not yet run in this
//                                      process are run), then the summary: for
//                                      the host backend the oracle-agreement
//                                      line and its bound, for other backends
//                                      the bit-identity count.
// Host backend: every named output element within the oracle's double-precision
// error bound (tests/oracle.hpp).
// Other backends: the same case on the host backend and on the backend under
// test, bit-identical query outputs and whole cache buffers (guards included).
// Every backend: every named output element is the code of the contract's float32
// formula (the oracle's `exact`) bit for bit, every byte the contract does not name
// still holds its guard, inputs are unchanged, the checked-mode counter is right.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "backend_memory.hpp"

namespace ropekv_test {

using MemoryFn = const BackendMemory& (*)();

struct GridParam {
  MemoryFn memory;
  int case_index;
};

// How gtest prints a parameter (instead of its bytes).
void PrintTo(const GridParam& param, std::ostream* os);
void PrintTo(MemoryFn memory, std::ostream* os);

int grid_num_cases();
std::vector<GridParam> grid_params(MemoryFn memory);
std::string grid_case_name(const ::testing::TestParamInfo<GridParam>& info);
std::string grid_summary_name(const ::testing::TestParamInfo<MemoryFn>& info);

}  // namespace ropekv_test

class GridCase : public ::testing::TestWithParam<ropekv_test::GridParam> {};
class GridSummary : public ::testing::TestWithParam<ropekv_test::MemoryFn> {};

#define ROPEKV_INSTANTIATE_GRID_SUITE(Prefix, memory_fn)                                \
  INSTANTIATE_TEST_SUITE_P(Prefix, GridCase,                                            \
                           ::testing::ValuesIn(::ropekv_test::grid_params(&memory_fn)), \
                           ::ropekv_test::grid_case_name);                              \
  INSTANTIATE_TEST_SUITE_P(Prefix, GridSummary,                                         \
                           ::testing::Values(::ropekv_test::MemoryFn(&memory_fn)),      \
                           ::ropekv_test::grid_summary_name)
