// The host backend's compiled variants: per instruction set (x86-64-v4,
// x86-64-v3, the baseline), the row functions of a call's dtypes, or the
// fast path's token range function; the widest the CPU supports is picked.
#pragma once

#include <cstdint>

#include "detail/element_math.hpp"
#include "detail/params.hpp"

namespace ropekv {
namespace detail {
namespace host {

// One head row: rotary part. x and the cos/sin row are read, y written.
using RopeRowFn = void (*)(const void* x, void* y, const void* cos_sin, std::int64_t rotary_dim,
                           RopeStyle style, ScaleDivisor scale);
// One head row: pass-through part (non-rotary q/k, value).
using CopyRowFn = void (*)(const void* x, void* y, std::int64_t n, ScaleDivisor scale);

// Tokens [t0, t1) of the fast path, in one ISA-compiled function: no call
// per token or per row.
using RangeFn = std::int64_t (*)(const LaunchParams& p, const Divisors& d, std::int64_t t0,
                                 std::int64_t t1);

struct RowFns {
  RopeRowFn q_rope, k_rope;
  CopyRowFn q_copy, kv_copy;
};

// What runs each token: a fast range function, else the row functions.
struct Kernel {
  RangeFn range = nullptr;
  RowFns rows{};
};

// For the widest instruction set this CPU (and OS) supports;
// ROPEKV_HOST_ISA=avx2|baseline lowers it (tests, measurements).
Kernel select_kernel_for_cpu(const LaunchParams& p);

// The variant select_kernel_for_cpu takes in this process ("avx512", "avx2"
// or "baseline") and whether it has the fast path (tests).
struct IsaVariant {
  const char* name;
  bool fast_path;
};
IsaVariant selected_isa();

}  // namespace host
}  // namespace detail
}  // namespace ropekv
