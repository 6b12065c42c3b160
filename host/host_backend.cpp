// The host backend: Kokkos over DefaultHostExecutionSpace (serial with
// Debian's Kokkos, parallel with a user's OpenMP/Threads build). It is the
// reference that every device backend is checked against bit for bit, and a
// real CPU fallback: the per-row loops are branch-free and vectorise.
#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <exception>
#include <mutex>

#include "backends/backend.hpp"
#include "detail/dispatch.hpp"
#include "detail/element_math.hpp"
#include "detail/lower.hpp"
#include "detail/params.hpp"

namespace ropekv {
namespace detail {
namespace {

// One head row: rotary part. x and the cos/sin row are read, y written.
using RopeRowFn = void (*)(const void* x, void* y, const void* cos_sin, std::int64_t rotary_dim,
                           RopeStyle style, ScaleDivisor scale);
// One head row: pass-through part (non-rotary q/k, value).
using CopyRowFn = void (*)(const void* x, void* y, std::int64_t n, ScaleDivisor scale);

template <DType In, DType Out, DType Cos>
void rope_row(const void* xv, void* yv, const void* csv, std::int64_t rotary_dim, RopeStyle style,
              ScaleDivisor scale) {
  using I = typename Format<In>::storage;
  using O = typename Format<Out>::storage;
  using C = typename Format<Cos>::storage;
  const I* __restrict__ x = static_cast<const I*>(xv);
  O* __restrict__ y = static_cast<O*>(yv);
  const C* __restrict__ cs = static_cast<const C*>(csv);
  const std::int64_t half = rotary_dim / 2;
  if (style == RopeStyle::kNeox) {
    for (std::int64_t p = 0; p < half; ++p) {
      const RotatedPair r =
          rotate_pair(Format<In>::decode(x[p]), Format<In>::decode(x[p + half]),
                      Format<Cos>::decode(cs[p]), Format<Cos>::decode(cs[half + p]));
      y[p] = store_value<Out>(r.y, scale);
      y[p + half] = store_value<Out>(r.yp, scale);
    }
  } else {
    for (std::int64_t p = 0; p < half; ++p) {
      const RotatedPair r =
          rotate_pair(Format<In>::decode(x[2 * p]), Format<In>::decode(x[2 * p + 1]),
                      Format<Cos>::decode(cs[p]), Format<Cos>::decode(cs[half + p]));
      y[2 * p] = store_value<Out>(r.y, scale);
      y[2 * p + 1] = store_value<Out>(r.yp, scale);
    }
  }
}

template <DType In, DType Out>
void copy_row(const void* xv, void* yv, std::int64_t n, ScaleDivisor scale) {
  using I = typename Format<In>::storage;
  using O = typename Format<Out>::storage;
  const I* __restrict__ x = static_cast<const I*>(xv);
  O* __restrict__ y = static_cast<O*>(yv);
  for (std::int64_t i = 0; i < n; ++i) y[i] = store_value<Out>(Format<In>::decode(x[i]), scale);
}

struct RowFns {
  RopeRowFn q_rope, k_rope;
  CopyRowFn q_copy, kv_copy;
};

RowFns select_rows(const LaunchParams& p) {
  RowFns fns{};
  dispatch_input(p.in_dtype, [&](auto in) {
    dispatch_input(p.cos_dtype, [&](auto cos) {
      dispatch_output(p.q_out_dtype, [&](auto out) {
        fns.q_rope = &rope_row<decltype(in)::value, decltype(out)::value, decltype(cos)::value>;
      });
      dispatch_output(p.cache_dtype, [&](auto out) {
        fns.k_rope = &rope_row<decltype(in)::value, decltype(out)::value, decltype(cos)::value>;
      });
    });
    dispatch_output(p.q_out_dtype, [&](auto out) {
      fns.q_copy = &copy_row<decltype(in)::value, decltype(out)::value>;
    });
    dispatch_output(p.cache_dtype, [&](auto out) {
      fns.kv_copy = &copy_row<decltype(in)::value, decltype(out)::value>;
    });
  });
  return fns;
}

char* elem(char* base, std::int64_t elem_size, std::int64_t offset) {
  return base + offset * elem_size;
}
const char* elem(const char* base, std::int64_t elem_size, std::int64_t offset) {
  return base + offset * elem_size;
}

// Runs one token: every q head, every k head, every v head.
void run_token(const LaunchParams& p, const RowFns& fns, ScaleDivisor qs, ScaleDivisor ks,
               ScaleDivisor vs,
               std::int64_t t) {
  const TokenPlan plan = plan_token(p, t);
  if (!plan.write) {
    if (plan.bad && p.skipped_tokens != nullptr) Kokkos::atomic_add(p.skipped_tokens, 1ull);
    return;
  }
  const char* cs = elem(p.cos_sin, p.cos_size, plan.pos * p.cos_row_stride);
  const std::int64_t in = p.in_size;
  for (std::int64_t h = 0; h < p.num_q_heads; ++h) {
    fns.q_rope(elem(p.q_rope.data, in, t * p.q_rope.token_stride + h * p.q_rope.head_stride),
               elem(p.q_rope_out.data, p.q_out_size,
                    t * p.q_rope_out.token_stride + h * p.q_rope_out.head_stride),
               cs, p.rotary_dim, p.style, qs);
    if (p.nope_dim > 0)
      fns.q_copy(elem(p.q_nope.data, in, t * p.q_nope.token_stride + h * p.q_nope.head_stride),
                 elem(p.q_nope_out.data, p.q_out_size,
                      t * p.q_nope_out.token_stride + h * p.q_nope_out.head_stride),
                 p.nope_dim, qs);
  }
  const std::int64_t cd = p.cache_size;
  for (std::int64_t h = 0; h < p.num_kv_heads; ++h) {
    fns.k_rope(elem(p.k_rope.data, in, t * p.k_rope.token_stride + h * p.k_rope.head_stride),
               elem(p.k_cache_rope.data, cd,
                    cache_offset(plan.page, plan.entry, h, p.k_cache_rope.stride)),
               cs, p.rotary_dim, p.style, ks);
    if (p.nope_dim > 0)
      fns.kv_copy(elem(p.k_nope.data, in, t * p.k_nope.token_stride + h * p.k_nope.head_stride),
                  elem(p.k_cache_nope.data, cd,
                       cache_offset(plan.page, plan.entry, h, p.k_cache_nope.stride)),
                  p.nope_dim, ks);
    if (p.v_dim > 0)
      fns.kv_copy(elem(p.v.data, in, t * p.v.token_stride + h * p.v.head_stride),
                  elem(p.v_cache.data, cd, cache_offset(plan.page, plan.entry, h, p.v_cache.stride)),
                  p.v_dim, vs);
  }
}

// The library initialises Kokkos on first use when the application has not,
// and finalises it at exit.
void ensure_kokkos() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!Kokkos::is_initialized()) {
      Kokkos::initialize();
      std::atexit([] {
        if (Kokkos::is_initialized()) Kokkos::finalize();
      });
    }
  });
}

bool host_available() noexcept { return true; }

Result host_launch(const LaunchParams& p) noexcept {
  try {
    ensure_kokkos();
    const RowFns fns = select_rows(p);
    const ScaleDivisor qs = make_divisor(p.q_scale_ptr ? *p.q_scale_ptr : p.q_scale);
    const ScaleDivisor ks = make_divisor(p.k_scale_ptr ? *p.k_scale_ptr : p.k_scale);
    const ScaleDivisor vs = make_divisor(p.v_scale_ptr ? *p.v_scale_ptr : p.v_scale);
    Kokkos::parallel_for(
        "ropekv::host::rope_quant_append",
        Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace, Kokkos::IndexType<std::int64_t>>(
            0, p.nnz),
        [=](std::int64_t t) { run_token(p, fns, qs, ks, vs, t); });
    Kokkos::DefaultHostExecutionSpace().fence();
  } catch (const std::exception& e) {
    return make_result(Status::kErrorLaunchFailed, "host backend failed: %s", e.what());
  } catch (...) {
    return make_result(Status::kErrorLaunchFailed, "host backend failed");
  }
  return Result{};
}

}  // namespace

const BackendOps kHostBackendOps = {Backend::kHost, &host_available, &host_launch};

}  // namespace detail
}  // namespace ropekv
