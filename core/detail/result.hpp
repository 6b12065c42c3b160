// Building a Result: a Status and a printf-style message naming the argument
// and the rule.
#pragma once

#include "ropekv/ropekv.hpp"

namespace ropekv {
namespace detail {

// Builds a Result with a printf-style message.
Result make_result(Status status, const char* fmt, ...) noexcept
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

}  // namespace detail
}  // namespace ropekv

// Returns the Result of `expr` from the enclosing function when it failed.
#define ROPEKV_TRY(expr)          \
  do {                            \
    ::ropekv::Result r_ = (expr); \
    if (!r_.ok()) return r_;      \
  } while (0)
