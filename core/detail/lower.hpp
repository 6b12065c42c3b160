// Validation and lowering: Arguments -> LaunchParams. Runs every host-side
// rule of the contract (README.md); on failure `out` is untouched and
// the Result names the argument and the rule.
#pragma once

#include <cstdarg>

#include "detail/params.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv {
namespace detail {

Result lower(const Arguments& args, LaunchParams* out) noexcept;

// Builds a Result with a printf-style message.
Result make_result(Status status, const char* fmt, ...) noexcept
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

}  // namespace detail
}  // namespace ropekv
