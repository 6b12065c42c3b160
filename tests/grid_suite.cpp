// The randomized grid suite (see grid_suite.hpp).
//
// Each case is generated from its own seed (std::mt19937_64), so a case is
// replayed by its name alone: --gtest_filter='*GridCase.Run/c0123_*'. A case
// builds every buffer in host memory first (the "mirror"): inputs, index
// arrays and device scales with their data, outputs and caches filled with
// guard bytes, every buffer with margins around its views. The mirror is
// uploaded to the backend's memory, run there, downloaded and checked.
#include "grid_suite.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "argument_views.hpp"
#include "oracle.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv_test {
namespace {

namespace orc = ropekv_oracle;
using ropekv::Addressing;
using ropekv::Arguments;
using ropekv::AttentionKind;
using ropekv::DType;
using ropekv::RopeStyle;
using ropekv::Scale;
using ropekv::TensorView;

constexpr int kNumCases = 540;
constexpr std::uint64_t kBaseSeed = 0x726f70656b76ull;  // "ropekv"

// The largest fraction of FP8/bf16/fp16 elements allowed to differ from the
// oracle's nearest code (see GridSummary.AllCases for the justification).
constexpr double kMaxNonIdenticalFraction = 0.001;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t case_seed(int index) { return splitmix64(kBaseSeed + std::uint64_t(index)); }

// mt19937_64's output is fixed by the standard; the draws below avoid the
// library-specific std::*_distribution so that every toolchain generates the
// same cases.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : g_(seed) {}
  std::uint64_t bits() { return g_(); }
  std::int64_t range(std::int64_t lo, std::int64_t hi) {  // inclusive
    return lo + std::int64_t(g_() % std::uint64_t(hi - lo + 1));
  }
  double uniform() { return double(g_() >> 11) * 0x1p-53; }
  bool coin(double p) { return uniform() < p; }
  template <class T>
  T one_of(std::initializer_list<T> xs) {
    return *(xs.begin() + range(0, std::int64_t(xs.size()) - 1));
  }

 private:
  std::mt19937_64 g_;
};

// ------------------------------------------------------------------ case specs
enum class Layout {
  kNhd,
  kNhdPadded,
  kHnd,
  kStackedPageMajor,
  kStackedKvMajor,
  kMlaSingle,
  kMlaSplit
};

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kNhd: return "nhd";
    case Layout::kNhdPadded: return "nhdpad";
    case Layout::kHnd: return "hnd";
    case Layout::kStackedPageMajor: return "stackpm";
    case Layout::kStackedKvMajor: return "stackkv";
    case Layout::kMlaSingle: return "mla1";
    case Layout::kMlaSplit: return "mla2";
  }
  return "?";
}

struct Spec {
  int index = 0;
  std::uint64_t seed = 0;
  AttentionKind kind = AttentionKind::kGqa;
  RopeStyle style = RopeStyle::kNeox;
  std::int64_t nnz = 0, hq = 1, hk = 1, rdim = 2, ndim = 0, vdim = 0;
  DType in = DType::kBFloat16, q_out = DType::kFloat8E4M3FN, cache = DType::kFloat8E4M3FN,
        cos = DType::kFloat32;
  DType pos_dtype = DType::kInt64, slot_dtype = DType::kInt64, indptr_dtype = DType::kInt32,
        indices_dtype = DType::kInt32, batch_dtype = DType::kInt32, kvpos_dtype = DType::kInt32;
  Addressing addressing = Addressing::kSlotMapping;
  bool kvpos_is_positions = false;  // page table: positions and kv_positions one view
  Layout layout = Layout::kNhd;
  std::int64_t page_size = 16, page_pad = 0, head_pad = 0;
  // Padding of output strides: multiples of the row period (a head row, or an
  // MLA cache entry) or, when odd_pads, any number of elements.
  bool odd_pads = false;
  bool fused_inputs = false;  // GQA: one fused QKV buffer; MLA: one [ckv | kpe] buffer
  std::int64_t in_token_pad = 0;
  bool mla_q_nope_first = false;  // MLA query rows [nope | rope] (vLLM) or [rope | nope]
  bool q_out_nope_first = false;  // MLA query output rows likewise
  std::int64_t q_out_token_pad = 0;
  std::int64_t cos_row_pad = 0, max_pos = 64;
  double rope_base = 10000.0;
  float scale[3] = {1.f, 1.f, 1.f};  // q, k, v
  bool scale_on_device[3] = {false, false, false};
  bool scale_multiplies[3] = {false, false, false};  // ScaleConvention::kMultiply
  bool checked = false, counter = false;
  std::int64_t num_bad = 0;
  double pad_fraction = 0;
  int specials = 0, zeros = 0;
  int lo_exp = -12, hi_exp = 8;  // log2 of |value / scale| of generated inputs
  bool misaligned = false;       // buffer margins that are not multiples of 16 bytes
  std::int64_t num_seqs = 1;     // page table

  std::int64_t head_dim() const { return rdim + ndim; }
  bool mla() const { return kind == AttentionKind::kMla; }
  std::string name() const;
  std::string describe() const;
};

std::string Spec::name() const {
  char b[160];
  std::snprintf(b, sizeof(b), "c%04d_%s_%s_%s_q%s_kv%s_%s_%s%s", index, mla() ? "mla" : "gqa",
                style == RopeStyle::kNeox ? "neox" : "inter", ropekv::to_string(in),
                ropekv::to_string(q_out), ropekv::to_string(cache), layout_name(layout),
                addressing == Addressing::kSlotMapping ? "slot" : "ptable",
                checked ? "_checked" : "");
  return b;
}

std::string Spec::describe() const {
  char b[1400];
  std::snprintf(
      b, sizeof(b),
      "grid case %d (seed 0x%016llx; replay: --gtest_filter='*GridCase.Run/%s')\n"
      "  %s %s, nnz=%lld Hq=%lld Hk=%lld R=%lld N=%lld Dv=%lld\n"
      "  dtypes: in=%s q_out=%s cache=%s cos_sin=%s positions=%s\n"
      "  addressing=%s (index dtypes slot=%s indptr=%s indices=%s batch=%s kv_pos=%s%s, "
      "sequences=%lld), padding fraction %.2f\n"
      "  layout=%s page_size=%lld page_pad=%lld head_pad=%lld%s; inputs %s token_pad=%lld%s; "
      "q_out token_pad=%lld%s\n"
      "  cos_sin: max_pos=%lld row_pad=%lld base=%g\n"
      "  scales q=%s%.9g%s k=%s%.9g%s v=%s%.9g%s\n"
      "  checked=%d counter=%d bad_tokens=%lld; quantized values 2^[%d,%d], specials=%d zeros=%d, "
      "misaligned margins=%d",
      index, static_cast<unsigned long long>(seed), name().c_str(), mla() ? "MLA" : "GQA",
      style == RopeStyle::kNeox ? "NeoX" : "interleaved", static_cast<long long>(nnz),
      static_cast<long long>(hq), static_cast<long long>(hk), static_cast<long long>(rdim),
      static_cast<long long>(ndim), static_cast<long long>(vdim), ropekv::to_string(in),
      ropekv::to_string(q_out), ropekv::to_string(cache), ropekv::to_string(cos),
      ropekv::to_string(pos_dtype),
      addressing == Addressing::kSlotMapping ? "slot_mapping" : "page_table",
      ropekv::to_string(slot_dtype), ropekv::to_string(indptr_dtype),
      ropekv::to_string(indices_dtype), ropekv::to_string(batch_dtype),
      ropekv::to_string(kvpos_dtype), kvpos_is_positions ? " (= positions)" : "",
      static_cast<long long>(num_seqs), pad_fraction, layout_name(layout),
      static_cast<long long>(page_size), static_cast<long long>(page_pad),
      static_cast<long long>(head_pad), odd_pads ? " (odd pads)" : "",
      fused_inputs ? "fused" : "separate", static_cast<long long>(in_token_pad),
      mla() ? (mla_q_nope_first ? ", q rows [nope|rope]" : ", q rows [rope|nope]") : "",
      static_cast<long long>(q_out_token_pad),
      mla() ? (q_out_nope_first ? " [nope|rope]" : " [rope|nope]") : "",
      static_cast<long long>(max_pos), static_cast<long long>(cos_row_pad), rope_base,
      scale_multiplies[0] ? "*" : "/", double(scale[0]), scale_on_device[0] ? " (device)" : "",
      scale_multiplies[1] ? "*" : "/", double(scale[1]), scale_on_device[1] ? " (device)" : "",
      scale_multiplies[2] ? "*" : "/", double(scale[2]), scale_on_device[2] ? " (device)" : "",
      checked ? 1 : 0, counter ? 1 : 0, static_cast<long long>(num_bad), lo_exp, hi_exp, specials,
      zeros, misaligned ? 1 : 0);
  return b;
}

DType index_dtype(Rng& r) { return r.coin(0.5) ? DType::kInt32 : DType::kInt64; }

Spec make_spec(int index) {
  Spec s;
  s.index = index;
  s.seed = case_seed(index);
  Rng r(s.seed);
  const DType ins[3] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};
  const DType outs[6] = {DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E4M3FNUZ,
                         DType::kBFloat16,     DType::kFloat16,    DType::kFloat32};
  // The dtype triple cycles through all 3 * 6 * 6 combinations; the rest is random.
  s.in = ins[index % 3];
  s.q_out = outs[(index / 3) % 6];
  s.cache = outs[(index / 18) % 6];
  s.kind = index % 4 == 3 ? AttentionKind::kMla : AttentionKind::kGqa;
  s.style = r.coin(0.5) ? RopeStyle::kNeox : RopeStyle::kInterleaved;
  s.cos = r.coin(0.5) ? DType::kFloat32 : s.in;

  // ---- shapes
  if (!s.mla()) {
    switch (r.range(0, 5)) {
      case 0: {  // the canonical shapes of the vector paths
        const std::int64_t d = r.one_of<std::int64_t>({64, 128});
        s.rdim = r.coin(0.5) ? d : d / 2;
        s.ndim = d - s.rdim;
        break;
      }
      case 1:  // odd R/2 and odd N tails
        s.rdim = r.one_of<std::int64_t>({2, 4, 6, 10, 14});
        s.ndim = r.one_of<std::int64_t>({0, 1, 3, 5, 7});
        break;
      case 2:
        s.rdim = r.one_of<std::int64_t>({8, 16, 32});
        s.ndim = r.one_of<std::int64_t>({0, 8, 16, 24});
        break;
      case 3:
        s.rdim = r.one_of<std::int64_t>({2, 6, 12, 32, 64});
        s.ndim = 0;
        break;
      case 4:
        s.rdim = r.one_of<std::int64_t>({6, 12, 20});
        s.ndim = r.one_of<std::int64_t>({5, 9, 17});
        break;
      default:  // mostly non-rotary
        s.rdim = r.one_of<std::int64_t>({4, 8});
        s.ndim = r.one_of<std::int64_t>({60, 120});
        break;
    }
    s.hq = r.range(1, 8);
    s.hk = r.range(1, std::min<std::int64_t>(s.hq, 4));
    s.vdim = s.head_dim();
    s.layout = r.one_of({Layout::kNhd, Layout::kNhdPadded, Layout::kHnd, Layout::kStackedPageMajor,
                         Layout::kStackedKvMajor});
    const bool separate_v =
        s.layout == Layout::kNhd || s.layout == Layout::kNhdPadded || s.layout == Layout::kHnd;
    if (separate_v && r.coin(0.25)) s.vdim = r.range(1, 40);
    s.fused_inputs = s.vdim == s.head_dim() && r.coin(0.6);
  } else {
    switch (r.range(0, 4)) {
      case 0:  // DeepSeek: rope 64 + latent 512
        s.rdim = 64;
        s.ndim = 512;
        break;
      case 1:
        s.rdim = 16;
        s.ndim = 64;
        break;
      case 2:
        s.rdim = 6;
        s.ndim = 5;
        break;
      case 3:
        s.rdim = 8;
        s.ndim = 32;
        break;
      default:
        s.rdim = 2;
        s.ndim = r.coin(0.3) ? 0 : 1;
        break;
    }
    s.hq = s.ndim >= 512 ? r.range(1, 16) : r.range(1, 8);
    s.hk = 1;
    s.vdim = 0;
    s.layout = r.coin(0.5) ? Layout::kMlaSingle : Layout::kMlaSplit;
    s.fused_inputs = r.coin(0.5);
    s.mla_q_nope_first = r.coin(0.5);
    s.q_out_nope_first = r.coin(0.5);
  }
  s.in_token_pad = r.coin(0.5) ? 0 : r.range(1, 13);
  s.odd_pads = r.coin(0.06);
  if (r.coin(0.5)) s.q_out_token_pad = s.odd_pads ? r.range(1, 11) : r.range(1, 2) * s.head_dim();

  // ---- tokens (at most ~30k elements per case keeps the suite fast)
  if (index % 37 == 4) {
    s.nnz = 0;
  } else {
    const std::int64_t k = r.range(0, 99);
    s.nnz = k < 40 ? r.range(1, 8) : (k < 75 ? r.range(9, 64) : r.range(65, 300));
    const std::int64_t per_token = s.hq * s.head_dim() + s.hk * (s.head_dim() + s.vdim);
    s.nnz = std::max<std::int64_t>(1, std::min<std::int64_t>(s.nnz, 30000 / per_token));
  }

  // ---- cache geometry and addressing
  const std::int64_t kps = r.range(0, 99);
  s.page_size =
      kps < 30 ? 1 : (kps < 60 ? 16 : (kps < 85 ? 64 : r.one_of<std::int64_t>({2, 3, 5, 8, 32})));
  s.head_pad = s.layout == Layout::kNhdPadded ? r.range(1, 9) : 0;
  if (r.coin(0.5)) {
    const bool any = s.odd_pads || s.layout == Layout::kMlaSplit;  // split: one view per buffer
    s.page_pad = any ? r.range(1, 17) : r.range(1, 2) * (s.head_dim() + s.head_pad);
  }
  s.addressing = r.coin(0.5) ? Addressing::kSlotMapping : Addressing::kPageTable;
  s.pos_dtype = index_dtype(r);
  s.slot_dtype = index_dtype(r);
  s.indptr_dtype = index_dtype(r);
  s.indices_dtype = index_dtype(r);
  s.batch_dtype = index_dtype(r);
  s.kvpos_is_positions = s.addressing == Addressing::kPageTable && r.coin(0.5);
  s.kvpos_dtype = s.kvpos_is_positions ? s.pos_dtype : index_dtype(r);
  s.num_seqs = r.range(1, 8);
  s.pad_fraction = r.one_of<double>({0.0, 0.1, 0.3, 0.3, 0.6, 0.9});
  s.max_pos = r.one_of<std::int64_t>({1, 8, 64, 512, 4096});
  s.cos_row_pad = r.coin(0.3) ? r.range(1, 7) : 0;
  s.rope_base = r.coin(0.7) ? 10000.0 : 1000000.0;

  // ---- scales: unit, random non-unit, or typical calibration values; some on the device
  const bool device_scales = r.coin(0.4);
  for (int i = 0; i < 3; ++i) {
    const std::int64_t k = r.range(0, 99);
    if (k < 25) {
      s.scale[i] = 1.0f;
    } else if (k < 85) {
      s.scale[i] = float(std::exp2(-6.0 + 12.0 * r.uniform()));
    } else {
      s.scale[i] = r.one_of<float>({1.0f / 448.0f, 0.0234375f, 3.0f, 0.1f});
    }
    s.scale_on_device[i] = device_scales && r.coin(0.7);
  }
  // Conventions from a stream of their own, so that adding them left every
  // other draw of a case (and so its replay name and data) as it was.
  Rng conventions(s.seed ^ 0x636f6e76656e74ull);
  for (bool& m : s.scale_multiplies) m = conventions.coin(0.35);

  // ---- checked mode, specials, value ranges, alignment
  if (r.coin(0.3)) {
    s.checked = true;
    s.num_bad = std::min<std::int64_t>(s.nnz, r.range(0, 5));
    s.counter = r.coin(0.8);
  } else {
    s.counter = r.coin(0.15);  // a counter that checked mode being off must leave alone
  }
  s.specials = r.coin(0.15) ? int(r.range(1, 6)) : 0;
  s.zeros = r.coin(0.2) ? int(r.range(1, 4)) : 0;
  s.lo_exp = r.one_of<int>({-18, -12, -8});
  s.hi_exp = r.coin(0.25) ? 17 : r.one_of<int>({3, 8});
  s.misaligned = r.coin(0.5);
  return s;
}

// ------------------------------------------------------------------ case data
enum class Role { kInput, kOutput, kCounter };

struct HostBuffer {
  std::string name;
  Role role = Role::kInput;
  std::size_t bytes = 0;
  std::shared_ptr<unsigned char> data;  // 256-byte aligned, like device allocations
  unsigned char* ptr() const { return data.get(); }
};

std::shared_ptr<unsigned char> aligned_bytes(std::size_t n) {
  const std::size_t size = (n + 255) / 256 * 256 + 256;
  void* p = std::aligned_alloc(256, size);
  if (p == nullptr) std::abort();
  return std::shared_ptr<unsigned char>(static_cast<unsigned char*>(p),
                                        [](unsigned char* q) { std::free(q); });
}

struct CaseData {
  std::vector<HostBuffer> buffers;
  Arguments args;  // points into `buffers`
  std::int64_t expected_bad = 0;
  unsigned long long counter_init = 0;
  int counter_buffer = -1;
  std::string layout_errors;  // layout helpers that disagree with the layouts' definitions
  std::int64_t nonzero_inputs = 0;
};

void store(unsigned char* p, std::size_t bytes, std::uint64_t v) {
  switch (bytes) {
    case 1: *p = static_cast<unsigned char>(v); break;
    case 2: {
      const std::uint16_t h = static_cast<std::uint16_t>(v);
      std::memcpy(p, &h, 2);
      break;
    }
    case 4: {
      const std::uint32_t w = static_cast<std::uint32_t>(v);
      std::memcpy(p, &w, 4);
      break;
    }
    default: std::memcpy(p, &v, 8); break;
  }
}

unsigned char* at(const TensorView& v, std::int64_t i0, std::int64_t i1 = 0, std::int64_t i2 = 0) {
  const std::int64_t off =
      i0 * v.stride[0] + (v.rank > 1 ? i1 * v.stride[1] : 0) + (v.rank > 2 ? i2 * v.stride[2] : 0);
  return static_cast<unsigned char*>(v.data) + off * std::int64_t(ropekv::size_of(v.dtype));
}

void* offset(void* base, DType dtype, std::int64_t elems) {
  return static_cast<unsigned char*>(base) + elems * std::int64_t(ropekv::size_of(dtype));
}

// Views written out from their definitions (for padded variants and for
// checking the layout helpers).
TensorView view3(void* base, DType dt, std::int64_t off, std::int64_t n, std::int64_t h,
                 std::int64_t len, std::int64_t ts, std::int64_t hs) {
  if (len == 0) return TensorView{};
  const std::int64_t e[3] = {n, h, len};
  const std::int64_t st[3] = {ts, hs, 1};
  return ropekv::make_strided(offset(base, dt, off), dt, 3, e, st);
}
TensorView view4(void* base, DType dt, std::int64_t off, std::int64_t pages, std::int64_t ps,
                 std::int64_t h, std::int64_t len, std::int64_t sp, std::int64_t se,
                 std::int64_t sh) {
  if (len == 0) return TensorView{};
  const std::int64_t e[4] = {pages, ps, h, len};
  const std::int64_t st[4] = {sp, se, sh, 1};
  return ropekv::make_strided(offset(base, dt, off), dt, 4, e, st);
}

std::string view_string(const TensorView& v) {
  if (!v.present()) return "(absent)";
  std::string s = "{data " + std::to_string(reinterpret_cast<std::uintptr_t>(v.data)) + ", " +
                  ropekv::to_string(v.dtype) + ", extents";
  for (int k = 0; k < v.rank; ++k) s += " " + std::to_string(v.extent[k]);
  s += ", strides";
  for (int k = 0; k < v.rank; ++k) s += " " + std::to_string(v.stride[k]);
  return s + "}";
}

bool same_view(const TensorView& a, const TensorView& b) {
  if (a.present() != b.present()) return false;
  if (!a.present()) return true;
  if (a.rank != b.rank || a.data != b.data || a.dtype != b.dtype) return false;
  for (int k = 0; k < a.rank; ++k)
    if (a.extent[k] != b.extent[k] || a.stride[k] != b.stride[k]) return false;
  return true;
}

class Builder {
 public:
  Builder(const Spec& s, CaseData& d) : s_(s), d_(d), r_(s.seed ^ 0x6275696c64657221ull) {}

  void build();

 private:
  // A buffer holding a region of `elems` elements of `elem` bytes, with guard
  // margins before and after; returns the region's start.
  void* add(const char* name, Role role, std::int64_t elems, std::size_t elem);
  void check_helper(const char* what, const TensorView& got, const TensorView& want);
  void build_inputs();
  void build_query_output();
  void build_cache();
  void build_indices();
  void build_cos_sin();
  void build_scales();
  void fill_inputs();
  std::uint32_t value_code(int which);  // which: 0 q, 1 k, 2 v
  std::uint32_t special_code();

  const Spec& s_;
  CaseData& d_;
  Rng r_;
  std::int64_t num_pages_ = 1;
  std::int64_t max_pos_ = 1;  // the cos/sin table's height, set by build_indices
};

void* Builder::add(const char* name, Role role, std::int64_t elems, std::size_t elem) {
  const std::size_t front = 64 + (s_.misaligned ? elem * std::size_t(r_.range(1, 3)) : 0);
  const std::size_t back = 32 + elem * std::size_t(r_.range(0, 3));
  HostBuffer b;
  b.name = name;
  b.role = role;
  b.bytes = front + std::size_t(std::max<std::int64_t>(elems, 0)) * elem + back;
  b.data = aligned_bytes(b.bytes);
  // Outputs: guard bytes. Inputs: garbage that must never be read.
  for (std::size_t i = 0; i < b.bytes; i += 8) {
    const std::uint64_t g = r_.bits();
    std::memcpy(b.ptr() + i, &g, std::min<std::size_t>(8, b.bytes - i));
  }
  d_.buffers.push_back(b);
  return b.ptr() + front;
}

void Builder::check_helper(const char* what, const TensorView& got, const TensorView& want) {
  if (!same_view(got, want))
    d_.layout_errors += std::string("\n  layout helper ") + what + " returned " + view_string(got) +
                        ", its layout defines " + view_string(want);
}

void Builder::build() {
  build_inputs();
  build_query_output();
  build_indices();  // decides the number of pages
  build_cache();
  build_cos_sin();
  build_scales();
  fill_inputs();
  Arguments& a = d_.args;
  a.kind = s_.kind;
  a.rope_style = s_.style;
  a.checked.enabled = s_.checked;
  if (s_.counter) {
    unsigned long long* c =
        static_cast<unsigned long long*>(add("skipped_tokens", Role::kCounter, 1, 8));
    d_.counter_init = static_cast<unsigned long long>(r_.range(0, 1000));
    std::memcpy(c, &d_.counter_init, 8);
    a.checked.skipped_tokens = c;
    d_.counter_buffer = int(d_.buffers.size()) - 1;
  }
}

void Builder::build_inputs() {
  Arguments& a = d_.args;
  const DType dt = s_.in;
  const std::size_t es = ropekv::size_of(dt);
  const std::int64_t n = s_.nnz, rows = std::max<std::int64_t>(n, 1), R = s_.rdim, N = s_.ndim,
                     D = s_.head_dim();
  const std::int64_t pad = s_.in_token_pad;
  if (!s_.mla()) {
    const std::int64_t hq = s_.hq, hk = s_.hk, dv = s_.vdim;
    if (s_.fused_inputs) {
      const std::int64_t ts = (hq + 2 * hk) * D + pad;
      void* base = add("qkv", Role::kInput, rows * ts, es);
      const ropekv::QkvViews v =
          ropekv::fused_qkv_views(base, dt, n, hq, hk, D, R, pad > 0 ? ts : 0);
      a.q_rope = view3(base, dt, 0, n, hq, R, ts, D);
      a.q_nope = view3(base, dt, R, n, hq, N, ts, D);
      a.k_rope = view3(base, dt, hq * D, n, hk, R, ts, D);
      a.k_nope = view3(base, dt, hq * D + R, n, hk, N, ts, D);
      a.v = view3(base, dt, (hq + hk) * D, n, hk, D, ts, D);
      check_helper("fused_qkv_views.q_rope", v.q_rope, a.q_rope);
      check_helper("fused_qkv_views.q_nope", v.q_nope, a.q_nope);
      check_helper("fused_qkv_views.k_rope", v.k_rope, a.k_rope);
      check_helper("fused_qkv_views.k_nope", v.k_nope, a.k_nope);
      check_helper("fused_qkv_views.v", v.v, a.v);
    } else {
      void* q = add("q", Role::kInput, rows * (hq * D + pad), es);
      void* k = add("k", Role::kInput, rows * (hk * D + pad), es);
      void* v = add("v", Role::kInput, rows * (hk * dv + pad), es);
      a.q_rope = view3(q, dt, 0, n, hq, R, hq * D + pad, D);
      a.q_nope = view3(q, dt, R, n, hq, N, hq * D + pad, D);
      a.k_rope = view3(k, dt, 0, n, hk, R, hk * D + pad, D);
      a.k_nope = view3(k, dt, R, n, hk, N, hk * D + pad, D);
      a.v = view3(v, dt, 0, n, hk, dv, hk * dv + pad, dv);
      if (pad == 0) {
        const ropekv::HeadViews qh = ropekv::split_heads(q, dt, n, hq, D, R);
        const ropekv::HeadViews kh = ropekv::split_heads(k, dt, n, hk, D, R);
        check_helper("split_heads(q).rope", qh.rope, a.q_rope);
        check_helper("split_heads(q).nope", qh.nope, a.q_nope);
        check_helper("split_heads(k).rope", kh.rope, a.k_rope);
        check_helper("split_heads(k).nope", kh.nope, a.k_nope);
      }
    }
    return;
  }
  // MLA: query rows [nope | rope] or [rope | nope]; key: latent (ckv) and rope (kpe).
  const std::int64_t hq = s_.hq;
  const std::int64_t qts = hq * D + pad;
  void* q = add("q", Role::kInput, rows * qts, es);
  const std::int64_t rope_off = s_.mla_q_nope_first ? N : 0;
  const std::int64_t nope_off = s_.mla_q_nope_first ? 0 : R;
  a.q_rope = view3(q, dt, rope_off, n, hq, R, qts, D);
  a.q_nope = view3(q, dt, nope_off, n, hq, N, qts, D);
  if (!s_.mla_q_nope_first && pad == 0) {
    const ropekv::HeadViews qh = ropekv::split_heads(q, dt, n, hq, D, R);
    check_helper("split_heads(q).rope", qh.rope, a.q_rope);
    check_helper("split_heads(q).nope", qh.nope, a.q_nope);
  }
  if (s_.fused_inputs) {  // DeepSeek's kv_a projection output [ckv | kpe]
    const std::int64_t ts = D + pad;
    void* kv = add("kv_a", Role::kInput, rows * ts, es);
    a.k_nope = view3(kv, dt, 0, n, 1, N, ts, D);
    a.k_rope = view3(kv, dt, N, n, 1, R, ts, D);
  } else {
    void* ckv = add("ckv", Role::kInput, rows * (N + pad), es);
    void* kpe = add("kpe", Role::kInput, rows * (R + pad), es);
    a.k_nope = view3(ckv, dt, 0, n, 1, N, N + pad, N);
    a.k_rope = view3(kpe, dt, 0, n, 1, R, R + pad, R);
  }
}

void Builder::build_query_output() {
  Arguments& a = d_.args;
  const DType dt = s_.q_out;
  const std::int64_t n = s_.nnz, rows = std::max<std::int64_t>(n, 1), hq = s_.hq, R = s_.rdim,
                     N = s_.ndim, D = s_.head_dim();
  const std::int64_t ts = hq * D + s_.q_out_token_pad;
  void* q = add("q_out", Role::kOutput, rows * ts, ropekv::size_of(dt));
  const bool nope_first = s_.mla() && s_.q_out_nope_first;
  a.q_rope_out = view3(q, dt, nope_first ? N : 0, n, hq, R, ts, D);
  a.q_nope_out = view3(q, dt, nope_first ? 0 : R, n, hq, N, ts, D);
  if (!nope_first && s_.q_out_token_pad == 0) {
    const ropekv::HeadViews h = ropekv::split_heads(q, dt, n, hq, D, R);
    check_helper("split_heads(q_out).rope", h.rope, a.q_rope_out);
    check_helper("split_heads(q_out).nope", h.nope, a.q_nope_out);
  }
}

// Paged caches: the helpers' views of the packed layout are checked against the
// layout's definition; padded variants add `page_pad` elements to the page
// stride (and `head_pad` between heads for kNhdPadded).
void Builder::build_cache() {
  Arguments& a = d_.args;
  const DType dt = s_.cache;
  const std::size_t es = ropekv::size_of(dt);
  const std::int64_t P = num_pages_, ps = s_.page_size, hk = s_.hk, R = s_.rdim, N = s_.ndim;
  const std::int64_t D = s_.head_dim(), dv = s_.vdim, pp = s_.page_pad;
  switch (s_.layout) {
    case Layout::kNhd:
    case Layout::kHnd: {
      const bool nhd = s_.layout == Layout::kNhd;
      void* k = add("k_cache", Role::kOutput, P * (ps * hk * D + pp), es);
      void* v = add("v_cache", Role::kOutput, P * (ps * hk * dv + pp), es);
      // [P, ps, Hk, D] or [P, Hk, ps, D]
      const std::int64_t ke = nhd ? hk * D : D, kh = nhd ? D : ps * D;
      const std::int64_t ve = nhd ? hk * dv : dv, vh = nhd ? dv : ps * dv;
      const ropekv::KvCacheViews c = nhd ? ropekv::nhd_kv_cache(k, v, dt, P, ps, hk, D, R)
                                         : ropekv::hnd_kv_cache(k, v, dt, P, ps, hk, D, R);
      const char* name = nhd ? "nhd_kv_cache" : "hnd_kv_cache";
      check_helper((std::string(name) + ".k_rope").c_str(), c.k_rope,
                   view4(k, dt, 0, P, ps, hk, R, ps * hk * D, ke, kh));
      check_helper((std::string(name) + ".k_nope").c_str(), c.k_nope,
                   view4(k, dt, R, P, ps, hk, N, ps * hk * D, ke, kh));
      if (dv == D) {
        check_helper((std::string(name) + ".v").c_str(), c.v,
                     view4(v, dt, 0, P, ps, hk, D, ps * hk * D, ke, kh));
      } else {  // a V cache of another head dim: the helper's V view for head_dim = Dv
        const ropekv::KvCacheViews cv = nhd ? ropekv::nhd_kv_cache(v, v, dt, P, ps, hk, dv, dv)
                                            : ropekv::hnd_kv_cache(v, v, dt, P, ps, hk, dv, dv);
        check_helper((std::string(name) + "(head_dim Dv).v").c_str(), cv.v,
                     view4(v, dt, 0, P, ps, hk, dv, ps * hk * dv, ve, vh));
      }
      a.k_cache_rope = view4(k, dt, 0, P, ps, hk, R, ps * hk * D + pp, ke, kh);
      a.k_cache_nope = view4(k, dt, R, P, ps, hk, N, ps * hk * D + pp, ke, kh);
      a.v_cache = view4(v, dt, 0, P, ps, hk, dv, ps * hk * dv + pp, ve, vh);
      break;
    }
    case Layout::kNhdPadded: {
      const std::int64_t hp = s_.head_pad;
      const std::int64_t kpage = ps * hk * (D + hp) + pp, vpage = ps * hk * (dv + hp) + pp;
      void* k = add("k_cache", Role::kOutput, P * kpage, es);
      void* v = add("v_cache", Role::kOutput, P * vpage, es);
      a.k_cache_rope = view4(k, dt, 0, P, ps, hk, R, kpage, hk * (D + hp), D + hp);
      a.k_cache_nope = view4(k, dt, R, P, ps, hk, N, kpage, hk * (D + hp), D + hp);
      a.v_cache = view4(v, dt, 0, P, ps, hk, dv, vpage, hk * (dv + hp), dv + hp);
      break;
    }
    case Layout::kStackedPageMajor:
    case Layout::kStackedKvMajor: {
      const bool pm = s_.layout == Layout::kStackedPageMajor;
      const std::int64_t block = ps * hk * D;  // one page of K (or V)
      void* kv =
          add("kv_cache", Role::kOutput, pm ? P * (2 * block + pp) : 2 * P * (block + pp), es);
      const ropekv::KvCacheViews c = ropekv::stacked_kv_cache(
          kv, pm ? ropekv::StackOrder::kPageMajor : ropekv::StackOrder::kKvMajor, dt, P, ps, hk, D,
          R);
      // [P, 2, ps, Hk, D] or [2, P, ps, Hk, D]
      const std::int64_t sp = pm ? 2 * block : block, v_off = pm ? block : P * block;
      const char* name = pm ? "stacked_kv_cache(page-major)" : "stacked_kv_cache(kv-major)";
      check_helper((std::string(name) + ".k_rope").c_str(), c.k_rope,
                   view4(kv, dt, 0, P, ps, hk, R, sp, hk * D, D));
      check_helper((std::string(name) + ".k_nope").c_str(), c.k_nope,
                   view4(kv, dt, R, P, ps, hk, N, sp, hk * D, D));
      check_helper((std::string(name) + ".v").c_str(), c.v,
                   view4(kv, dt, v_off, P, ps, hk, D, sp, hk * D, D));
      const std::int64_t psp = sp + pp, pv_off = pm ? block : P * (block + pp);
      a.k_cache_rope = view4(kv, dt, 0, P, ps, hk, R, psp, hk * D, D);
      a.k_cache_nope = view4(kv, dt, R, P, ps, hk, N, psp, hk * D, D);
      a.v_cache = view4(kv, dt, pv_off, P, ps, hk, D, psp, hk * D, D);
      break;
    }
    case Layout::kMlaSingle: {  // [P, ps, latent | rope]
      void* c = add("kv_cache", Role::kOutput, P * (ps * D + pp), es);
      const ropekv::KvCacheViews v = ropekv::mla_cache_single(c, dt, P, ps, N, R);
      check_helper("mla_cache_single.k_nope", v.k_nope, view4(c, dt, 0, P, ps, 1, N, ps * D, D, D));
      check_helper("mla_cache_single.k_rope", v.k_rope, view4(c, dt, N, P, ps, 1, R, ps * D, D, D));
      check_helper("mla_cache_single.v", v.v, TensorView{});
      a.k_cache_nope = view4(c, dt, 0, P, ps, 1, N, ps * D + pp, D, D);
      a.k_cache_rope = view4(c, dt, N, P, ps, 1, R, ps * D + pp, D, D);
      break;
    }
    case Layout::kMlaSplit: {  // ckv [P, ps, latent], kpe [P, ps, rope]
      void* ckv = add("ckv_cache", Role::kOutput, P * (ps * N + pp), es);
      void* kpe = add("kpe_cache", Role::kOutput, P * (ps * R + pp), es);
      const ropekv::KvCacheViews v = ropekv::mla_cache_split(ckv, kpe, dt, P, ps, N, R);
      check_helper("mla_cache_split.k_nope", v.k_nope,
                   view4(ckv, dt, 0, P, ps, 1, N, ps * N, N, N));
      check_helper("mla_cache_split.k_rope", v.k_rope,
                   view4(kpe, dt, 0, P, ps, 1, R, ps * R, R, R));
      a.k_cache_nope = view4(ckv, dt, 0, P, ps, 1, N, ps * N + pp, N, N);
      a.k_cache_rope = view4(kpe, dt, 0, P, ps, 1, R, ps * R + pp, R, R);
      break;
    }
  }
}

// Token roles, slots / page tables, positions.
void Builder::build_indices() {
  Arguments& a = d_.args;
  const std::int64_t n = s_.nnz, ps = s_.page_size;
  enum Kind { kValid, kPadding, kBad };
  std::vector<int> role(static_cast<std::size_t>(n), kValid);
  {
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    for (std::int64_t t = 0; t < n; ++t) order[std::size_t(t)] = t;
    for (std::int64_t t = n - 1; t > 0; --t)
      std::swap(order[std::size_t(t)], order[std::size_t(r_.range(0, t))]);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t t = order[std::size_t(i)];
      if (i < s_.num_bad)
        role[std::size_t(t)] = kBad;
      else if (r_.coin(s_.pad_fraction))
        role[std::size_t(t)] = kPadding;
    }
  }
  d_.expected_bad = s_.num_bad;
  auto negative = [&](DType dt) -> std::int64_t {  // a padding marker
    const std::int64_t k = r_.range(0, 3);
    if (k == 0) return -1;
    if (k == 1) return -r_.range(2, 1000);
    return dt == DType::kInt64 ? -(std::int64_t(1) << 40) - r_.range(0, 9) : INT32_MIN;
  };
  auto garbage = [&]() { return r_.range(-1000000, 1000000); };
  auto write_vector = [&](const char* name, DType dt, const std::vector<std::int64_t>& vals) {
    const std::size_t es = ropekv::size_of(dt);
    void* p = add(name, Role::kInput, std::int64_t(vals.size()), es);
    for (std::size_t i = 0; i < vals.size(); ++i)
      store(static_cast<unsigned char*>(p) + i * es, es, std::uint64_t(vals[i]));
    return ropekv::make_vector(p, dt, std::int64_t(vals.size()));
  };

  std::vector<std::int64_t> pos(static_cast<std::size_t>(n));
  std::int64_t max_pos = s_.max_pos;
  if (s_.addressing == Addressing::kSlotMapping) {
    std::int64_t valid = 0;
    for (int k : role) valid += k == kValid ? 1 : 0;
    num_pages_ = std::max<std::int64_t>(
        1, (valid + std::int64_t(double(valid) * r_.uniform()) + ps - 1) / ps + r_.range(0, 2));
    const std::int64_t slots_total = num_pages_ * ps;
    std::vector<std::int64_t> free_slots(static_cast<std::size_t>(slots_total));
    for (std::int64_t i = 0; i < slots_total; ++i) free_slots[std::size_t(i)] = i;
    std::int64_t used = 0;
    std::vector<std::int64_t> slot(static_cast<std::size_t>(n));
    for (std::int64_t t = 0; t < n; ++t) {
      const std::size_t ut = std::size_t(t);
      if (role[ut] == kValid) {  // a distinct slot: partial Fisher-Yates
        std::swap(free_slots[std::size_t(used)],
                  free_slots[std::size_t(r_.range(used, slots_total - 1))]);
        slot[ut] = free_slots[std::size_t(used++)];
        pos[ut] = r_.range(0, max_pos - 1);
      } else if (role[ut] == kPadding) {
        slot[ut] = negative(s_.slot_dtype);
        pos[ut] = garbage();
      } else {
        switch (r_.range(0, 2)) {
          case 0:  // page >= P
            slot[ut] = slots_total + r_.range(0, 3 * ps);
            pos[ut] = r_.range(0, max_pos - 1);
            break;
          case 1:  // position >= max_pos
            slot[ut] = r_.range(0, slots_total - 1);
            pos[ut] = max_pos + r_.range(0, 100);
            break;
          default:  // negative position
            slot[ut] = r_.range(0, slots_total - 1);
            pos[ut] = -r_.range(1, 100);
            break;
        }
      }
    }
    a.cache_index.form = Addressing::kSlotMapping;
    a.cache_index.slot_mapping = write_vector("slot_mapping", s_.slot_dtype, slot);
    a.positions = write_vector("positions", s_.pos_dtype, pos);
  } else {
    // Sequences: a prefix already in the cache, then this call's tokens.
    const std::int64_t B = s_.num_seqs;
    std::vector<std::int64_t> seq_of(static_cast<std::size_t>(n), -1),
        count(static_cast<std::size_t>(B), 0), prefix(static_cast<std::size_t>(B)),
        pages(static_cast<std::size_t>(B));
    for (std::int64_t b = 0; b < B; ++b)
      prefix[std::size_t(b)] = r_.coin(0.3) ? 0 : r_.range(0, 80);
    std::vector<std::int64_t> kv_pos(static_cast<std::size_t>(n));
    for (std::int64_t t = 0; t < n; ++t) {
      if (role[std::size_t(t)] != kValid) continue;
      const std::int64_t b = r_.range(0, B - 1);
      seq_of[std::size_t(t)] = b;
      kv_pos[std::size_t(t)] = prefix[std::size_t(b)] + count[std::size_t(b)]++;
    }
    std::int64_t total = 0, max_len = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t len = prefix[std::size_t(b)] + count[std::size_t(b)];
      pages[std::size_t(b)] = (len + ps - 1) / ps;
      total += pages[std::size_t(b)];
      max_len = std::max(max_len, len);
    }
    // A poisoned sequence (page ids out of range) for some bad tokens.
    bool poisoned = false;
    for (int k : role) poisoned = poisoned || k == kBad;
    poisoned = poisoned && r_.coin(0.5);
    num_pages_ = std::max<std::int64_t>(1, total + r_.range(0, 3));
    std::vector<std::int64_t> ids(static_cast<std::size_t>(num_pages_));
    for (std::int64_t i = 0; i < num_pages_; ++i) ids[std::size_t(i)] = i;
    for (std::int64_t i = num_pages_ - 1; i > 0; --i)
      std::swap(ids[std::size_t(i)], ids[std::size_t(r_.range(0, i))]);
    std::vector<std::int64_t> indices, indptr{0};
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t j = 0; j < pages[std::size_t(b)]; ++j)
        indices.push_back(ids[std::size_t(indptr.back() + j)]);
      indptr.push_back(indptr.back() + pages[std::size_t(b)]);
    }
    const std::int64_t poisoned_pages = poisoned ? r_.range(1, 2) : 0;
    for (std::int64_t j = 0; j < poisoned_pages; ++j)
      indices.push_back(r_.coin(0.5) ? num_pages_ + r_.range(0, 5) : -1 - r_.range(0, 5));
    if (poisoned) indptr.push_back(indptr.back() + poisoned_pages);
    const std::int64_t batch = std::int64_t(indptr.size()) - 1;

    if (s_.kvpos_is_positions) max_pos = max_len + 1 + r_.range(0, 100);
    std::vector<std::int64_t> bidx(static_cast<std::size_t>(n));
    for (std::int64_t t = 0; t < n; ++t) {
      const std::size_t ut = std::size_t(t);
      if (role[ut] == kValid) {
        bidx[ut] = seq_of[ut];
        pos[ut] = s_.kvpos_is_positions ? kv_pos[ut] : r_.range(0, max_pos - 1);
      } else if (role[ut] == kPadding) {
        bidx[ut] = negative(s_.batch_dtype);
        kv_pos[ut] = garbage();
        pos[ut] = s_.kvpos_is_positions ? kv_pos[ut] : garbage();
      } else {
        const std::int64_t b = r_.range(0, B - 1);
        const std::int64_t kind = poisoned ? r_.range(0, 4) : r_.range(0, 3);
        const bool bad_rope_pos = kind == 3 && !s_.kvpos_is_positions;
        bidx[ut] = b;
        kv_pos[ut] = r_.range(0, std::max<std::int64_t>(pages[std::size_t(b)] * ps, 1) - 1);
        if (kind == 0 || (kind == 3 && !bad_rope_pos)) {
          bidx[ut] = batch + r_.range(0, 3);  // no such sequence
        } else if (kind == 1) {
          kv_pos[ut] = -r_.range(1, 50);  // negative position in the sequence
        } else if (kind == 2) {
          kv_pos[ut] = pages[std::size_t(b)] * ps + r_.range(0, 2 * ps);  // beyond its pages
        } else if (kind == 4) {
          bidx[ut] = batch - 1;  // the poisoned sequence
          kv_pos[ut] = r_.range(0, poisoned_pages * ps - 1);
        }
        if (s_.kvpos_is_positions) {
          pos[ut] = kv_pos[ut];
        } else {
          pos[ut] = bad_rope_pos ? (r_.coin(0.5) ? max_pos + r_.range(0, 100) : -r_.range(1, 100))
                                 : r_.range(0, max_pos - 1);
        }
      }
    }
    a.cache_index.form = Addressing::kPageTable;
    a.cache_index.kv_indices = write_vector("kv_indices", s_.indices_dtype, indices);
    a.cache_index.kv_indptr = write_vector("kv_indptr", s_.indptr_dtype, indptr);
    a.cache_index.batch_indices = write_vector("batch_indices", s_.batch_dtype, bidx);
    if (s_.kvpos_is_positions) {
      a.positions = write_vector("positions", s_.pos_dtype, pos);
      a.cache_index.kv_positions = a.positions;
    } else {
      a.cache_index.kv_positions = write_vector("kv_positions", s_.kvpos_dtype, kv_pos);
      a.positions = write_vector("positions", s_.pos_dtype, pos);
    }
  }
  max_pos_ = max_pos;
}

void Builder::build_cos_sin() {
  Arguments& a = d_.args;
  const std::int64_t max_pos = max_pos_, R = s_.rdim, half = R / 2;
  const std::int64_t row = R + s_.cos_row_pad;
  const DType dt = s_.cos;
  const std::size_t es = ropekv::size_of(dt);
  void* p = add("cos_sin_cache", Role::kInput, max_pos * row, es);
  for (std::int64_t pos = 0; pos < max_pos; ++pos) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double f = std::pow(s_.rope_base, -2.0 * double(i) / double(R));
      const double angle = double(pos) * f;
      unsigned char* rp = static_cast<unsigned char*>(p) + std::size_t(pos * row) * es;
      store(rp + std::size_t(i) * es, es, orc::encode(dt, std::cos(angle)));
      store(rp + std::size_t(half + i) * es, es, orc::encode(dt, std::sin(angle)));
    }
  }
  const std::int64_t e[2] = {max_pos, R};
  const std::int64_t st[2] = {row, 1};
  a.cos_sin_cache = ropekv::make_strided(p, dt, 2, e, st);
}

void Builder::build_scales() {
  Arguments& a = d_.args;
  float* dev = nullptr;
  if (s_.scale_on_device[0] || s_.scale_on_device[1] || s_.scale_on_device[2]) {
    dev = static_cast<float*>(add("scales", Role::kInput, 4, 4));
    for (int i = 0; i < 3; ++i) dev[i] = s_.scale[i];
  }
  Scale* out[3] = {&a.q_scale, &a.k_scale, &a.v_scale};
  for (int i = 0; i < 3; ++i) {
    if (s_.scale_multiplies[i])
      *out[i] = s_.scale_on_device[i] ? Scale::on_device_multiplier(dev + i)
                                      : Scale::host_multiplier(s_.scale[i]);
    else
      *out[i] = s_.scale_on_device[i] ? Scale::on_device(dev + i) : Scale::host(s_.scale[i]);
  }
}

std::uint32_t Builder::value_code(int which) {
  const double e = double(s_.lo_exp) + double(s_.hi_exp - s_.lo_exp) * r_.uniform();
  // |value| = 2^e before quantization: value * scale, or value / multiplier.
  const double scale = double(s_.scale[which]);
  double mag = s_.scale_multiplies[which] ? std::exp2(e) / scale : std::exp2(e) * scale;
  mag = std::min(mag, std::min(orc::max_finite(s_.in) * 0.5, 1e30));
  return orc::encode(s_.in, r_.coin(0.5) ? -mag : mag);
}

std::uint32_t Builder::special_code() {
  const int bits = orc::bits_of(s_.in);
  const int man = s_.in == DType::kFloat32 ? 23 : (s_.in == DType::kBFloat16 ? 7 : 10);
  const std::uint32_t sign = r_.coin(0.5) ? (1u << (bits - 1)) : 0u;
  const std::uint32_t exp_all = ((1u << (bits - 1)) - 1u) & ~((1u << man) - 1u);
  if (r_.coin(0.5)) return sign | exp_all;  // +-inf
  const std::uint32_t payload = std::uint32_t(r_.range(1, (std::int64_t(1) << man) - 1));
  return sign | exp_all | payload;  // NaN, quiet or signalling
}

void Builder::fill_inputs() {
  Arguments& a = d_.args;
  const std::size_t es = ropekv::size_of(s_.in);
  struct In {
    const TensorView* v;
    int which;
  };
  const In ins[] = {{&a.q_rope, 0}, {&a.q_nope, 0}, {&a.k_rope, 1}, {&a.k_nope, 1}, {&a.v, 2}};
  std::vector<const TensorView*> nonempty;
  for (const In& in : ins) {
    const TensorView& v = *in.v;
    if (!v.present() || v.numel() == 0) continue;
    nonempty.push_back(in.v);
    for (std::int64_t t = 0; t < v.extent[0]; ++t)
      for (std::int64_t h = 0; h < v.extent[1]; ++h)
        for (std::int64_t d = 0; d < v.extent[2]; ++d) {
          const std::uint32_t c = value_code(in.which);
          d_.nonzero_inputs += orc::decode(s_.in, c) != 0.0 ? 1 : 0;
          store(at(v, t, h, d), es, c);
        }
  }
  if (nonempty.empty()) return;
  auto random_element = [&]() {
    const TensorView& v = *nonempty[std::size_t(r_.range(0, std::int64_t(nonempty.size()) - 1))];
    return at(v, r_.range(0, v.extent[0] - 1), r_.range(0, v.extent[1] - 1),
              r_.range(0, v.extent[2] - 1));
  };
  for (int i = 0; i < s_.specials; ++i) store(random_element(), es, special_code());
  for (int i = 0; i < s_.zeros; ++i)
    store(random_element(), es, r_.coin(0.5) ? 0u : (1u << (orc::bits_of(s_.in) - 1)));
}

CaseData build_case(const Spec& s) {
  CaseData d;
  Builder(s, d).build();
  return d;
}

// ------------------------------------------------------------------ memory plumbing

// (buffer index, byte offset) of a pointer into the case's buffers; -1 if none.
std::pair<int, std::size_t> locate(const CaseData& d, const void* p, std::size_t size) {
  const unsigned char* q = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < d.buffers.size(); ++i) {
    const unsigned char* b = d.buffers[i].ptr();
    if (q >= b && q + size <= b + d.buffers[i].bytes) return {int(i), std::size_t(q - b)};
  }
  return {-1, 0};
}

Arguments rebase(const CaseData& d, const Arguments& a, const std::vector<unsigned char*>& bases) {
  Arguments out = a;
  rebase_pointers(out, [&](const void* p) -> const void* {
    if (p == nullptr) return nullptr;
    const auto loc = locate(d, p, 0);
    if (loc.first < 0) {
      std::fprintf(stderr, "grid suite: a pointer (%p) outside the case's buffers\n", p);
      std::abort();
    }
    return bases[std::size_t(loc.first)] + loc.second;
  });
  return out;
}

// The case's buffers in a backend's memory.
class BackendBuffers {
 public:
  BackendBuffers(const BackendMemory& mem, const CaseData& d) : mem_(mem) {
    for (const HostBuffer& b : d.buffers) {
      unsigned char* p = static_cast<unsigned char*>(mem.alloc(b.bytes));
      mem.upload(p, b.ptr(), b.bytes);
      ptrs_.push_back(p);
    }
  }
  ~BackendBuffers() {
    for (unsigned char* p : ptrs_) mem_.release(p);
  }
  BackendBuffers(const BackendBuffers&) = delete;
  BackendBuffers& operator=(const BackendBuffers&) = delete;
  const std::vector<unsigned char*>& ptrs() const { return ptrs_; }
  std::vector<std::vector<unsigned char>> download(const CaseData& d) const {
    std::vector<std::vector<unsigned char>> out(d.buffers.size());
    for (std::size_t i = 0; i < d.buffers.size(); ++i) {
      out[i].resize(d.buffers[i].bytes);
      mem_.download(out[i].data(), ptrs_[i], d.buffers[i].bytes);
    }
    return out;
  }

 private:
  const BackendMemory& mem_;
  std::vector<unsigned char*> ptrs_;
};

// Every byte of every element of the output views, enumerated: the empty
// string when no byte belongs to two elements, else where they meet.
std::string output_overlap(const CaseData& d) {
  const Arguments& a = d.args;
  std::vector<std::vector<unsigned char>> owner(d.buffers.size());
  for (std::size_t i = 0; i < d.buffers.size(); ++i) owner[i].assign(d.buffers[i].bytes, 0);
  const TensorView* outs[] = {&a.q_rope_out, &a.q_nope_out, &a.k_cache_rope, &a.k_cache_nope,
                              &a.v_cache};
  const char* names[] = {"q_rope_out", "q_nope_out", "k_cache_rope", "k_cache_nope", "v_cache"};
  for (int o = 0; o < 5; ++o) {
    const TensorView& v = *outs[o];
    if (!v.present() || v.numel() == 0) continue;
    const std::size_t es = ropekv::size_of(v.dtype);
    const auto loc = locate(d, v.data, 0);
    if (loc.first < 0) return std::string(names[o]) + " outside the buffers";
    std::vector<unsigned char>& own = owner[std::size_t(loc.first)];
    std::int64_t ext[4] = {1, 1, 1, 1}, str[4] = {0, 0, 0, 0};
    for (int k = 0; k < v.rank; ++k) {
      ext[4 - v.rank + k] = v.extent[k];
      str[4 - v.rank + k] = v.stride[k];
    }
    for (std::int64_t i0 = 0; i0 < ext[0]; ++i0)
      for (std::int64_t i1 = 0; i1 < ext[1]; ++i1)
        for (std::int64_t i2 = 0; i2 < ext[2]; ++i2)
          for (std::int64_t i3 = 0; i3 < ext[3]; ++i3) {
            const std::int64_t e = i0 * str[0] + i1 * str[1] + i2 * str[2] + i3 * str[3];
            const std::size_t b = loc.second + std::size_t(e) * es;
            if (b + es > own.size()) return std::string(names[o]) + " runs past its buffer";
            for (std::size_t k = 0; k < es; ++k) {
              if (own[b + k] != 0)
                return std::string(names[o]) + " meets " + names[own[b + k] - 1] + " at byte " +
                       std::to_string(b + k) + " of " + d.buffers[std::size_t(loc.first)].name;
              own[b + k] = static_cast<unsigned char>(o + 1);
            }
          }
  }
  return std::string();
}

// ------------------------------------------------------------------ tallies
int format_slot(DType d) {
  switch (d) {
    case DType::kFloat8E4M3FN: return 0;
    case DType::kFloat8E5M2: return 1;
    case DType::kFloat8E4M3FNUZ: return 2;
    case DType::kBFloat16: return 3;
    case DType::kFloat16: return 4;
    default: return 5;  // fp32
  }
}
const DType kSlotDtypes[6] = {DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E4M3FNUZ,
                              DType::kBFloat16,     DType::kFloat16,    DType::kFloat32};

struct FormatTally {
  std::uint64_t elements = 0, identical = 0, beyond_one_step = 0;
  std::int64_t max_steps = 0;
};

struct Tallies {
  FormatTally formats[6];
  std::map<std::string, std::set<int>> cases_run;  // backend name -> case indices
  std::uint64_t bytes_compared = 0;                // device vs host
  std::uint64_t printed_at = ~0ull;
};
Tallies& tallies() {
  static Tallies t;
  return t;
}

std::string percent(std::uint64_t part, std::uint64_t whole) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.4f%%", whole == 0 ? 100.0 : 100.0 * double(part) / double(whole));
  return b;
}

// The oracle-agreement line (host backend) and the fraction it bounds.
std::string agreement_line(double* non_identical_fraction) {
  const Tallies& t = tallies();
  std::uint64_t n = 0, same = 0, beyond = 0;
  std::int64_t max_steps = 0;
  std::string per;
  for (int i = 0; i < 5; ++i) {
    const FormatTally& f = t.formats[i];
    n += f.elements;
    same += f.identical;
    beyond += f.beyond_one_step;
    max_steps = std::max(max_steps, f.max_steps);
    char b[128];
    std::snprintf(b, sizeof(b), "%s%s %s of %llu (max %lld)", per.empty() ? "" : ", ",
                  ropekv::to_string(kSlotDtypes[i]), percent(f.identical, f.elements).c_str(),
                  static_cast<unsigned long long>(f.elements), static_cast<long long>(f.max_steps));
    per += b;
  }
  const FormatTally& f32 = t.formats[5];
  if (non_identical_fraction != nullptr)
    *non_identical_fraction = n == 0 ? 0.0 : double(n - same) / double(n);
  char b[768];
  std::snprintf(b, sizeof(b),
                "oracle agreement: %s of %llu FP8/bf16/fp16 elements bit-identical, max %lld "
                "step%s%s [%s]; fp32: %s of %llu bit-identical, max %lld ulp, all within the "
                "float32 error bound",
                percent(same, n).c_str(), static_cast<unsigned long long>(n),
                static_cast<long long>(max_steps), max_steps == 1 ? "" : "s",
                beyond == 0 ? ""
                            : (" (" + std::to_string(beyond) +
                               " more than 1 step apart, each within the float32 error bound)")
                                  .c_str(),
                per.c_str(), percent(f32.identical, f32.elements).c_str(),
                static_cast<unsigned long long>(f32.elements),
                static_cast<long long>(f32.max_steps));
  return b;
}

std::uint64_t total_elements() {
  std::uint64_t n = 0;
  for (const FormatTally& f : tallies().formats) n += f.elements;
  return n;
}

// Prints the summary lines once for each new state of the tallies.
void print_summary() {
  Tallies& t = tallies();
  const std::uint64_t n = total_elements();
  const std::uint64_t key = n * 1000003ull + t.bytes_compared;
  if (key == t.printed_at) return;
  t.printed_at = key;
  if (n != 0) std::printf("[ grid ] %s\n", agreement_line(nullptr).c_str());
  if (t.bytes_compared != 0)
    std::printf(
        "[ grid ] %llu output bytes (query outputs and whole caches) bit-identical to the "
        "host backend\n",
        static_cast<unsigned long long>(t.bytes_compared));
  std::fflush(stdout);
}

class SummaryEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { print_summary(); }
};
[[maybe_unused]] ::testing::Environment* const kSummaryEnvironment =
    ::testing::AddGlobalTestEnvironment(new SummaryEnvironment);

// ------------------------------------------------------------------ one case
// Collects failure details (the first few of each kind) for one message.
class Failures {
 public:
  void add(const std::string& kind, const std::string& detail) {
    int& n = counts_[kind];
    if (n++ < 6) details_ += "\n    " + detail;
  }
  bool empty() const { return counts_.empty(); }
  std::string report() const {
    std::string s;
    for (const auto& kv : counts_) s += "\n  " + std::to_string(kv.second) + " x " + kv.first;
    return s + "\n  first details:" + details_;
  }

 private:
  std::map<std::string, int> counts_;
  std::string details_;
};

std::string byte_detail(const HostBuffer& b, std::size_t off, unsigned char want,
                        unsigned char got) {
  char s[200];
  std::snprintf(s, sizeof(s), "%s byte %zu of %zu: expected 0x%02x, got 0x%02x", b.name.c_str(),
                off, b.bytes, want, got);
  return s;
}

void run_case(const BackendMemory& mem, int index) {
  const Spec s = make_spec(index);
  const std::string what = s.describe();
  tallies().cases_run[mem.name].insert(index);
  CaseData d = build_case(s);
  EXPECT_TRUE(d.layout_errors.empty()) << what << d.layout_errors;
  if (s.nnz > 0) {
    ASSERT_GT(d.nonzero_inputs, 0) << what << "\n  generator: all-zero inputs";
  }

  const std::string overlap = output_overlap(d);
  ASSERT_TRUE(overlap.empty()) << what << "\n  generator: overlapping output views: " << overlap;

  // ---- the oracle, on the host mirror
  const orc::Reference ref = orc::reference(d.args);
  ASSERT_TRUE(ref.error.empty()) << what << "\n  generator: " << ref.error;
  ASSERT_EQ(ref.bad_tokens, d.expected_bad) << what
                                            << "\n  generator and oracle disagree on "
                                               "the number of bad tokens";

  // ---- the backend under test
  BackendBuffers dev(mem, d);
  const Arguments dargs = rebase(d, d.args, dev.ptrs());
  const ropekv::Result r = ropekv::run(dargs, mem.backend);
  if (r.status == ropekv::Status::kErrorOverlap) {
    FAIL() << what << "\n  ropekv::run rejected output views that share no byte (every element "
           << "of every output view enumerated): " << r.message;
  }
  ASSERT_TRUE(r.ok()) << what << "\n  ropekv::run: " << ropekv::to_string(r.status) << ": "
                      << r.message;
  mem.synchronize();
  const std::vector<std::vector<unsigned char>> got = dev.download(d);

  Failures fail;
  // ---- which bytes the contract names
  std::vector<std::vector<unsigned char>> named(d.buffers.size());
  for (std::size_t i = 0; i < d.buffers.size(); ++i) named[i].assign(d.buffers[i].bytes, 0);
  for (const orc::ExpectedElement& e : ref.elements) {
    const std::size_t size = std::size_t(orc::bits_of(e.dtype) / 8);
    const auto loc = locate(d, e.address, size);
    ASSERT_GE(loc.first, 0) << what << "\n  oracle element outside the buffers: " << e.describe();
    ASSERT_EQ(d.buffers[std::size_t(loc.first)].role, Role::kOutput) << what;
    for (std::size_t k = 0; k < size; ++k) {
      unsigned char& m = named[std::size_t(loc.first)][loc.second + k];
      ASSERT_EQ(m, 0) << what << "\n  generator: two writes to one byte: " << e.describe();
      m = 1;
    }
  }

  // ---- guards, inputs, counter
  for (std::size_t i = 0; i < d.buffers.size(); ++i) {
    const HostBuffer& b = d.buffers[i];
    if (b.role == Role::kCounter) continue;
    for (std::size_t k = 0; k < b.bytes; ++k) {
      if (named[i][k] || got[i][k] == b.ptr()[k]) continue;
      fail.add(b.role == Role::kInput ? "input bytes changed" : "guard bytes overwritten",
               byte_detail(b, k, b.ptr()[k], got[i][k]));
    }
  }
  if (d.counter_buffer >= 0) {
    unsigned long long c;
    const auto loc = locate(d, d.args.checked.skipped_tokens, 8);
    std::memcpy(&c, got[std::size_t(loc.first)].data() + loc.second, 8);
    const unsigned long long want =
        d.counter_init + (s.checked ? static_cast<unsigned long long>(ref.bad_tokens) : 0ull);
    if (c != want)
      fail.add("wrong checked.skipped_tokens",
               "skipped_tokens = " + std::to_string(c) + ", expected " + std::to_string(want) +
                   " (initial " + std::to_string(d.counter_init) + " + " +
                   std::to_string(ref.bad_tokens) + " bad tokens)");
  }

  if (mem.backend == ropekv::Backend::kHost) {
    // ---- every named element against the oracle
    Tallies& t = tallies();
    for (const orc::ExpectedElement& e : ref.elements) {
      const int bits = orc::bits_of(e.dtype);
      const auto loc = locate(d, e.address, std::size_t(bits / 8));
      const std::uint32_t code =
          orc::load_code(got[std::size_t(loc.first)].data() + loc.second, bits);
      FormatTally& f = t.formats[format_slot(e.dtype)];
      ++f.elements;
      if (code == e.nearest) {
        ++f.identical;
        continue;
      }
      if (!e.allows(code)) {
        char b[64];
        std::snprintf(b, sizeof(b), "; library wrote 0x%x", code);
        fail.add(orc::is_nan_code(e.dtype, e.nearest) || orc::is_nan_code(e.dtype, code)
                     ? "elements whose NaN handling differs from the oracle"
                     : "elements outside the float32 error bound of the oracle's value",
                 e.describe() + b);
        continue;
      }
      const std::int64_t steps =
          std::max<std::int64_t>(1, orc::step_distance(e.dtype, code, e.nearest));
      f.max_steps = std::max(f.max_steps, steps);
      if (steps > 1 && e.dtype != DType::kFloat32) ++f.beyond_one_step;
    }
  } else {
    // ---- the same case on the host backend: bit-identical outputs
    std::vector<std::shared_ptr<unsigned char>> host_copies;
    std::vector<unsigned char*> bases;
    for (const HostBuffer& b : d.buffers) {
      host_copies.push_back(aligned_bytes(b.bytes));
      std::memcpy(host_copies.back().get(), b.ptr(), b.bytes);
      bases.push_back(host_copies.back().get());
    }
    const ropekv::Result hr = ropekv::run(rebase(d, d.args, bases), ropekv::Backend::kHost);
    ASSERT_TRUE(hr.ok()) << what << "\n  host backend: " << hr.message;
    std::uint64_t compared = 0;
    for (std::size_t i = 0; i < d.buffers.size(); ++i) {
      const HostBuffer& b = d.buffers[i];
      if (b.role == Role::kInput) continue;
      for (std::size_t k = 0; k < b.bytes; ++k) {
        const unsigned char h = bases[i][k];
        if (got[i][k] != h)
          fail.add("bytes differing from the host backend",
                   byte_detail(b, k, h, got[i][k]) + (named[i][k] ? " (named)" : " (guard)"));
      }
      compared += b.bytes;
    }
    tallies().bytes_compared += compared;
  }
  if (!fail.empty()) ADD_FAILURE() << what << "\n  on backend " << mem.name << ":" << fail.report();
}

}  // namespace

// ------------------------------------------------------------------ registration
void PrintTo(const GridParam& param, std::ostream* os) {
  *os << "case " << param.case_index << " on " << param.memory().name;
}

void PrintTo(MemoryFn memory, std::ostream* os) { *os << memory().name; }

int grid_num_cases() { return kNumCases; }

std::vector<GridParam> grid_params(MemoryFn memory) {
  std::vector<GridParam> v;
  for (int i = 0; i < kNumCases; ++i) v.push_back(GridParam{memory, i});
  return v;
}

std::string grid_case_name(const ::testing::TestParamInfo<GridParam>& info) {
  return make_spec(info.param.case_index).name();
}

std::string grid_summary_name(const ::testing::TestParamInfo<MemoryFn>&) { return "all"; }

}  // namespace ropekv_test

// Other backends are checked against the host backend: without it in the
// build they skip, and say so.
#define ROPEKV_SKIP_WITHOUT_HOST_REFERENCE(mem)                                       \
  do {                                                                                \
    if ((mem).backend != ropekv::Backend::kHost &&                                    \
        !ropekv::backend_compiled(ropekv::Backend::kHost))                            \
      GTEST_SKIP() << (mem).name                                                      \
                   << " is checked against the host backend, which this build lacks " \
                      "(ROPEKV_ENABLE_KOKKOS=OFF): skipped (not passed)";             \
  } while (0)

TEST_P(GridCase, Run) {
  const ropekv_test::BackendMemory& mem = GetParam().memory();
  if (!mem.available()) GTEST_SKIP() << mem.why_unavailable;
  ROPEKV_SKIP_WITHOUT_HOST_REFERENCE(mem);
  ropekv_test::run_case(mem, GetParam().case_index);
}

// Runs every case not yet run in this process (all of them when this test
// runs alone, as under ctest), then reports. For the host backend it bounds
// the fraction of FP8/bf16/fp16 elements that are not the oracle's nearest
// code. Such a difference needs the float32 value within float32 rounding
// error of a rounding boundary of the output format: for an element whose
// products sum to S, the float32 path is within 3 * 2^-24 * S of the exact
// value, while the output format's steps are 2^-3 (FP8), 2^-8 (bf16) or 2^-11
// (fp16) of the value, so the chance is about 6 * 2^-24 * S / step: < 1e-5
// for FP8, ~1e-4 for bf16, ~1e-3 for fp16 where |value| ~ S (more where
// rotation cancels). One sixth of the outputs are fp16 so ~2e-4 is expected;
// the bound 0.1% leaves room for cancellation and fails when rounding is
// systematically off (e.g. truncation instead of RNE differs in ~50%).
TEST_P(GridSummary, AllCases) {
  const ropekv_test::BackendMemory& mem = GetParam()();
  if (!mem.available()) GTEST_SKIP() << mem.why_unavailable;
  ROPEKV_SKIP_WITHOUT_HOST_REFERENCE(mem);
  auto& run = ropekv_test::tallies().cases_run[mem.name];
  for (int i = 0; i < ropekv_test::kNumCases; ++i) {
    if (run.count(i) != 0) continue;
    ropekv_test::run_case(mem, i);
  }
  EXPECT_EQ(int(run.size()), ropekv_test::kNumCases);
  if (mem.backend == ropekv::Backend::kHost) {
    double frac = 0;
    const std::string line = ropekv_test::agreement_line(&frac);
    EXPECT_GT(ropekv_test::total_elements(), 0u);
    EXPECT_LE(frac, ropekv_test::kMaxNonIdenticalFraction) << line;
  }
  ropekv_test::print_summary();
}

// The generator covers what the contract asks the grid to cover (so that a change
// to it cannot silently drop a feature).
TEST(GridCoverage, GeneratorCoversTheSpec) {
  using ropekv_test::Layout;
  std::map<std::string, int> hits;
  for (int i = 0; i < ropekv_test::kNumCases; ++i) {
    const ropekv_test::Spec s = ropekv_test::make_spec(i);
    auto hit = [&](const std::string& k, bool cond) { hits[k] += cond ? 1 : 0; };
    const bool slots = s.addressing == ropekv::Addressing::kSlotMapping;
    hit("gqa", !s.mla());
    hit("mla", s.mla());
    hit("mla 64+512", s.mla() && s.rdim == 64 && s.ndim == 512);
    hit("neox", s.style == ropekv::RopeStyle::kNeox);
    hit("interleaved", s.style == ropekv::RopeStyle::kInterleaved);
    hit("partial rotary", !s.mla() && s.ndim > 0);
    hit("N = 0", s.ndim == 0);
    hit("odd R/2 and odd N", (s.rdim / 2) % 2 == 1 && s.ndim % 2 == 1);
    hit("nnz = 0", s.nnz == 0);
    hit("nnz >= 200", s.nnz >= 200);
    for (ropekv::DType d :
         {ropekv::DType::kBFloat16, ropekv::DType::kFloat16, ropekv::DType::kFloat32})
      hit(std::string("in ") + ropekv::to_string(d), s.in == d);
    for (ropekv::DType d : ropekv_test::kSlotDtypes) {
      hit(std::string("q_out ") + ropekv::to_string(d), s.q_out == d && s.nnz > 0);
      hit(std::string("cache ") + ropekv::to_string(d), s.cache == d && s.nnz > 0);
    }
    hit("q_out != cache dtype", s.q_out != s.cache);
    hit("cos fp32, input 16-bit", s.cos == ropekv::DType::kFloat32 && s.in != s.cos);
    hit("cos bf16", s.cos == ropekv::DType::kBFloat16);
    hit("cos fp16", s.cos == ropekv::DType::kFloat16);
    hit("positions int32", s.pos_dtype == ropekv::DType::kInt32);
    hit("positions int64", s.pos_dtype == ropekv::DType::kInt64);
    hit("slot mapping with padding", slots && s.pad_fraction > 0 && s.nnz > 4);
    hit("page table with padding", !slots && s.pad_fraction > 0 && s.nnz > 4);
    hit("page table, kv_positions = positions", !slots && s.kvpos_is_positions);
    hit("page table, separate kv_positions", !slots && !s.kvpos_is_positions);
    hit("fused qkv, padded rows", !s.mla() && s.fused_inputs && s.in_token_pad > 0);
    hit("mla fused kv input", s.mla() && s.fused_inputs);
    hit("separate inputs", !s.fused_inputs);
    hit("Dv != D", !s.mla() && s.vdim != s.head_dim());
    for (Layout l : {Layout::kNhd, Layout::kNhdPadded, Layout::kHnd, Layout::kStackedPageMajor,
                     Layout::kStackedKvMajor, Layout::kMlaSingle, Layout::kMlaSplit})
      hit(std::string("layout ") + ropekv_test::layout_name(l), s.layout == l);
    hit("page size 1", s.page_size == 1);
    hit("page size 16", s.page_size == 16);
    hit("page size 64", s.page_size == 64);
    hit("page size not a power of two", (s.page_size & (s.page_size - 1)) != 0);
    hit("padded page stride", s.page_pad > 0);
    hit("padded page stride, not a multiple of the row",
        s.page_pad > 0 && s.odd_pads && s.layout != Layout::kMlaSplit);
    hit("padded q_out rows, not a multiple of the row", s.q_out_token_pad > 0 && s.odd_pads);
    hit("padded q_out rows", s.q_out_token_pad > 0);
    hit("padded cos/sin rows", s.cos_row_pad > 0);
    hit("device scales", s.scale_on_device[0] || s.scale_on_device[1] || s.scale_on_device[2]);
    hit("unequal non-unit scales", s.scale[1] != s.scale[2] && s.scale[1] != 1.0f);
    const bool fp8 =
        s.nnz > 0 && (ropekv_oracle::is_fp8(s.q_out) || ropekv_oracle::is_fp8(s.cache));
    for (int i = 0; i < 3; ++i) {
      hit("multiplying host scale, FP8 output",
          fp8 && s.scale_multiplies[i] && !s.scale_on_device[i]);
      hit("multiplying device scale, FP8 output",
          fp8 && s.scale_multiplies[i] && s.scale_on_device[i]);
    }
    hit("both conventions in one call", fp8 && (s.scale_multiplies[0] != s.scale_multiplies[1] ||
                                                s.scale_multiplies[1] != s.scale_multiplies[2]));
    hit("saturating values", s.hi_exp >= 17 && s.nnz > 0);
    hit("NaN/inf inputs", s.specials > 0 && s.nnz > 0);
    hit("zero inputs", s.zeros > 0 && s.nnz > 0);
    hit("checked, bad tokens, slot mapping", s.checked && s.num_bad > 0 && slots);
    hit("checked, bad tokens, page table", s.checked && s.num_bad > 0 && !slots);
    hit("counter with checked mode off", !s.checked && s.counter);
    hit("misaligned margins", s.misaligned);
  }
  for (const auto& kv : hits)
    EXPECT_GE(kv.second, 3) << "grid covers '" << kv.first << "' only " << kv.second << " times";
  EXPECT_GE(ropekv_test::kNumCases, 500);
}
