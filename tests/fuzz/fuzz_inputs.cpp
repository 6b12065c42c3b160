// The fuzzer's inputs: the structure-aware mutator, or (ROPEKV_FUZZ_WRITE_SEEDS) a program that
// writes the seed corpus, one valid call of every layout and addressing form, to the DIR given.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_format.hpp"
#include "ropekv/ropekv.hpp"

using namespace ropekv_fuzz;  // the input format (fuzz_format.hpp)

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
