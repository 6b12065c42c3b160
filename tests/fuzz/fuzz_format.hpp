// The fuzz input's format (Desc: a serialized call) and what both fuzz_api.cpp (the harness)
// and fuzz_inputs.cpp (the mutator and the seed corpus writer) need.
#pragma once

#include <cstddef>
#include <cstdint>

#include "argument_views.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv_fuzz {

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

inline TensorView* view_field(Arguments& a, int i) {
  TensorView* v[ropekv_test::kArgumentViews];
  ropekv_test::argument_views(a, v);
  return v[i];
}

inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace ropekv_fuzz
