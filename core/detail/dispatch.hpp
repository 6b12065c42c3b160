// The one dispatch idiom: a run-time value -> a template parameter, over a
// closed list of values. `dispatch<List>(v, f)` calls f with a
// std::integral_constant of the list's value equal to v (the list's last
// when none is: lists end with their fallback) and returns what f returns.
// The dtype lists are the classes of the dtype table (ropekv.hpp, kDTypes).
#pragma once

#include <cstddef>
#include <type_traits>

#include "ropekv/ropekv.hpp"

// Host+device, so that device code dispatches alike; `f` may be host-only
// or device-only (the exec-space check is for the instantiation nvcc emits).
#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define ROPEKV_DISPATCH_HD __host__ __device__ __forceinline__
#else
#define ROPEKV_DISPATCH_HD inline
#endif
#if defined(__CUDACC__) && !defined(__HIP__)
#define ROPEKV_DISPATCH_ANY_SPACE _Pragma("nv_exec_check_disable")
#else
#define ROPEKV_DISPATCH_ANY_SPACE
#endif

namespace ropekv {
namespace detail {

template <class T, T... Vs>
struct ValueList {};
template <DType... Ds>
using DTypeList = ValueList<DType, Ds...>;
template <DType D>
using DTypeTag = std::integral_constant<DType, D>;

ROPEKV_DISPATCH_ANY_SPACE
template <class T, T First, T... Rest, class F>
ROPEKV_DISPATCH_HD decltype(auto) dispatch_in(ValueList<T, First, Rest...>, T v, F& f) {
  if constexpr (sizeof...(Rest) == 0) {
    (void)v;
    return f(std::integral_constant<T, First>{});
  } else {
    if (v == First) return f(std::integral_constant<T, First>{});
    return dispatch_in(ValueList<T, Rest...>{}, v, f);
  }
}
ROPEKV_DISPATCH_ANY_SPACE
template <class List, class T, class F>
ROPEKV_DISPATCH_HD decltype(auto) dispatch(T v, F&& f) {
  return dispatch_in(List{}, v, f);
}

// The dtype classes, each ending with its fallback.
using InputDTypes = DTypeList<DType::kBFloat16, DType::kFloat16, DType::kFloat32>;
using OutputDTypes = DTypeList<DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E4M3FNUZ,
                               DType::kBFloat16, DType::kFloat16, DType::kFloat32>;
using Fp8DTypes = DTypeList<DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E4M3FNUZ>;

// A list holds exactly the table's dtypes of one class.
template <DType... Ds>
constexpr bool is_class(DTypeList<Ds...>, bool DTypeInfo::*member) {
  std::size_t in_class = 0;
  for (const DTypeInfo& d : kDTypes) in_class += (d.*member) ? 1 : 0;
  return ((dtype_info(Ds).*member) && ...) && sizeof...(Ds) == in_class;
}
static_assert(is_class(InputDTypes{}, &DTypeInfo::input), "InputDTypes: the table's inputs");
static_assert(is_class(OutputDTypes{}, &DTypeInfo::output), "OutputDTypes: the table's outputs");
static_assert(is_class(Fp8DTypes{}, &DTypeInfo::quantized), "Fp8DTypes: the table's FP8 formats");

}  // namespace detail
}  // namespace ropekv
