// The grid suite's case generator: make_spec draws case `index`'s spec from its own
// seed; GridCoverage checks that the 540 specs (and the cases built from them) cover the
// contract's grid.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "grid_case.hpp"
#include "oracle.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv_test {
namespace {

constexpr std::uint64_t kBaseSeed = 0x726f70656b76ull;  // "ropekv"

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t case_seed(int index) { return splitmix64(kBaseSeed + std::uint64_t(index)); }

// ------------------------------------------------------------------ case specs
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

}  // namespace

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

namespace {

DType index_dtype(Rng& r) { return r.coin(0.5) ? DType::kInt32 : DType::kInt64; }

}  // namespace

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

}  // namespace ropekv_test

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

// What only the built cases show: checked mode's exact boundaries, each in a token that
// this one index alone makes bad (counted from the cases' index arrays, not from the
// generator's bookkeeping), and the scale-step probes of fp32-input cases.
TEST(GridCoverage, BuiltCasesHitTheBoundaries) {
  std::map<std::string, int> hits;
  for (int i = 0; i < ropekv_test::kNumCases; ++i) {
    const ropekv_test::Spec s = ropekv_test::make_spec(i);
    if (!(s.checked && s.nnz > 0) && s.in != ropekv::DType::kFloat32) continue;
    const ropekv_test::CaseData d = ropekv_test::build_case(s);
    const ropekv::Arguments& a = d.args;
    std::map<std::string, bool> in_case;
    auto hit = [&](const std::string& k, bool cond) { in_case[k] = in_case[k] || cond; };
    const bool fp8_v = !s.mla() && ropekv_oracle::is_fp8(s.cache) && s.nnz > 0;
    hit("scale-step probes, dividing value scale",
        fp8_v && d.scale_probes > 0 && !s.scale_multiplies[2] && s.scale[2] != 1);
    hit("scale-step probes, multiplying value scale",
        fp8_v && d.scale_probes > 0 && s.scale_multiplies[2] && s.scale[2] != 1);
    const std::int64_t num_pages = a.k_cache_rope.extent[0], ps = a.k_cache_rope.extent[1];
    const std::int64_t max_pos = a.cos_sin_cache.extent[0];
    const ropekv::CacheIndex& ci = a.cache_index;
    for (std::int64_t t = 0; s.checked && t < s.nnz; ++t) {
      const std::int64_t pos = ropekv_oracle::load_index(a.positions, t);
      const bool pos_ok = pos >= 0 && pos < max_pos;
      if (ci.form == ropekv::Addressing::kSlotMapping) {
        const std::int64_t slot = ropekv_oracle::load_index(ci.slot_mapping, t);
        if (slot < 0) continue;  // padding
        const std::int64_t page = slot / ps;
        hit("checked, slot mapping: page == P", page == num_pages && pos_ok);
        hit("checked, slot mapping: position == max_pos", page < num_pages && pos == max_pos);
        continue;
      }
      const std::int64_t b = ropekv_oracle::load_index(ci.batch_indices, t),
                         kv = ropekv_oracle::load_index(ci.kv_positions, t);
      const std::int64_t batch = ci.kv_indptr.extent[0] - 1, entries = ci.kv_indices.extent[0];
      if (b < 0) continue;  // padding
      hit("checked, page table: batch index == kv_indptr's end", b == batch && kv >= 0 && pos_ok);
      if (b >= batch || kv < 0) continue;
      const std::int64_t begin = ropekv_oracle::load_index(ci.kv_indptr, b),
                         end = ropekv_oracle::load_index(ci.kv_indptr, b + 1);
      const std::int64_t j = kv / ps;
      // kv_indices[end] a valid page: only kv_indptr[b + 1] says the position is past the end
      const std::int64_t next = end < entries ? ropekv_oracle::load_index(ci.kv_indices, end) : -1;
      const bool next_valid = next >= 0 && next < num_pages;
      hit("checked, page table: kv position just past the sequence's pages",
          j == end - begin && next_valid && pos_ok);
      if (j >= end - begin) continue;
      const std::int64_t page = ropekv_oracle::load_index(ci.kv_indices, begin + j);
      hit("checked, page table: page == P", page == num_pages && pos_ok);
      hit("checked, page table: position == max_pos",
          page >= 0 && page < num_pages && pos == max_pos);
    }
    for (const auto& kv : in_case) hits[kv.first] += kv.second ? 1 : 0;
  }
  const char* const kExpected[] = {
      "scale-step probes, dividing value scale",
      "scale-step probes, multiplying value scale",
      "checked, slot mapping: page == P",
      "checked, slot mapping: position == max_pos",
      "checked, page table: batch index == kv_indptr's end",
      "checked, page table: kv position just past the sequence's pages",
      "checked, page table: page == P",
      "checked, page table: position == max_pos"};
  for (const char* k : kExpected) {
    EXPECT_GE(hits[k], 3) << "built grid cases hit '" << k << "' in only " << hits[k] << " cases";
    std::printf("[ coverage ] %s: %d cases\n", k, hits[k]);
  }
}
