// For the tests that need the host backend to split a call over threads.
#pragma once

#include <cstdlib>
#include <string>

namespace ropekv_test {

// Asks for `count` host threads unless the environment chose a count (the
// backend reads ROPEKV_HOST_THREADS once, at its first large call).
inline void request_host_threads(const char* count) { setenv("ROPEKV_HOST_THREADS", count, 0); }

// Why a large host call is not split here, given the threads the backend
// uses (host_backend_threads()); empty when it is.
inline std::string no_split_reason(int backend_threads) {
  if (backend_threads >= 2) return {};
  const char* env = std::getenv("ROPEKV_HOST_THREADS");
  return std::string("the host backend runs on one thread here (ROPEKV_HOST_THREADS=") +
         (env != nullptr ? env : "") + ", or one CPU when the count was read)";
}

}  // namespace ropekv_test
