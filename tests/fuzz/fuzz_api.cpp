// Coverage-guided fuzzing of ropekv's public API (libFuzzer; run by
// scripts/fuzz.sh under AddressSanitizer and UndefinedBehaviorSanitizer,
// aborting on the first report).
//
// An input is a serialized call (Desc, fuzz_format.hpp): every field of
// Arguments as raw numbers (each view as arena + byte offset, dtype, rank,
// extents and strides; enums as raw int32; scales; checked mode), then bytes
// for the index arena. The harness lays the views over nine arenas, each between two
// inaccessible (PROT_NONE) pages and filled with a known pattern, calls
// validate() and run() on the host backend, and aborts (a finding) unless:
//   1. run() returns what validate() returned, status and message;
//   2. a rejected call changed no byte of any arena;
//   3. an accepted call uses no view whose span (computed here in 128 bits)
//      reaches 2^63 bytes, no null view with elements, no output element
//      shared with another output element or an input element;
//   4. an accepted call that was run changed only bytes of its output
//      elements and of the checked-mode counter;
//   4b. where the test oracle (tests/oracle.hpp, an independent definition of
//      the op) applies to a call that was run, every element it names holds
//      the float32 formula's code, inside the oracle's bound; no other byte
//      changed, and the checked-mode counter grew by the oracle's count of
//      bad tokens. It applies when the call names at most kOracleMaxElements
//      elements and every input value keeps the op's float32 products and
//      quotients normal, as the oracle's bounds assume (most fill seeds give
//      such values; see fill_bits);
//   5. an accepted call prepared (PreparedCall), then stepped twice with
//      arguments that differ from the step before only in what a step may
//      change (a view's data moved or set to another's, the token count, or
//      nothing, as the input's seed picks), given as whole arguments and as
//      ropekv::Step, returns what validate() returns for each, writes nothing
//      when rejected, and writes what run() writes when accepted.
// Accepted calls that the library need not survive are validated but not
// run: views reaching outside their arena (the caller's memory is the
// caller's business) and unchecked calls with an index out of range (only
// checked mode guards indices, which may live in device memory).
//
// At exit the harness prints how many inputs were validated, accepted, run
// and checked against the oracle; scripts/fuzz.sh fails when too few were.
//
// The structure-aware mutator and the seed corpus writer (built with
// ROPEKV_FUZZ_WRITE_SEEDS) are in fuzz_inputs.cpp.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_format.hpp"
#include "oracle.hpp"
#include "ropekv/ropekv.hpp"

using namespace ropekv_fuzz;  // the input format (fuzz_format.hpp)

namespace {

[[maybe_unused]] ropekv::Scale* scale_field(Arguments& a, int i) {
  return i == 0 ? &a.q_scale : (i == 1 ? &a.k_scale : &a.v_scale);
}

#if !defined(ROPEKV_FUZZ_WRITE_SEEDS)

namespace orc = ropekv_oracle;

// The harness's own byte loops: not coverage feedback (their comparisons
// say nothing about the library), and instrumented they halve the speed.
#define ROPEKV_FUZZ_NO_COVERAGE __attribute__((no_sanitize("coverage")))

// What happened to the inputs, printed at exit (scripts/fuzz.sh reads it).
struct Counts {
  long long validated = 0, accepted = 0, run = 0, oracle_checked = 0;
  long long oracle_large = 0, oracle_values = 0;  // run, but not checked by the oracle: why
};
Counts counts;
void print_counts() {
  std::fprintf(stderr,
               "ropekv fuzz: counts: validated %lld accepted %lld run %lld oracle_checked %lld "
               "(run but not oracle-checked: %lld too large, %lld with values outside the "
               "oracle's range)\n",
               counts.validated, counts.accepted, counts.run, counts.oracle_checked,
               counts.oracle_large, counts.oracle_values);
}

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "ropekv fuzz: FINDING: %s: %s\n", what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

// ------------------------------------------------------------------ arenas
// [PROT_NONE page][arena 0][PROT_NONE page][arena 1] ... [arena 8][PROT_NONE page].
struct Arenas {
  unsigned char* base[kArenas];
  std::vector<unsigned char> pattern[kArenas];  // what each arena holds before a call
  // One mapping, an inaccessible page before each arena and after the last:
  // the arenas lie at the same distances from each other in every process, so
  // whether a view reaching out of its arena meets another call's view (the
  // overlap check) does not change between a run and the replay of a finding.
  Arenas() {
    const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
    const std::size_t step = page + kArenaBytes;
    void* m = mmap(nullptr, kArenas * step + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) std::abort();
    unsigned char* p = static_cast<unsigned char*>(m);
    for (int i = 0; i <= kArenas; ++i)
      if (mprotect(p + std::size_t(i) * step, page, PROT_NONE) != 0) std::abort();
    for (int i = 0; i < kArenas; ++i) {
      base[i] = p + std::size_t(i) * step + page;
      pattern[i].resize(kArenaBytes);
    }
  }
};
Arenas& arenas() {
  static Arenas a;
  return a;
}

// ------------------------------------------------------------------ 128-bit footprints
using i128 = __int128;

std::int64_t elem_size(DType d) { return std::int64_t(ropekv::size_of(d)); }

// A present view's elements as byte addresses [lo, hi), exact (128 bits,
// any strides); empty when a extent is zero.
struct Footprint {
  bool empty = true;
  i128 lo = 0, hi = 0;
  i128 elements = 0;
};
Footprint footprint(const TensorView& v) {
  Footprint f;
  if (v.rank < 1 || v.rank > 4) return f;
  i128 lo = 0, hi = 0, n = 1;
  for (int k = 0; k < v.rank; ++k) {
    if (v.extent[k] <= 0) return f;
    const i128 reach = i128(v.extent[k] - 1) * v.stride[k];
    (reach < 0 ? lo : hi) += reach;
    n *= v.extent[k];
  }
  const std::int64_t es = elem_size(v.dtype);
  if (es == 0) return f;
  const i128 addr = i128(reinterpret_cast<std::uintptr_t>(v.data));
  f.empty = false;
  f.lo = addr + lo * es;
  f.hi = addr + (hi + 1) * es;
  f.elements = n;
  return f;
}

// The arena [start, end) that holds [lo, hi), or -1.
int arena_of(i128 lo, i128 hi) {
  for (int i = 0; i < kArenas; ++i) {
    const i128 b = i128(reinterpret_cast<std::uintptr_t>(arenas().base[i]));
    if (lo >= b && hi <= b + i128(kArenaBytes)) return i;
  }
  return -1;
}

// Calls f(arena, byte offset) for every byte of every element of v (which
// lies inside one arena).
template <class F>
void for_each_byte(const TensorView& v, int arena, F&& f) {
  const std::int64_t es = elem_size(v.dtype);
  std::int64_t ext[4] = {1, 1, 1, 1}, str[4] = {0, 0, 0, 0};
  for (int k = 0; k < v.rank; ++k) {
    ext[4 - v.rank + k] = v.extent[k];
    str[4 - v.rank + k] = v.stride[k];
  }
  const std::int64_t base = std::int64_t(reinterpret_cast<std::uintptr_t>(v.data) -
                                         reinterpret_cast<std::uintptr_t>(arenas().base[arena]));
  for (std::int64_t i0 = 0; i0 < ext[0]; ++i0)
    for (std::int64_t i1 = 0; i1 < ext[1]; ++i1)
      for (std::int64_t i2 = 0; i2 < ext[2]; ++i2)
        for (std::int64_t i3 = 0; i3 < ext[3]; ++i3) {
          const std::int64_t e = i0 * str[0] + i1 * str[1] + i2 * str[2] + i3 * str[3];
          for (std::int64_t b = 0; b < es; ++b) f(arena, std::size_t(base + e * es + b));
        }
}

// ------------------------------------------------------------------ the call
struct Call {
  Arguments args;
  bool used[kViews] = {};  // the views an accepted call reads or writes
  bool output[kViews] = {};
};

Call decode(const Desc& d) {
  Call c;
  Arguments& a = c.args;
  a.kind = static_cast<ropekv::AttentionKind>(d.kind);
  a.rope_style = static_cast<ropekv::RopeStyle>(d.rope_style);
  a.cache_index.form = static_cast<ropekv::Addressing>(d.form);
  a.programmatic_dependent_launch = d.pdl & 1;
  for (int i = 0; i < kViews; ++i) {
    const ViewDesc& vd = d.view[i];
    TensorView* v = view_field(a, i);
    v->rank = vd.rank;
    v->dtype = static_cast<DType>(vd.dtype);
    for (int k = 0; k < 4; ++k) {
      v->extent[k] = vd.extent[k];
      v->stride[k] = vd.stride[k];
    }
    v->data =
        vd.arena < kArenas
            ? reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(arenas().base[vd.arena]) +
                                      std::uint64_t(vd.offset))
            : nullptr;
  }
  for (int i = 0; i < 3; ++i) {
    ropekv::Scale* s = scale_field(a, i);
    s->value = d.scale[i].value;
    s->convention = static_cast<ropekv::ScaleConvention>(d.scale[i].convention);
    if (d.scale[i].device_offset >= 0)
      s->device = reinterpret_cast<const float*>(
          arenas().base[kIndex] + std::size_t(d.scale[i].device_offset) % kArenaBytes);
  }
  a.checked.enabled = d.checked & 1;
  if (d.has_counter & 1)
    a.checked.skipped_tokens = reinterpret_cast<unsigned long long*>(
        arenas().base[kCounter] + std::size_t(std::uint32_t(d.counter_offset)) % kArenaBytes);
  // What an accepted call uses (see ropekv.hpp, Arguments).
  const bool mla = a.kind == ropekv::AttentionKind::kMla;
  const bool slots = a.cache_index.form == ropekv::Addressing::kSlotMapping;
  const bool nope = a.q_nope.present() || a.k_nope.present() || a.q_nope_out.present() ||
                    a.k_cache_nope.present();
  const bool used[kViews] = {true, nope, true, nope,  !mla,   true,   nope,   true,  nope,
                             !mla, true, true, slots, !slots, !slots, !slots, !slots};
  for (int i = 0; i < kViews; ++i) {
    c.used[i] = used[i];
    c.output[i] = i >= 5 && i <= 9;
  }
  return c;
}

// Reads index i of a 1-D int32/int64 view inside the arenas; false when it
// lies outside them.
bool read_index(const TensorView& v, std::int64_t i, std::int64_t* out) {
  if (i < 0 || i >= v.extent[0]) return false;
  const std::int64_t es = elem_size(v.dtype);
  const i128 at = i128(reinterpret_cast<std::uintptr_t>(v.data)) + i128(i) * v.stride[0] * es;
  if (arena_of(at, at + es) < 0) return false;
  const void* p = reinterpret_cast<const void*>(std::uintptr_t(at));
  if (es == 8) {
    std::memcpy(out, p, 8);
  } else {
    std::int32_t x;
    std::memcpy(&x, p, 4);
    *out = x;
  }
  return true;
}

// Every token's indices in range (the addressing rules of ropekv.hpp,
// CacheIndex, written here independently).
bool indices_in_range(const Arguments& a) {
  const ropekv::CacheIndex& ci = a.cache_index;
  const std::int64_t nnz = a.q_rope.extent[0], ps = a.k_cache_rope.extent[1],
                     pages = a.k_cache_rope.extent[0], max_pos = a.cos_sin_cache.extent[0];
  for (std::int64_t t = 0; t < nnz; ++t) {
    std::int64_t key = 0, page = 0, pos = 0;
    if (ci.form == ropekv::Addressing::kSlotMapping) {
      if (!read_index(ci.slot_mapping, t, &key)) return false;
      if (key < 0) continue;
      page = key / ps;
    } else {
      if (!read_index(ci.batch_indices, t, &key)) return false;
      if (key < 0) continue;
      std::int64_t kv_pos = 0, begin = 0, end = 0;
      if (key >= ci.kv_indptr.extent[0] - 1 || !read_index(ci.kv_positions, t, &kv_pos) ||
          kv_pos < 0 || !read_index(ci.kv_indptr, key, &begin) ||
          !read_index(ci.kv_indptr, key + 1, &end))
        return false;
      const i128 j = i128(begin) + kv_pos / ps;
      if (begin < 0 || j >= end || j >= ci.kv_indices.extent[0] ||
          !read_index(ci.kv_indices, std::int64_t(j), &page))
        return false;
    }
    if (!read_index(a.positions, t, &pos)) return false;
    if (page < 0 || page >= pages || pos < 0 || pos >= max_pos) return false;
  }
  return true;
}

std::string describe(const ropekv::Result& r) {
  return std::string(ropekv::to_string(r.status)) + ": " + r.message;
}

// Whether every view an accepted call uses, its counter and its device
// scales lie inside the arenas (the caller's memory is the caller's business).
bool in_arenas(Call c) {  // a copy: view_field takes the arguments writable
  Arguments& a = c.args;
  for (int i = 0; i < kViews; ++i) {
    if (!c.used[i]) continue;
    const Footprint f = footprint(*view_field(a, i));
    if (!f.empty && arena_of(f.lo, f.hi) < 0) return false;
  }
  const unsigned char* counter = reinterpret_cast<const unsigned char*>(a.checked.skipped_tokens);
  if (a.checked.enabled && counter != nullptr &&
      counter + 8 > arenas().base[kCounter] + kArenaBytes)
    return false;
  for (int i = 0; i < 3; ++i) {
    const float* p = scale_field(a, i)->device;
    if (p != nullptr &&
        reinterpret_cast<const unsigned char*>(p) + 4 > arenas().base[kIndex] + kArenaBytes)
      return false;
  }
  return true;
}
// Whether an accepted call may be run here: in the arenas, and its indices
// in range unless checked mode guards them.
bool runnable(const Call& c) {
  return in_arenas(c) && (c.args.checked.enabled || indices_in_range(c.args));
}

void reset_arenas() {
  for (int i = 0; i < kArenas; ++i)
    std::memcpy(arenas().base[i], arenas().pattern[i].data(), kArenaBytes);
}
std::vector<unsigned char> arena_bytes() {
  std::vector<unsigned char> all;
  for (int i = 0; i < kArenas; ++i)
    all.insert(all.end(), arenas().base[i], arenas().base[i] + kArenaBytes);
  return all;
}

// A step from c that the seed picks (property 5).
Call step_from(const Call& c, std::uint64_t seed) {
  Call step = c;
  Arguments& b = step.args;
  std::uint64_t x = mix(seed ^ 0x5e9);
  const int view = int(x % kViews);
  TensorView* moved = view_field(b, view);
  x = mix(x);
  switch (x % 4) {
    case 0: {  // a view's data moved: whole 16-byte units, or by one byte (misaligned)
      const std::int64_t delta = (x >> 8) % 2 ? std::int64_t((x >> 16) % 9) * 16 - 64 : 1;
      if (moved->data != nullptr) moved->data = static_cast<unsigned char*>(moved->data) + delta;
      break;
    }
    case 1: {  // another token count (extent 0 of the present per-token views)
      const std::int64_t n = std::int64_t((x >> 8) % std::uint64_t(b.q_rope.extent[0] + 3));
      for (TensorView* v : {&b.q_rope, &b.q_nope, &b.k_rope, &b.k_nope, &b.v, &b.q_rope_out,
                            &b.q_nope_out, &b.positions, &b.cache_index.slot_mapping,
                            &b.cache_index.batch_indices, &b.cache_index.kv_positions})
        if (v->present()) v->extent[0] = n;
      break;
    }
    case 2:  // a view's data set to another's (outputs over each other or an input)
      moved->data = view_field(b, int((x >> 8) % kViews))->data;
      break;
    default: break;  // the same arguments again
  }
  return step;
}

// Property 5 for an accepted call c: two steps in turn, each picked from the
// one before (the second from the first, accepted or not), so that a step
// also follows one that changed the plan's sizes or moved its data.
void check_prepared_steps(const Call& c, std::uint64_t seed) {
  const Call steps[2] = {step_from(c, seed), step_from(step_from(c, seed), mix(seed))};
  ropekv::Result want[2];
  bool run_step[2];
  std::vector<unsigned char> plain[2];
  for (int k = 0; k < 2; ++k) {
    const Arguments& b = steps[k].args;
    want[k] = ropekv::validate(b, ropekv::Backend::kHost);
    run_step[k] = want[k].ok() && runnable(steps[k]);
    if (run_step[k]) {
      reset_arenas();
      if (!ropekv::run(b, ropekv::Backend::kHost).ok())
        finding("run() failed after validate()", "");
      plain[k] = arena_bytes();
    }
  }
  for (const bool by_fields : {false, true}) {
    ropekv::PreparedCall call(ropekv::Backend::kHost);
    if (!call.prepare(c.args).ok()) finding("prepare() rejected an accepted call", "");
    for (int k = 0; k < 2; ++k) {
      if (want[k].ok() && !run_step[k]) break;  // accepted, but not ours to run
      const Arguments& b = steps[k].args;
      reset_arenas();
      const ropekv::Result got = by_fields ? call.run(ropekv::step_of(b)) : call.run(b);
      const std::string form =
          std::string(by_fields ? "PreparedCall::run(step_of(b))" : "PreparedCall::run(b)") +
          ", step " + std::to_string(k + 1);
      if (got.status != want[k].status || std::strcmp(got.message, want[k].message) != 0)
        finding("a prepared call's step and validate() disagree",
                form + ": " + describe(got) + " / " + describe(want[k]));
      if (!want[k].ok()) {
        for (int i = 0; i < kArenas; ++i)
          if (std::memcmp(arenas().base[i], arenas().pattern[i].data(), kArenaBytes) != 0)
            finding("a rejected step wrote", form + ", arena " + std::to_string(i));
      } else if (arena_bytes() != plain[k]) {
        finding("a prepared call's step wrote other bytes than run()", form);
      }
    }
  }
}

// ------------------------------------------------------------------ the oracle (4b)
// Elements a call may name before the oracle is skipped (its cost grows
// with them; the arenas bound the outputs, not the tokens that reach them).
constexpr i128 kOracleMaxElements = i128(1) << 17;

// Eight bytes of the fill from 64 random bits x. For fill seeds not
// divisible by 8, each 16-bit word (little-endian, so also an fp32's upper
// half) gets a bf16/fp32 exponent within 2^-31..2^32 (fp16: 2^-3..2^4), and
// one group in 64 has one word +-inf or NaN; the oracle's bounds hold for
// such values. Else the raw bits: any value, float32 overflow included.
ROPEKV_FUZZ_NO_COVERAGE std::uint64_t fill_bits(std::uint64_t x, bool raw) {
  if (raw) return x;
  constexpr std::uint64_t kSignMantissa = 0x807F807F807F807Full, kSix = 0x003F003F003F003Full;
  // Per word: sign and mantissa kept, exponent 96 + 6 random bits (no carry
  // leaves the word).
  std::uint64_t y = (x & kSignMantissa) | ((((x >> 7) & kSix) + 0x0060006000600060ull) << 7);
  // Bits 13 and 14 of each word are unused above: 6 of them pick the group.
  if (((x >> 13) & 3) == 3 && ((x >> 29) & 3) == 3 && ((x >> 45) & 3) == 3) {
    const int word = int((x >> 61) & 3);
    const std::uint64_t special = (x >> (16 * word)) & 1 ? 0x7fc1u : 0x7f80u;  // NaN or inf
    y = (y & ~(0x7fffull << (16 * word))) | (special << (16 * word));
  }
  return y;
}

// Whether the input bytes of view v, read as its dtype at every element
// position of its footprint, are values for which the oracle's bounds hold:
// zero, non-finite, or of magnitude within 2^-32..2^34, so that with scales
// within 2^-8..2^8 no float32 product, sum or quotient of the op leaves the
// normal range (a cancelling sum is 0 or at least 2^-110).
ROPEKV_FUZZ_NO_COVERAGE bool oracle_values(const TensorView& v) {
  if (!v.present()) return true;
  const Footprint f = footprint(v);
  if (f.empty) return true;
  const std::int64_t es = elem_size(v.dtype);
  const int bits = int(es) * 8;
  for (i128 at = f.lo; at < f.hi; at += es) {  // every element lies at f.lo + k * es
    const double x = orc::decode(
        v.dtype, orc::load_code(reinterpret_cast<const unsigned char*>(std::uintptr_t(at)), bits));
    if (std::isfinite(x) && x != 0 && (std::fabs(x) < 0x1p-32 || std::fabs(x) > 0x1p34))
      return false;
  }
  return true;
}
// Whether the oracle may read scale s (it reads each one the call's kind
// has, as a float: 4-byte aligned) and, for an FP8 output, whether its value
// lies within 2^-8..2^8.
bool oracle_scale(const ropekv::Scale& s, bool fp8) {
  if (s.device != nullptr && reinterpret_cast<std::uintptr_t>(s.device) % 4 != 0) return false;
  if (!fp8) return true;
  const double x = s.device != nullptr ? double(*s.device) : double(s.value);
  return std::fabs(x) >= 0x1p-8 && std::fabs(x) <= 0x1p8;
}

std::int64_t last_extent(const TensorView& v) { return v.present() ? v.extent[v.rank - 1] : 0; }

enum class OracleUse { kChecks, kTooLarge, kValues };
const char* to_string(OracleUse u) {
  return u == OracleUse::kChecks ? "checks" : (u == OracleUse::kTooLarge ? "too large" : "values");
}

// Whether the oracle applies to a runnable call c, and if not, why.
OracleUse oracle_use(const Call& c) {
  const Arguments& a = c.args;
  const bool mla = a.kind == ropekv::AttentionKind::kMla;
  const i128 per_token = i128(a.q_rope.extent[1]) * (a.q_rope.extent[2] + last_extent(a.q_nope)) +
                         i128(a.k_rope.extent[1]) * (a.k_rope.extent[2] + last_extent(a.k_nope) +
                                                     (mla ? 0 : last_extent(a.v)));
  if (i128(a.q_rope.extent[0]) * per_token > kOracleMaxElements) return OracleUse::kTooLarge;
  for (const TensorView* v : {&a.q_rope, &a.q_nope, &a.k_rope, &a.k_nope, &a.cos_sin_cache})
    if (!oracle_values(*v)) return OracleUse::kValues;
  if (!mla && !oracle_values(a.v)) return OracleUse::kValues;
  const bool q_fp8 = orc::is_fp8(a.q_rope_out.dtype), c_fp8 = orc::is_fp8(a.k_cache_rope.dtype);
  if (!oracle_scale(a.q_scale, q_fp8) || !oracle_scale(a.k_scale, c_fp8) ||
      (!mla && !oracle_scale(a.v_scale, c_fp8)))
    return OracleUse::kValues;
  return OracleUse::kChecks;
}

std::string hex(std::uint32_t code) {
  char b[16];
  std::snprintf(b, sizeof(b), "0x%x", code);
  return b;
}

// Property 4b, after run(): ref is the oracle's reference computed before it.
ROPEKV_FUZZ_NO_COVERAGE void check_with_oracle(const Call& c, const orc::Reference& ref) {
  Arenas& ar = arenas();
  // An element must hold the float32 formula's code within the oracle's
  // bounds (ExpectedElement::matches). Tokens that share a cache entry (a
  // caller error validation cannot see) leave one of their values: the entry
  // passes when it matches one of its address's elements.
  std::vector<std::size_t> order(ref.elements.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return ref.elements[x].address < ref.elements[y].address;
  });
  std::vector<std::vector<bool>> named(kArenas, std::vector<bool>(kArenaBytes, false));
  for (std::size_t g = 0; g < order.size();) {
    std::size_t end = g;
    const orc::ExpectedElement& e = ref.elements[order[g]];
    while (end < order.size() && ref.elements[order[end]].address == e.address) ++end;
    const int bytes = orc::bits_of(e.dtype) / 8;
    const i128 at = i128(reinterpret_cast<std::uintptr_t>(e.address));
    const int arena = arena_of(at, at + bytes);
    if (arena < 0) finding("the oracle named an element outside the arenas", e.describe());
    const std::size_t off = std::size_t(e.address - ar.base[arena]);
    for (int k = 0; k < bytes; ++k) named[std::size_t(arena)][off + std::size_t(k)] = true;
    const std::uint32_t code = orc::load_code(e.address, orc::bits_of(e.dtype));
    bool allowed = false;
    for (std::size_t k = g; k < end && !allowed; ++k)
      allowed = ref.elements[order[k]].matches(code);
    if (!allowed)
      finding("an output element outside the oracle's bounds or not the float32 formula's code",
              e.describe() + "; library wrote " + hex(code) +
                  (end - g > 1 ? " (" + std::to_string(end - g) + " tokens share it)" : ""));
    g = end;
  }
  const Arguments& a = c.args;
  std::size_t counter = kArenaBytes;  // the counter's offset, if checked mode has one
  if (a.checked.enabled && a.checked.skipped_tokens != nullptr) {
    counter =
        std::size_t(reinterpret_cast<unsigned char*>(a.checked.skipped_tokens) - ar.base[kCounter]);
    unsigned long long before, after;
    std::memcpy(&before, ar.pattern[kCounter].data() + counter, 8);
    std::memcpy(&after, ar.base[kCounter] + counter, 8);
    if (after - before != static_cast<unsigned long long>(ref.bad_tokens))
      finding("the checked-mode counter disagrees with the oracle",
              "grew by " + std::to_string(after - before) + ", the oracle counts " +
                  std::to_string(ref.bad_tokens) + " bad tokens");
  }
  for (int i = 0; i < kArenas; ++i)
    for (std::size_t k = 0; k < kArenaBytes; ++k)
      if (ar.base[i][k] != ar.pattern[i][k] && !named[std::size_t(i)][k] &&
          !(i == kCounter && k >= counter && k < counter + 8))
        finding("an accepted call wrote a byte the oracle does not name",
                "arena " + std::to_string(i) + " byte " + std::to_string(k));
}

// Inputs from the seed, the index arena from the input's tail, outputs a pattern.
ROPEKV_FUZZ_NO_COVERAGE void fill_arenas(std::uint32_t fill_seed) {
  Arenas& ar = arenas();
  const bool raw = fill_seed % 8 == 0;
  for (int i = 0; i < kArenas; ++i) {
    if (i == kIndex) continue;
    std::uint64_t x = mix(fill_seed * 16ull + std::uint64_t(i));
    for (std::size_t k = 0; k < kArenaBytes; k += 8) {
      x = mix(x);
      const std::uint64_t y = fill_bits(x, raw);
      std::memcpy(&ar.pattern[i][k], &y, 8);
    }
    std::memcpy(ar.base[i], ar.pattern[i].data(), kArenaBytes);
  }
  std::memcpy(ar.base[kIndex], ar.pattern[kIndex].data(), kArenaBytes);
}

void check_call(const Desc& d) {
  Arenas& ar = arenas();
  fill_arenas(d.fill_seed);

  Call c = decode(d);
  const Arguments& a = c.args;
  const ropekv::Result v = ropekv::validate(a, ropekv::Backend::kHost);
  ++counts.validated;
  static const bool verbose = std::getenv("ROPEKV_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "ropekv fuzz: validate: %s\n", describe(v).c_str());
  if (!v.ok()) {
    const ropekv::Result r = ropekv::run(a, ropekv::Backend::kHost);
    if (r.status != v.status || std::strcmp(r.message, v.message) != 0)
      finding("run() and validate() disagree", describe(v) + " / " + describe(r));
    for (int i = 0; i < kArenas; ++i)
      if (std::memcmp(ar.base[i], ar.pattern[i].data(), kArenaBytes) != 0)
        finding("a rejected call wrote", "arena " + std::to_string(i) + "; " + describe(v));
    return;
  }

  // ---- accepted: the views must be sound
  ++counts.accepted;
  const bool inside = in_arenas(c);
  std::vector<std::vector<std::uint8_t>> owner(kArenas, std::vector<std::uint8_t>(kArenaBytes, 0));
  constexpr i128 k2to63 = i128(1) << 63;
  for (int i = 0; i < kViews; ++i) {
    if (!c.used[i]) continue;
    const TensorView& view = *view_field(c.args, i);
    const Footprint f = footprint(view);
    if (f.empty) continue;
    if (view.data == nullptr) finding("accepted a null view with elements", kViewNames[i]);
    if (f.hi - f.lo >= k2to63)
      finding("accepted a view spanning 2^63 bytes or more", kViewNames[i]);
    const int arena = arena_of(f.lo, f.hi);
    if (arena < 0 || !c.output[i]) continue;
    // An output: its elements must be distinct and not another output's.
    if (f.elements * elem_size(view.dtype) > i128(kArenaBytes))
      finding("accepted an output view that overlaps itself", kViewNames[i]);
    for_each_byte(view, arena, [&](int ai, std::size_t off) {
      std::uint8_t& o = owner[std::size_t(ai)][off];
      if (o != 0)
        finding("accepted overlapping output elements",
                std::string(kViewNames[i]) + " meets " + kViewNames[o - 1]);
      o = std::uint8_t(i + 1);
    });
  }
  // Inputs must not share a byte with an output element.
  for (int i = 0; i < kViews && inside; ++i) {
    if (!c.used[i] || c.output[i]) continue;
    const TensorView& view = *view_field(c.args, i);
    const Footprint f = footprint(view);
    if (f.empty || f.elements > (1 << 18)) continue;  // (a big self-overlapping input: skipped)
    const int arena = arena_of(f.lo, f.hi);
    for_each_byte(view, arena, [&](int ai, std::size_t off) {
      const std::uint8_t o = owner[std::size_t(ai)][off];
      if (o != 0)
        finding("accepted an input overlapping an output",
                std::string(kViewNames[i]) + " meets " + kViewNames[o - 1]);
    });
  }
  if (a.checked.skipped_tokens != nullptr && a.checked.enabled) {
    const std::size_t off =
        std::size_t(reinterpret_cast<unsigned char*>(a.checked.skipped_tokens) - ar.base[kCounter]);
    for (std::size_t k = 0; k < 8 && off + 8 <= kArenaBytes; ++k) {
      if (owner[kCounter][off + k] != 0) finding("accepted a counter inside an output", "");
      owner[kCounter][off + k] = 0xff;
    }
  }
  // Outside the caller's memory, or garbage indices unchecked: not run.
  if (!runnable(c)) return;

  // The oracle's reference, from the inputs as run() will find them.
  const OracleUse use = oracle_use(c);
  orc::Reference ref;
  if (use == OracleUse::kChecks) {
    ref = orc::reference(a);
    if (!ref.error.empty()) finding("the oracle rejects a call that is run", ref.error);
  }

  // ---- run: only output elements and the counter may change
  if (verbose) std::fprintf(stderr, "ropekv fuzz: run (oracle: %s)\n", to_string(use));
  const ropekv::Result r = ropekv::run(a, ropekv::Backend::kHost);
  ++counts.run;
  if (!r.ok()) finding("run() failed after validate() accepted", describe(r));
  for (int i = 0; i < kArenas; ++i)
    for (std::size_t k = 0; k < kArenaBytes; ++k)
      if (ar.base[i][k] != ar.pattern[i][k] && owner[std::size_t(i)][k] == 0)
        finding("an accepted call wrote outside its output views",
                "arena " + std::to_string(i) + " byte " + std::to_string(k));
  if (use == OracleUse::kChecks) {
    check_with_oracle(c, ref);
    ++counts.oracle_checked;
  } else {
    ++(use == OracleUse::kTooLarge ? counts.oracle_large : counts.oracle_values);
  }
  check_prepared_steps(c, d.fill_seed);
}

#endif  // !ROPEKV_FUZZ_WRITE_SEEDS

}  // namespace

#if !defined(ROPEKV_FUZZ_WRITE_SEEDS)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < sizeof(Desc)) return -1;  // not a call: not added to the corpus
  static const bool registered = std::atexit(print_counts) == 0;
  (void)registered;
  Desc d;
  std::memcpy(&d, data, sizeof(Desc));
  // The index arena: the input's tail, then zeros.
  Arenas& ar = arenas();
  std::vector<unsigned char>& idx = ar.pattern[kIndex];
  const std::size_t tail = std::min(size - sizeof(Desc), kArenaBytes);
  std::memcpy(idx.data(), data + sizeof(Desc), tail);
  std::memset(idx.data() + tail, 0, kArenaBytes - tail);
  check_call(d);
  return 0;
}

#endif  // !ROPEKV_FUZZ_WRITE_SEEDS
