// Runtime DType -> template parameter, over the closed lists of supported
// formats. `f` is called with a std::integral_constant<DType, D>.
#pragma once

#include <type_traits>

#include "ropekv/ropekv.hpp"

namespace ropekv {
namespace detail {

template <DType D>
using DTypeTag = std::integral_constant<DType, D>;

// bf16, fp16, fp32 (inputs; also the cos/sin table).
template <class F>
void dispatch_input(DType d, F&& f) {
  switch (d) {
    case DType::kBFloat16: f(DTypeTag<DType::kBFloat16>{}); break;
    case DType::kFloat16: f(DTypeTag<DType::kFloat16>{}); break;
    default: f(DTypeTag<DType::kFloat32>{}); break;
  }
}

// Every output format.
template <class F>
void dispatch_output(DType d, F&& f) {
  switch (d) {
    case DType::kFloat8E4M3FN: f(DTypeTag<DType::kFloat8E4M3FN>{}); break;
    case DType::kFloat8E5M2: f(DTypeTag<DType::kFloat8E5M2>{}); break;
    case DType::kFloat8E4M3FNUZ: f(DTypeTag<DType::kFloat8E4M3FNUZ>{}); break;
    case DType::kBFloat16: f(DTypeTag<DType::kBFloat16>{}); break;
    case DType::kFloat16: f(DTypeTag<DType::kFloat16>{}); break;
    default: f(DTypeTag<DType::kFloat32>{}); break;
  }
}

}  // namespace detail
}  // namespace ropekv
