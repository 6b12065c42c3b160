// Results with printf-style messages.
#include "detail/result.hpp"

#include <cstdarg>
#include <cstdio>

namespace ropekv {
namespace detail {

Result make_result(Status status, const char* fmt, ...) noexcept {
  Result r;
  r.status = status;
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(r.message, sizeof(r.message), fmt, ap);
  va_end(ap);
  return r;
}

}  // namespace detail
}  // namespace ropekv
