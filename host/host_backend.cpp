// The host backend: Kokkos over DefaultHostExecutionSpace (serial with
// Debian's Kokkos, parallel with a user's OpenMP/Threads build; with a serial
// space a large call is split over std::threads here, see "threads" below).
// It is the reference that every device backend is checked against bit for
// bit, and a real CPU fallback: the per-row loops are branch-free and
// vectorise.
//
// Speed (x86-64 with GCC): the row loops are compiled three times, for
// x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the baseline, and the best
// one the CPU supports is picked at run time, so the library stays portable
// (no -march needed) yet the explicit fmaf of the RoPE and the quantization
// step become vector FMAs instead of libm calls (and the division by the
// scale a vector divide: apply_scale). None of this changes a
// result: the element math is the shared definition in
// core/detail/element_math.hpp, compiled without contraction or fast-math.

#if defined(__GNUC__) && !defined(__clang__)
// Value-preserving: with the default -ftrapping-math GCC may not speculate
// float operations feeding a select (as in f16_to_f32), turns such selects
// into branches and vectorises nothing below AVX-512 (which has masked ops). No
// trap is ever enabled here, and no result depends on this flag (it allows
// neither contraction nor reassociation; division stays IEEE). Placed before
// the includes so that the shared inline math compiled in this file carries
// it too (GCC inlines only between functions of matching flags).
#pragma GCC optimize("no-trapping-math")
#endif

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>
#if defined(__linux__)
#include <sched.h>
#endif

#include "backends/backend.hpp"
#include "detail/dispatch.hpp"
#include "detail/element_math.hpp"
#include "detail/host_threads.hpp"
#include "detail/lower.hpp"
#include "detail/params.hpp"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ROPEKV_HOST_MULTI_ISA 1
#define ROPEKV_HOST_TARGET_V4 __attribute__((target("arch=x86-64-v4"), flatten))
#define ROPEKV_HOST_TARGET_V3 __attribute__((target("arch=x86-64-v3"), flatten))
#else
#define ROPEKV_HOST_MULTI_ISA 0
#endif
#if defined(__GNUC__) || defined(__clang__)
#define ROPEKV_HOST_INLINE __attribute__((always_inline)) inline
#define ROPEKV_HOST_TARGET_BASE __attribute__((flatten))
#define ROPEKV_RESTRICT __restrict__
#else
#define ROPEKV_HOST_INLINE inline
#define ROPEKV_HOST_TARGET_BASE
#define ROPEKV_RESTRICT
#endif

namespace ropekv {
namespace detail {
namespace {

// One head row: rotary part. x and the cos/sin row are read, y written.
using RopeRowFn = void (*)(const void* x, void* y, const void* cos_sin, std::int64_t rotary_dim,
                           RopeStyle style, ScaleDivisor scale);
// One head row: pass-through part (non-rotary q/k, value).
using CopyRowFn = void (*)(const void* x, void* y, std::int64_t n, ScaleDivisor scale);

// ---------------------------------------------------------------- row bodies
// Written once; each instruction set below gets its own inlined copy. kR is
// the rotary dim when known at compile time (the fast path), else 0.
template <DType In, DType Out, DType Cos, int kR = 0>
ROPEKV_HOST_INLINE void rope_row(const void* xv, void* yv, const void* csv, std::int64_t rotary_dim,
                                 RopeStyle style, ScaleDivisor scale) {
  using I = typename Format<In>::storage;
  using O = typename Format<Out>::storage;
  using C = typename Format<Cos>::storage;
  const I* ROPEKV_RESTRICT x = static_cast<const I*>(xv);
  O* ROPEKV_RESTRICT y = static_cast<O*>(yv);
  // A compile-time trip count with an int index vectorises best.
  using Index = std::conditional_t<(kR > 0), int, std::int64_t>;
  const Index half = kR > 0 ? Index(kR / 2) : Index(rotary_dim / 2);
  const C* ROPEKV_RESTRICT c = static_cast<const C*>(csv);  // cos, then sin at + half
  const C* ROPEKV_RESTRICT s = c + half;
  if (style == RopeStyle::kNeox) {
    // x1 / y1 name the second half-row: every stream is unit-stride.
    const I* ROPEKV_RESTRICT x1 = x + half;
    O* ROPEKV_RESTRICT y1 = y + half;
    for (Index p = 0; p < half; ++p) {
      const RotatedPair r = rotate_pair(Format<In>::decode(x[p]), Format<In>::decode(x1[p]),
                                        Format<Cos>::decode(c[p]), Format<Cos>::decode(s[p]));
      y[p] = store_value<Out>(r.y, scale);
      y1[p] = store_value<Out>(r.yp, scale);
    }
  } else {
    for (Index p = 0; p < half; ++p) {
      const RotatedPair r =
          rotate_pair(Format<In>::decode(x[2 * p]), Format<In>::decode(x[2 * p + 1]),
                      Format<Cos>::decode(c[p]), Format<Cos>::decode(s[p]));
      y[2 * p] = store_value<Out>(r.y, scale);
      y[2 * p + 1] = store_value<Out>(r.yp, scale);
    }
  }
}

// kN: the length when known at compile time (the fast path's value rows
// when Dv == R, the usual case), else 0 and n is used.
template <DType In, DType Out, int kN = 0>
ROPEKV_HOST_INLINE void copy_row(const void* xv, void* yv, std::int64_t n, ScaleDivisor scale) {
  using I = typename Format<In>::storage;
  using O = typename Format<Out>::storage;
  const I* ROPEKV_RESTRICT x = static_cast<const I*>(xv);
  O* ROPEKV_RESTRICT y = static_cast<O*>(yv);
  if constexpr (kN > 0) {
    for (int i = 0; i < kN; ++i) y[i] = store_value<Out>(Format<In>::decode(x[i]), scale);
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = store_value<Out>(Format<In>::decode(x[i]), scale);
  }
}

// ---------------------------------------------------------------- fast token path
// The common case in one inlined body per token: FP8 output for q and cache
// alike, fp32 cos/sin table, a rotary dim known at compile time (64 or 128),
// one RoPE style. The cos/sin row is loaded once for all heads of the token,
// and every row loop has a constant trip count.
// Token t with its plan and the plan of token t + 1 (`next`, not written
// when t is the last token), both resolved once by fast_range. Tokens that
// checked mode skips are counted by the caller (see host_launch).
template <DType In, DType Out, RopeStyle Style, int R>
ROPEKV_HOST_INLINE void fast_token(const LaunchParams& p, const Divisors& d, std::int64_t t,
                                   const TokenPlan& plan, const TokenPlan& next) {
  using I = typename Format<In>::storage;
  using O = typename Format<Out>::storage;
  if (!plan.write) return;
#if defined(__GNUC__) || defined(__clang__)
  // Decode batches scatter tokens over random pages: ask for the next
  // token's cache lines now (with intent to write) so that their misses
  // overlap this token's work.
  if (next.write) {
    const std::int64_t kbytes = R * std::int64_t(sizeof(O)),
                       vbytes = p.v_dim * std::int64_t(sizeof(O));
    for (std::int64_t h = 0; h < p.num_kv_heads; ++h) {
      const char* kr = p.k_cache_rope.row(next.page, next.entry, h, sizeof(O));
      for (std::int64_t o = 0; o < kbytes; o += 64) __builtin_prefetch(kr + o, 1);
      if (vbytes > 0) {
        const char* vr = p.v_cache.row(next.page, next.entry, h, sizeof(O));
        for (std::int64_t o = 0; o < vbytes; o += 64) __builtin_prefetch(vr + o, 1);
      }
    }
  }
#else
  (void)next;
#endif
  const float* cs = reinterpret_cast<const float*>(p.cos_sin) + plan.pos * p.cos_row_stride;
  const std::int64_t n = p.nope_dim;
  // Each head's rotary then non-rotary part: the order of a [rope | nope]
  // head in memory, which the hardware prefetchers follow.
  constexpr std::int64_t kIn = sizeof(I), kOut = sizeof(O);
  for (std::int64_t h = 0; h < p.num_q_heads; ++h) {
    rope_row<In, Out, DType::kFloat32, R>(p.q_rope.row(t, h, kIn), p.q_rope_out.row(t, h, kOut),
                                          cs, R, Style, d.q);
    if (n > 0) copy_row<In, Out>(p.q_nope.row(t, h, kIn), p.q_nope_out.row(t, h, kOut), n, d.q);
  }
  for (std::int64_t h = 0; h < p.num_kv_heads; ++h) {
    rope_row<In, Out, DType::kFloat32, R>(p.k_rope.row(t, h, kIn),
                                          p.k_cache_rope.row(plan.page, plan.entry, h, kOut), cs,
                                          R, Style, d.k);
    if (n > 0)
      copy_row<In, Out>(p.k_nope.row(t, h, kIn), p.k_cache_nope.row(plan.page, plan.entry, h, kOut),
                        n, d.k);
  }
  if (p.v_dim > 0) {
    for (std::int64_t h = 0; h < p.num_kv_heads; ++h) {
      char* out = p.v_cache.row(plan.page, plan.entry, h, kOut);
      if (p.v_dim == R)
        copy_row<In, Out, R>(p.v.row(t, h, kIn), out, R, d.v);
      else
        copy_row<In, Out>(p.v.row(t, h, kIn), out, p.v_dim, d.v);
    }
  }
}

// Tokens [t0, t1) of the fast path: each token's plan is resolved once and
// handed to the token before it too (for its prefetch). Returns the number
// of tokens checked mode skipped.
template <DType In, DType Out, RopeStyle Style, int R>
ROPEKV_HOST_INLINE std::int64_t fast_range(const LaunchParams& p, const Divisors& d,
                                           std::int64_t t0, std::int64_t t1) {
  if (t0 >= t1) return 0;
  std::int64_t bad = 0;
  TokenPlan plan = plan_token(p, t0);
  for (std::int64_t t = t0; t < t1; ++t) {
    const TokenPlan next = t + 1 < p.nnz ? plan_token(p, t + 1) : TokenPlan{};
    fast_token<In, Out, Style, R>(p, d, t, plan, next);
    bad += plan.bad ? 1 : 0;
    plan = next;
  }
  return bad;
}

// Tokens [t0, t1) of the fast path, in one ISA-compiled function: no call
// per token or per row.
using RangeFn = std::int64_t (*)(const LaunchParams& p, const Divisors& d, std::int64_t t0,
                                 std::int64_t t1);

// ---------------------------------------------------------------- instruction sets
// Each struct holds out-of-line row functions compiled for one instruction
// set; `flatten` inlines the row body and the whole element math into them.
#define ROPEKV_HOST_ROW_FNS(TARGET)                                                            \
  template <DType In, DType Out, DType Cos>                                                    \
  TARGET static void rope(const void* x, void* y, const void* cs, std::int64_t rotary_dim,     \
                          RopeStyle style, ScaleDivisor scale) {                               \
    rope_row<In, Out, Cos>(x, y, cs, rotary_dim, style, scale);                                \
  }                                                                                            \
  template <DType In, DType Out>                                                               \
  TARGET static void copy(const void* x, void* y, std::int64_t n, ScaleDivisor scale) {        \
    copy_row<In, Out>(x, y, n, scale);                                                         \
  }                                                                                            \
  template <DType In, DType Out, RopeStyle Style, int R>                                       \
  TARGET static std::int64_t tokens(const LaunchParams& p, const Divisors& d, std::int64_t t0, \
                                    std::int64_t t1) {                                         \
    return fast_range<In, Out, Style, R>(p, d, t0, t1);                                        \
  }

// kFastPath: whether the fast token path is instantiated for this set (not for
// the baseline of x86-64, where fmaf is a library call whatever the loop).
struct IsaBase {
  static constexpr bool kFastPath = !ROPEKV_HOST_MULTI_ISA;
  ROPEKV_HOST_ROW_FNS(ROPEKV_HOST_TARGET_BASE)
};
#if ROPEKV_HOST_MULTI_ISA
struct IsaAvx2 {  // x86-64-v3: AVX2, FMA, BMI2
  static constexpr bool kFastPath = true;
  ROPEKV_HOST_ROW_FNS(ROPEKV_HOST_TARGET_V3)
};
struct IsaAvx512 {  // x86-64-v4: AVX-512 F/BW/CD/DQ/VL
  static constexpr bool kFastPath = true;
  ROPEKV_HOST_ROW_FNS(ROPEKV_HOST_TARGET_V4)
};
#endif
#undef ROPEKV_HOST_ROW_FNS

struct RowFns {
  RopeRowFn q_rope, k_rope;
  CopyRowFn q_copy, kv_copy;
};

// The cos/sin table is fp32 or the input dtype (validated).
template <class Isa>
RowFns select_rows(const LaunchParams& p) {
  RowFns fns{};
  dispatch<InputDTypes>(p.in.dtype, [&](auto in) {
    constexpr DType kIn = decltype(in)::value;
    auto pick_rope = [&](auto cos) {
      constexpr DType kCos = decltype(cos)::value;
      dispatch<OutputDTypes>(p.q_out.dtype, [&](auto out) {
        fns.q_rope = &Isa::template rope<kIn, decltype(out)::value, kCos>;
      });
      dispatch<OutputDTypes>(p.cache.dtype, [&](auto out) {
        fns.k_rope = &Isa::template rope<kIn, decltype(out)::value, kCos>;
      });
    };
    dispatch<DTypeList<kIn, DType::kFloat32>>(p.cos.dtype, pick_rope);
    dispatch<OutputDTypes>(p.q_out.dtype,
                           [&](auto out) { fns.q_copy = &Isa::template copy<kIn, decltype(out)::value>; });
    dispatch<OutputDTypes>(p.cache.dtype, [&](auto out) {
      fns.kv_copy = &Isa::template copy<kIn, decltype(out)::value>;
    });
  });
  return fns;
}

// The fast path's cases: FP8 query output and caches of one format, bf16 or
// fp16 inputs, an fp32 cos/sin table, R of 64 or 128.
using FastInputs = DTypeList<DType::kBFloat16, DType::kFloat16>;
using FastRotaryDims = ValueList<int, 64, 128>;

// The fast range function for `p`, or null when `p` is not a fast-path case.
template <class Isa>
RangeFn select_range(const LaunchParams& p) {
  if constexpr (Isa::kFastPath) {
    const bool fp8_out = p.q_out.dtype == p.cache.dtype && dtype_info(p.cache.dtype).quantized;
    const bool half_in = p.in.dtype == DType::kBFloat16 || p.in.dtype == DType::kFloat16;
    if (!fp8_out || !half_in || p.cos.dtype != DType::kFloat32 ||
        (p.rotary_dim != 64 && p.rotary_dim != 128))
      return nullptr;
    return dispatch<FastRotaryDims>(int(p.rotary_dim), [&](auto r) {
      return dispatch<FastInputs>(p.in.dtype, [&](auto in) {
        return dispatch<Fp8DTypes>(p.cache.dtype, [&](auto out) -> RangeFn {
          constexpr DType kIn = decltype(in)::value, kOut = decltype(out)::value;
          constexpr int kR = decltype(r)::value;
          return p.style == RopeStyle::kNeox
                     ? &Isa::template tokens<kIn, kOut, RopeStyle::kNeox, kR>
                     : &Isa::template tokens<kIn, kOut, RopeStyle::kInterleaved, kR>;
        });
      });
    });
  } else {
    (void)p;
    return nullptr;
  }
}

// What runs each token: a fast range function, else the row functions.
struct Kernel {
  RangeFn range = nullptr;
  RowFns rows{};
};

template <class Isa>
Kernel select_kernel(const LaunchParams& p) {
  Kernel k;
  k.range = select_range<Isa>(p);
  if (k.range == nullptr) k.rows = select_rows<Isa>(p);
  return k;
}

// For the widest instruction set this CPU (and OS) supports.
Kernel select_kernel_for_cpu(const LaunchParams& p) {
#if ROPEKV_HOST_MULTI_ISA
  static const int level = [] {
    __builtin_cpu_init();
    int l = __builtin_cpu_supports("x86-64-v4") ? 2 : __builtin_cpu_supports("x86-64-v3") ? 1 : 0;
    // For tests and measurements: ROPEKV_HOST_ISA=avx2|baseline lowers the
    // level (it never raises it above what the CPU supports).
    if (const char* env = std::getenv("ROPEKV_HOST_ISA")) {
      const std::string want(env);
      if (want == "baseline")
        l = 0;
      else if (want == "avx2" && l > 1)
        l = 1;
    }
    return l;
  }();
  if (level == 2) return select_kernel<IsaAvx512>(p);
  if (level == 1) return select_kernel<IsaAvx2>(p);
#endif
  return select_kernel<IsaBase>(p);
}

// Runs one token: every q head, every k head, every v head. Returns whether
// checked mode skipped it.
bool run_token(const LaunchParams& p, const RowFns& fns, const Divisors& d, std::int64_t t) {
  const TokenPlan plan = plan_token(p, t);
  if (!plan.write) return plan.bad;
  const char* cs = p.cos_sin + plan.pos * p.cos_row_stride * p.cos.bytes;
  const std::int64_t in = p.in.bytes, qo = p.q_out.bytes, cd = p.cache.bytes;
  for (std::int64_t h = 0; h < p.num_q_heads; ++h) {
    fns.q_rope(p.q_rope.row(t, h, in), p.q_rope_out.row(t, h, qo), cs, p.rotary_dim, p.style,
               d.q);
    if (p.nope_dim > 0)
      fns.q_copy(p.q_nope.row(t, h, in), p.q_nope_out.row(t, h, qo), p.nope_dim, d.q);
  }
  for (std::int64_t h = 0; h < p.num_kv_heads; ++h) {
    fns.k_rope(p.k_rope.row(t, h, in), p.k_cache_rope.row(plan.page, plan.entry, h, cd), cs,
               p.rotary_dim, p.style, d.k);
    if (p.nope_dim > 0)
      fns.kv_copy(p.k_nope.row(t, h, in), p.k_cache_nope.row(plan.page, plan.entry, h, cd),
                  p.nope_dim, d.k);
    if (p.v_dim > 0)
      fns.kv_copy(p.v.row(t, h, in), p.v_cache.row(plan.page, plan.entry, h, cd), p.v_dim, d.v);
  }
  return false;
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

// ---------------------------------------------------------------- threads
// Debian's Kokkos (and any Serial-only build) runs a parallel_for on the
// calling thread alone. The op is a few flops per byte, and on the host one
// core does not saturate memory with them, so a large call is then split
// into chunks of consecutive tokens run by std::threads, one per CPU the
// process may use. Each token is computed by the same code whatever thread runs it,
// and distinct tokens write distinct outputs (validation rejects overlapping
// outputs), so the results are the same bits for any thread count, in calls
// where no two tokens address one cache entry (a caller error: such an
// entry then holds bytes each written by one of those tokens). With a Kokkos whose host
// space is parallel (OpenMP, Threads) Kokkos does the splitting instead.

// Threads a large call uses when Kokkos' host space is serial:
// ROPEKV_HOST_THREADS=N (>= 1) if set, else the CPUs this process may run on.
int own_threads() {
  static const int n = [] {
    if (const char* env = std::getenv("ROPEKV_HOST_THREADS")) {
      const int v = std::atoi(env);
      if (v >= 1) return v;
    }
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
    return std::max(1, int(std::thread::hardware_concurrency()));
  }();
  return n;
}

// Below this many bytes of the byte model per call, a call runs on the
// calling thread: starting and joining a thread costs tens of microseconds,
// about what one core needs for this much data.
constexpr double kMinBytesForThreads = 2.0 * 1024 * 1024;

double model_bytes(const LaunchParams& p) {
  const double in = double(p.in.bytes), q_out = double(p.q_out.bytes), kv = double(p.cache.bytes);
  const double d = double(p.rotary_dim + p.nope_dim);
  const double per_token = double(p.num_q_heads) * d * (in + q_out) +
                           double(p.num_kv_heads) * (d + double(p.v_dim)) * (in + kv) +
                           double(p.rotary_dim) * double(p.cos.bytes);
  return per_token * double(p.nnz);
}

// Runs tokens [t0, t1) of one call; returns how many checked mode skipped.
std::int64_t run_range(const LaunchParams& p, const Kernel& kernel, const Divisors& d,
                       std::int64_t t0, std::int64_t t1) {
  if (kernel.range != nullptr) return kernel.range(p, d, t0, t1);
  std::int64_t bad = 0;
  for (std::int64_t t = t0; t < t1; ++t) bad += run_token(p, kernel.rows, d, t) ? 1 : 0;
  return bad;
}

Result host_launch(const LaunchParams& p) noexcept {
  try {
    ensure_kokkos();
    const Kernel kernel = select_kernel_for_cpu(p);
    const Divisors d = load_divisors(p);
    // Skipped tokens: each chunk counts its own and adds them once; the
    // caller's counter is updated by this thread after every chunk is done
    // (exact for any thread count, and written only when tokens were skipped).
    std::atomic<std::int64_t> bad{0};
    host_for_tokens(p, [&](std::int64_t t0, std::int64_t t1) {
      const std::int64_t n = run_range(p, kernel, d, t0, t1);
      if (n != 0) bad.fetch_add(n, std::memory_order_relaxed);
    });
    if (p.skipped_tokens != nullptr && bad.load() != 0)
      *p.skipped_tokens += static_cast<unsigned long long>(bad.load());
  } catch (const std::exception& e) {
    return make_result(Status::kErrorLaunchFailed, "host backend failed: %s", e.what());
  } catch (...) {
    return make_result(Status::kErrorLaunchFailed, "host backend failed");
  }
  return Result{};
}

}  // namespace

const BackendOps kHostBackendOps = {Backend::kHost, &host_available, &host_launch};

void host_for_tokens(const LaunchParams& p,
                     const std::function<void(std::int64_t, std::int64_t)>& body) {
  ensure_kokkos();
  using Space = Kokkos::DefaultHostExecutionSpace;
  if (Space::concurrency() > 1) {
    using Policy = Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>;
    Kokkos::parallel_for("ropekv::host::rope_quant_append", Policy(0, p.nnz),
                         [&body](std::int64_t t) { body(t, t + 1); });
    Space().fence();
    return;
  }
  // Serial host space: the calling thread and up to threads - 1 workers
  // take chunks of consecutive tokens from a shared counter until none is
  // left. Chunks rather than one fixed range per thread: on a shared
  // machine one core may be taken away for a while, and the other threads
  // then do its share instead of waiting for it. A worker that cannot be
  // started just leaves more chunks to the others.
  const int threads =
      model_bytes(p) < kMinBytesForThreads ? 1 : int(std::min<std::int64_t>(own_threads(), p.nnz));
  if (threads <= 1) {
    if (p.nnz > 0) body(0, p.nnz);
    return;
  }
  // About 16 chunks per thread, at most 64 tokens each (a few hundred
  // microseconds of work for the largest canonical shapes).
  const std::int64_t chunk =
      std::max<std::int64_t>(1, std::min<std::int64_t>(64, p.nnz / (16 * threads)));
  std::atomic<std::int64_t> next{0};
  auto work = [&p, &body, &next, chunk] {
    for (;;) {
      const std::int64_t t0 = next.fetch_add(chunk, std::memory_order_relaxed);
      if (t0 >= p.nnz) return;
      body(t0, std::min(p.nnz, t0 + chunk));
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(std::size_t(threads - 1));
  for (int i = 0; i + 1 < threads; ++i) {
    try {
      workers.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (std::thread& w : workers) w.join();
}

int host_backend_threads() noexcept {
  ensure_kokkos();
  const int kokkos = Kokkos::DefaultHostExecutionSpace::concurrency();
  return kokkos > 1 ? kokkos : own_threads();
}

}  // namespace detail
}  // namespace ropekv
