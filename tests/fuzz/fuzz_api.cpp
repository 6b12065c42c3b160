// Coverage-guided fuzzing of ropekv's public API (libFuzzer; run by
// scripts/fuzz.sh under AddressSanitizer and UndefinedBehaviorSanitizer,
// aborting on the first report).
//
// An input is a serialized call (Desc below): every field of Arguments as
// raw numbers (each view as arena + byte offset, dtype, rank, extents and
// strides; enums as raw int32; scales; checked mode), then bytes for the
// index arena. The harness lays the views over nine arenas, each between two
// inaccessible (PROT_NONE) pages and filled with a known pattern, calls
// validate() and run() on the host backend, and aborts (a finding) unless:
//   1. run() returns what validate() returned, status and message;
//   2. a rejected call changed no byte of any arena;
//   3. an accepted call uses no view whose span (computed here in 128 bits)
//      reaches 2^63 bytes, no null view with elements, no output element
//      shared with another output element or an input element;
//   4. an accepted call that was run changed only bytes of its output
//      elements and of the checked-mode counter.
// Accepted calls that the library need not survive are validated but not
// run: views reaching outside their arena (the caller's memory is the
// caller's business) and unchecked calls with an index out of range (only
// checked mode guards indices, which may live in device memory).
//
// Built with ROPEKV_FUZZ_WRITE_SEEDS it is instead a program that writes the
// seed corpus (one valid call of every layout and addressing form) to the
// directory given as its argument.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "argument_views.hpp"
#include "ropekv/ropekv.hpp"

namespace {

using ropekv::Arguments;
using ropekv::DType;
using ropekv::TensorView;

// ------------------------------------------------------------------ the input format
[[maybe_unused]] constexpr int kArenas = 9;
enum Arena : std::uint8_t {
  kQIn = 0,      // q (or a fused QKV buffer)
  kKIn = 1,      // k
  kVIn = 2,      // v
  kQOut = 3,     // query output
  kKCache = 4,   // K cache (or a stacked / MLA cache)
  kVCache = 5,   // V cache
  kCosSin = 6,   // cos/sin table
  kIndex = 7,    // positions, slots, page table, device scales
  kCounter = 8,  // checked-mode counter
  kNull = 255,   // a null data pointer
};
[[maybe_unused]] constexpr std::size_t kArenaBytes = 64 * 1024;  // a multiple of the page size

struct ViewDesc {       // 80 bytes
  std::int64_t offset;  // bytes from the arena's start (any value)
  std::int64_t extent[4];
  std::int64_t stride[4];
  std::int32_t dtype;  // raw DType
  std::uint8_t arena;  // Arena
  std::uint8_t rank;
  std::uint8_t unused[2];
};
struct ScaleDesc {  // 16 bytes
  float value;
  std::int32_t convention;     // raw ScaleConvention
  std::int32_t device_offset;  // < 0: host scale; else byte offset into the index arena
  std::int32_t unused;
};
constexpr int kViews = ropekv_test::kArgumentViews;
[[maybe_unused]] const char* const kViewNames[kViews] = {
    "q_rope",        "q_nope",      "k_rope",       "k_nope",       "v",
    "q_rope_out",    "q_nope_out",  "k_cache_rope", "k_cache_nope", "v_cache",
    "cos_sin_cache", "positions",   "slot_mapping", "kv_indices",   "kv_indptr",
    "batch_indices", "kv_positions"};
struct Desc {
  std::int32_t kind, rope_style, form;  // raw AttentionKind, RopeStyle, Addressing
  std::uint8_t checked, has_counter, pdl, unused;
  std::int32_t counter_offset;  // byte offset into the counter arena
  std::uint32_t fill_seed;      // input arenas' contents
  ScaleDesc scale[3];
  ViewDesc view[kViews];
};
static_assert(sizeof(ViewDesc) == 80 && sizeof(ScaleDesc) == 16, "packed layout");
static_assert(sizeof(Desc) == 24 + 48 + kViews * 80, "packed layout");

TensorView* view_field(Arguments& a, int i) {
  TensorView* v[ropekv_test::kArgumentViews];
  ropekv_test::argument_views(a, v);
  return v[i];
}
[[maybe_unused]] ropekv::Scale* scale_field(Arguments& a, int i) {
  return i == 0 ? &a.q_scale : (i == 1 ? &a.k_scale : &a.v_scale);
}

#if !defined(ROPEKV_FUZZ_WRITE_SEEDS)

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "ropekv fuzz: FINDING: %s: %s\n", what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

// ------------------------------------------------------------------ arenas
// Each arena: [PROT_NONE page][arena][PROT_NONE page].
struct Arenas {
  unsigned char* base[kArenas];
  std::vector<unsigned char> pattern[kArenas];  // what each arena holds before a call
  Arenas() {
    const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
    for (int i = 0; i < kArenas; ++i) {
      void* m = mmap(nullptr, kArenaBytes + 2 * page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) std::abort();
      unsigned char* p = static_cast<unsigned char*>(m);
      if (mprotect(p, page, PROT_NONE) != 0 ||
          mprotect(p + page + kArenaBytes, page, PROT_NONE) != 0)
        std::abort();
      base[i] = p + page;
      pattern[i].resize(kArenaBytes);
    }
  }
};
Arenas& arenas() {
  static Arenas a;
  return a;
}

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
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

void check_call(const Desc& d) {
  Arenas& ar = arenas();
  // Inputs from the seed, the index arena from the input's tail, outputs a pattern.
  for (int i = 0; i < kArenas; ++i) {
    if (i == kIndex) continue;
    std::uint64_t x = mix(d.fill_seed * 16ull + std::uint64_t(i));
    for (std::size_t k = 0; k < kArenaBytes; k += 8) {
      x = mix(x);
      std::memcpy(&ar.pattern[i][k], &x, 8);
    }
    std::memcpy(ar.base[i], ar.pattern[i].data(), kArenaBytes);
  }
  std::memcpy(ar.base[kIndex], ar.pattern[kIndex].data(), kArenaBytes);

  Call c = decode(d);
  const Arguments& a = c.args;
  const ropekv::Result v = ropekv::validate(a, ropekv::Backend::kHost);
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
  bool inside = true;
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
    if (arena < 0) {
      inside = false;
      continue;
    }
    if (!c.output[i]) continue;
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
    if (off + 8 > kArenaBytes) {
      inside = false;
    } else {
      for (std::size_t k = 0; k < 8; ++k) {
        if (owner[kCounter][off + k] != 0) finding("accepted a counter inside an output", "");
        owner[kCounter][off + k] = 0xff;
      }
    }
  }
  for (int i = 0; i < 3; ++i) {
    const float* p = scale_field(c.args, i)->device;
    if (p != nullptr &&
        reinterpret_cast<const unsigned char*>(p) + 4 > ar.base[kIndex] + kArenaBytes)
      inside = false;
  }
  if (!inside) return;  // views outside the caller's memory: not run
  if (!a.checked.enabled && !indices_in_range(a)) return;  // garbage indices, unchecked: not run

  // ---- run: only output elements and the counter may change
  if (verbose) std::fprintf(stderr, "ropekv fuzz: run\n");
  const ropekv::Result r = ropekv::run(a, ropekv::Backend::kHost);
  if (!r.ok()) finding("run() failed after validate() accepted", describe(r));
  for (int i = 0; i < kArenas; ++i)
    for (std::size_t k = 0; k < kArenaBytes; ++k)
      if (ar.base[i][k] != ar.pattern[i][k] && owner[std::size_t(i)][k] == 0)
        finding("an accepted call wrote outside its output views",
                "arena " + std::to_string(i) + " byte " + std::to_string(k));
}

#endif  // !ROPEKV_FUZZ_WRITE_SEEDS

}  // namespace

#if !defined(ROPEKV_FUZZ_WRITE_SEEDS)

// Structure-aware mutation: half the time one numeric field of the Desc is
// set to an interesting value or nudged; otherwise libFuzzer's own mutators.
extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size,
                                               std::size_t max_size, unsigned int seed) {
  std::uint64_t r = mix(seed);
  if (max_size < sizeof(Desc) || (r & 1) != 0) return LLVMFuzzerMutate(data, size, max_size);
  if (size < sizeof(Desc)) {
    std::memset(data + size, 0, sizeof(Desc) - size);
    size = sizeof(Desc);
  }
  static const std::int64_t kInteresting[] = {0,
                                              1,
                                              -1,
                                              2,
                                              3,
                                              7,
                                              16,
                                              64,
                                              4096,
                                              std::int64_t(1) << 31,
                                              std::int64_t(1) << 32,
                                              std::int64_t(1) << 62,
                                              (std::int64_t(1) << 62) + 1,
                                              INT64_MAX,
                                              INT64_MAX - 7,
                                              INT64_MIN,
                                              -(std::int64_t(1) << 62)};
  constexpr std::size_t kNum = sizeof(kInteresting) / sizeof(kInteresting[0]);
  r = mix(r);
  // One of a view's 9 int64 fields (offset, extents, strides), or a small field.
  const int view = int((r >> 8) % kViews);
  const int field = int((r >> 16) % 9);
  const std::size_t at =
      offsetof(Desc, view) + std::size_t(view) * sizeof(ViewDesc) + std::size_t(field) * 8;
  std::uint64_t x;  // unsigned: wraps instead of overflowing
  std::memcpy(&x, data + at, 8);
  switch ((r >> 24) % 4) {
    case 0: x = std::uint64_t(kInteresting[(r >> 32) % kNum]); break;
    case 1: x += (r >> 32) % 17 - 8; break;
    case 2: x = 0 - x; break;
    default: x ^= std::uint64_t(1) << ((r >> 32) % 64); break;
  }
  std::memcpy(data + at, &x, 8);
  if (((r >> 40) & 7) == 0) {  // sometimes a small field too: arena, rank, dtype or an enum
    const std::size_t small[] = {
        offsetof(Desc, view) + std::size_t(view) * sizeof(ViewDesc) + offsetof(ViewDesc, arena),
        offsetof(Desc, view) + std::size_t(view) * sizeof(ViewDesc) + offsetof(ViewDesc, rank),
        offsetof(Desc, view) + std::size_t(view) * sizeof(ViewDesc) + offsetof(ViewDesc, dtype),
        offsetof(Desc, kind),
        offsetof(Desc, form),
        offsetof(Desc, checked)};
    data[small[(r >> 44) % 6]] = std::uint8_t(mix(r) % 12);
  }
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < sizeof(Desc)) return -1;  // not a call: not added to the corpus
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

#else  // ROPEKV_FUZZ_WRITE_SEEDS: the seed corpus

namespace {

// Views are built with the public layout helpers over fake arena addresses
// (arena k at (k + 1) << 32) and turned into arena + offset.
void* fake(int arena) { return reinterpret_cast<void*>(std::uintptr_t(arena + 1) << 32); }

struct Seed {
  Desc d{};
  std::vector<unsigned char> index;  // the index arena's first bytes
  Arguments a;

  // Appends n int64 (or int32) values to the index arena; returns their view.
  TensorView indices(const std::vector<std::int64_t>& v, DType dt) {
    const std::size_t es = dt == DType::kInt64 ? 8 : 4;
    while (index.size() % 8 != 0) index.push_back(0);
    const std::size_t off = index.size();
    for (std::int64_t x : v) {
      unsigned char b[8];
      std::memcpy(b, &x, 8);  // little-endian: the low 4 bytes are the int32
      index.insert(index.end(), b, b + es);
    }
    return ropekv::make_vector(static_cast<unsigned char*>(fake(kIndex)) + off, dt,
                               std::int64_t(v.size()));
  }
  std::int32_t scale_slot(float v) {
    while (index.size() % 4 != 0) index.push_back(0);
    const std::size_t off = index.size();
    unsigned char b[4];
    std::memcpy(b, &v, 4);
    index.insert(index.end(), b, b + 4);
    return std::int32_t(off);
  }

  void finish(const char* dir, const char* name) {
    d.kind = std::int32_t(a.kind);
    d.rope_style = std::int32_t(a.rope_style);
    d.form = std::int32_t(a.cache_index.form);
    d.checked = a.checked.enabled ? 1 : 0;
    for (int i = 0; i < kViews; ++i) {
      const TensorView& v = *view_field(a, i);
      ViewDesc& vd = d.view[i];
      vd.rank = std::uint8_t(v.rank);
      vd.dtype = std::int32_t(v.dtype);
      for (int k = 0; k < 4; ++k) {
        vd.extent[k] = v.extent[k];
        vd.stride[k] = v.stride[k];
      }
      const std::uintptr_t p = reinterpret_cast<std::uintptr_t>(v.data);
      vd.arena = p == 0 ? kNull : std::uint8_t((p >> 32) - 1);
      vd.offset = std::int64_t(p & 0xffffffffu);
    }
    std::string path = std::string(dir) + "/seed-" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) {
      std::perror(path.c_str());
      std::exit(1);
    }
    std::fwrite(&d, sizeof(d), 1, f);
    std::fwrite(index.data(), 1, index.size(), f);
    std::fclose(f);
  }
};

struct Shape {
  bool mla = false;
  std::int64_t nnz = 4, hq = 2, hk = 2, d = 16, r = 8, pages = 4, ps = 4, max_pos = 32;
  DType in = DType::kBFloat16, out = DType::kFloat8E4M3FN, cos = DType::kFloat32;
};

void common(Seed& s, const Shape& sh, bool page_table, std::uint32_t fill) {
  s.d.fill_seed = fill;
  Arguments& a = s.a;
  if (!sh.mla) {
    const ropekv::QkvViews in =
        ropekv::fused_qkv_views(fake(kQIn), sh.in, sh.nnz, sh.hq, sh.hk, sh.d, sh.r);
    a.q_rope = in.q_rope;
    a.q_nope = in.q_nope;
    a.k_rope = in.k_rope;
    a.k_nope = in.k_nope;
    a.v = in.v;
  } else {
    a.kind = ropekv::AttentionKind::kMla;
    const ropekv::HeadViews q = ropekv::split_heads(fake(kQIn), sh.in, sh.nnz, sh.hq, sh.d, sh.r);
    a.q_rope = q.rope;
    a.q_nope = q.nope;
    const ropekv::HeadViews k = ropekv::split_heads(fake(kKIn), sh.in, sh.nnz, 1, sh.d, sh.r);
    a.k_rope = k.rope;
    a.k_nope = k.nope;
  }
  const ropekv::HeadViews qo = ropekv::split_heads(fake(kQOut), sh.out, sh.nnz, sh.hq, sh.d, sh.r);
  a.q_rope_out = qo.rope;
  a.q_nope_out = qo.nope;
  const std::int64_t cs[2] = {sh.max_pos, sh.r};
  a.cos_sin_cache = ropekv::make_contiguous(fake(kCosSin), sh.cos, 2, cs);
  std::vector<std::int64_t> pos, slot, batch;
  for (std::int64_t t = 0; t < sh.nnz; ++t) {
    // Page table: positions within the sequence's two pages of four entries.
    pos.push_back(page_table ? (t * 3) % 8 : (t * 5) % sh.max_pos);
    slot.push_back(t == 1 ? -1 : (t * 3) % (sh.pages * sh.ps));  // token 1: padding
    batch.push_back(t == 1 ? -1 : t % 2);
  }
  a.positions = s.indices(pos, DType::kInt64);
  if (!page_table) {
    a.cache_index.slot_mapping = s.indices(slot, DType::kInt64);
  } else {
    a.cache_index.form = ropekv::Addressing::kPageTable;
    a.cache_index.kv_indices = s.indices({3, 1, 0, 2}, DType::kInt32);
    a.cache_index.kv_indptr = s.indices({0, 2, 4}, DType::kInt32);
    a.cache_index.batch_indices = s.indices(batch, DType::kInt32);
    a.cache_index.kv_positions = a.positions;
  }
  for (int i = 0; i < 3; ++i) {
    s.d.scale[i].value = 0.5f + 0.25f * float(i);
    s.d.scale[i].device_offset = -1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR (writes the seed corpus to DIR)\n", argv[0]);
    return 2;
  }
  const char* dir = argv[1];
  int n = 0;
  using ropekv::KvCacheViews;
  // GQA layouts x addressing forms.
  for (int layout = 0; layout < 5; ++layout) {
    for (bool page_table : {false, true}) {
      Seed s;
      Shape sh;
      common(s, sh, page_table, std::uint32_t(layout * 2 + page_table));
      KvCacheViews c;
      const char* name = "";
      switch (layout) {
        case 0:
          c = ropekv::nhd_kv_cache(fake(kKCache), fake(kVCache), sh.out, sh.pages, sh.ps, sh.hk,
                                   sh.d, sh.r);
          name = "nhd";
          break;
        case 1:
          c = ropekv::hnd_kv_cache(fake(kKCache), fake(kVCache), sh.out, sh.pages, sh.ps, sh.hk,
                                   sh.d, sh.r);
          name = "hnd";
          break;
        case 2:
          c = ropekv::stacked_kv_cache(fake(kKCache), ropekv::StackOrder::kPageMajor, sh.out,
                                       sh.pages, sh.ps, sh.hk, sh.d, sh.r);
          name = "stacked-page-major";
          break;
        case 3:
          c = ropekv::stacked_kv_cache(fake(kKCache), ropekv::StackOrder::kKvMajor, sh.out,
                                       sh.pages, sh.ps, sh.hk, sh.d, sh.r);
          name = "stacked-kv-major";
          break;
        default: {  // NHD with padded pages and an odd page size, by hand
          const std::int64_t e[4] = {sh.pages, 3, sh.hk, sh.r},
                             en[4] = {sh.pages, 3, sh.hk, sh.d - sh.r};
          const std::int64_t st[4] = {3 * sh.hk * sh.d + 5, sh.hk * sh.d, sh.d, 1};
          c.k_rope = ropekv::make_strided(fake(kKCache), sh.out, 4, e, st);
          c.k_nope =
              ropekv::make_strided(static_cast<char*>(fake(kKCache)) + sh.r, sh.out, 4, en, st);
          const std::int64_t ev[4] = {sh.pages, 3, sh.hk, sh.d};
          c.v = ropekv::make_strided(fake(kVCache), sh.out, 4, ev, st);
          name = "nhd-padded";
          break;
        }
      }
      s.a.k_cache_rope = c.k_rope;
      s.a.k_cache_nope = c.k_nope;
      s.a.v_cache = c.v;
      s.finish(dir, (std::string(name) + (page_table ? "-page-table" : "-slots")).c_str());
      ++n;
    }
  }
  // MLA: vLLM's single buffer and FlashInfer's split caches; DeepSeek's shape.
  for (bool single : {true, false}) {
    Seed s;
    Shape sh;
    sh.mla = true;
    sh.hq = 2;
    sh.d = 64 + 16;
    sh.r = 16;
    common(s, sh, !single, single ? 20u : 21u);
    const KvCacheViews c =
        single ? ropekv::mla_cache_single(fake(kKCache), sh.out, sh.pages, sh.ps, sh.d - sh.r, sh.r)
               : ropekv::mla_cache_split(fake(kKCache), fake(kVCache), sh.out, sh.pages, sh.ps,
                                         sh.d - sh.r, sh.r);
    s.a.k_cache_rope = c.k_rope;
    s.a.k_cache_nope = c.k_nope;
    s.finish(dir, single ? "mla-single" : "mla-split-page-table");
    ++n;
  }
  // Variants of the NHD call: dtypes, style, scales on the device and as
  // multipliers, checked mode with a bad token and a counter, N = 0, nnz = 0.
  struct Variant {
    const char* name;
    DType in, out, cos;
    bool interleaved, device_scales, multipliers, checked, no_nope, empty;
  };
  const Variant variants[] = {
      {"fp32-e5m2-interleaved", DType::kFloat32, DType::kFloat8E5M2, DType::kFloat32, true, false,
       false, false, false, false},
      {"fp16-e4m3fnuz-fp16-cos", DType::kFloat16, DType::kFloat8E4M3FNUZ, DType::kFloat16, false,
       false, false, false, false, false},
      {"bf16-bf16-out", DType::kBFloat16, DType::kBFloat16, DType::kFloat32, false, false, false,
       false, false, false},
      {"device-scales", DType::kBFloat16, DType::kFloat8E4M3FN, DType::kFloat32, false, true, false,
       false, false, false},
      {"multipliers", DType::kBFloat16, DType::kFloat8E4M3FN, DType::kFloat32, false, false, true,
       false, false, false},
      {"device-multipliers-checked", DType::kBFloat16, DType::kFloat8E4M3FN, DType::kFloat32, false,
       true, true, true, false, false},
      {"rotary-only", DType::kBFloat16, DType::kFloat8E4M3FN, DType::kFloat32, false, false, false,
       false, true, false},
      {"nnz-0", DType::kBFloat16, DType::kFloat8E4M3FN, DType::kFloat32, false, false, false, false,
       false, true},
  };
  for (const Variant& vr : variants) {
    Seed s;
    Shape sh;
    sh.in = vr.in;
    sh.out = vr.out;
    sh.cos = vr.cos;
    if (vr.no_nope) sh.r = sh.d;
    if (vr.empty) sh.nnz = 0;
    common(s, sh, false, std::uint32_t(30 + n));
    if (vr.interleaved) s.a.rope_style = ropekv::RopeStyle::kInterleaved;
    const KvCacheViews c = ropekv::nhd_kv_cache(fake(kKCache), fake(kVCache), sh.out, sh.pages,
                                                sh.ps, sh.hk, sh.d, sh.r);
    s.a.k_cache_rope = c.k_rope;
    s.a.k_cache_nope = c.k_nope;
    s.a.v_cache = c.v;
    for (int i = 0; i < 3; ++i) {
      if (vr.device_scales) s.d.scale[i].device_offset = s.scale_slot(0.125f * float(i + 1));
      if (vr.multipliers)
        s.d.scale[i].convention = std::int32_t(ropekv::ScaleConvention::kMultiply);
    }
    if (vr.checked) {
      s.a.checked.enabled = true;
      s.d.has_counter = 1;
      s.d.counter_offset = 8;
      // Token 2's slot: a page beyond the cache.
      std::int64_t bad = sh.pages * sh.ps + 1;
      const std::size_t off = std::size_t(
          reinterpret_cast<std::uintptr_t>(s.a.cache_index.slot_mapping.data) & 0xffffffffu);
      std::memcpy(s.index.data() + off + 2 * 8, &bad, 8);
    }
    s.finish(dir, vr.name);
    ++n;
  }
  std::printf("wrote %d seeds to %s\n", n, dir);
  return 0;
}

#endif
