// The layout and addressing helpers: mla_query_views, mla_key_views,
// slot_mapping_index, page_table_index and step_of.
//
//  * Layouts.*Fields: each helper's views hold exactly the pointers, extents
//    and strides written out by hand from the layout's definition.
//  * Layouts.*AgainstOracle: calls built with the helpers alone (MLA with
//    DeepSeek's nope-first query and kv_c / k_pe views into one kv_a buffer,
//    page tables with mixed index dtypes and padding, slot mapping) run on the
//    host backend; every output element the oracle names (tests/oracle.hpp)
//    must be a code its float32 bound allows, every other byte of the query
//    output and the cache keeps its guard, and the inputs are unchanged.
//    Layouts.HostFastPathAgainstOracle checks the host fast path the same
//    way, over all its dtypes, R, styles, N and Dv (input views by hand).
//  * LayoutsValidate.*: what validation says about helper-built arguments
//    that are wrong in the ways a user gets them wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "argument_views.hpp"
#include "detail/lower.hpp"
#include "host/isa.hpp"
#include "oracle.hpp"
#include "ropekv/ropekv.hpp"

namespace {

using namespace ropekv;
namespace orc = ropekv_oracle;

constexpr unsigned char kGuard = 0xC3;

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// A byte buffer with 8-byte aligned storage.
struct Bytes {
  explicit Bytes(std::size_t n, unsigned char fill = 0) : words((n + 7) / 8), size(n) {
    std::memset(data(), fill, n);
  }
  unsigned char* data() { return reinterpret_cast<unsigned char*>(words.data()); }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(data());
  }
  std::vector<std::uint64_t> words;
  std::size_t size;
};

// Random bf16 values in about [-2, 2] (never all zero), seeded.
void fill_bf16(Bytes& b, std::uint32_t seed) {
  std::uint32_t s = seed;
  for (std::size_t i = 0; i < b.size / 2; ++i) {
    s = s * 1664525u + 1013904223u;
    b.as<std::uint16_t>()[i] = to_bf16(float((s >> 8) & 0xFFFF) / 16384.0f - 2.0f + 1.0f / 128);
  }
}

void fill_cos_sin(Bytes& b, std::int64_t max_pos, std::int64_t r) {
  ropekv_oracle::fill_rope_table(b.as<float>(), max_pos, r);
}

void expect_view(const TensorView& v, const void* data, DType dtype,
                 std::initializer_list<std::int64_t> extents,
                 std::initializer_list<std::int64_t> strides, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(v.data, data);
  EXPECT_EQ(v.dtype, dtype);
  ASSERT_EQ(v.rank, int(extents.size()));
  int k = 0;
  for (std::int64_t e : extents) EXPECT_EQ(v.extent[k++], e) << "extent[" << k - 1 << "]";
  k = 0;
  for (std::int64_t s : strides) EXPECT_EQ(v.stride[k++], s) << "stride[" << k - 1 << "]";
}

// Runs `a` on the host backend and checks it against the oracle: every named
// element allowed and the float32 formula's code, nothing else in `outputs`
// written, `inputs` unchanged.
void expect_matches_oracle(const Arguments& a, std::vector<Bytes*> outputs,
                           std::vector<Bytes*> inputs, std::int64_t want_written,
                           std::int64_t want_padding) {
  const orc::Reference ref = orc::reference(a);
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  EXPECT_EQ(ref.written_tokens, want_written);
  EXPECT_EQ(ref.padding_tokens, want_padding);
  ASSERT_FALSE(ref.elements.empty());
  std::vector<std::vector<unsigned char>> before;
  for (Bytes* b : inputs) before.emplace_back(b->data(), b->data() + b->size);

  const Result r = run(a, Backend::kHost);
  ASSERT_TRUE(r.ok()) << to_string(r.status) << ": " << r.message;

  std::vector<std::vector<bool>> named;
  for (Bytes* b : outputs) named.emplace_back(b->size, false);
  std::size_t bad = 0, identical = 0;
  for (const orc::ExpectedElement& e : ref.elements) {
    const int bytes = orc::bits_of(e.dtype) / 8;
    bool found = false;
    for (std::size_t i = 0; i < outputs.size() && !found; ++i) {
      const unsigned char* lo = outputs[i]->data();
      if (e.address < lo || e.address + bytes > lo + outputs[i]->size) continue;
      found = true;
      for (int k = 0; k < bytes; ++k) named[i][std::size_t(e.address - lo) + k] = true;
    }
    ASSERT_TRUE(found) << "element outside the output buffers: " << e.describe();
    const std::uint32_t code = orc::load_code(e.address, orc::bits_of(e.dtype));
    identical += code == e.nearest;
    if (!e.matches(code) && bad++ < 5)
      ADD_FAILURE() << e.describe() << "; library wrote 0x" << std::hex << code;
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(2 * identical, ref.elements.size()) << "most elements are the nearest code";
  for (std::size_t i = 0; i < outputs.size(); ++i)
    for (std::size_t k = 0; k < outputs[i]->size; ++k)
      if (!named[i][k] && outputs[i]->data()[k] != kGuard) {
        ADD_FAILURE() << "output buffer " << i << " byte " << k << " written outside the views";
        break;
      }
  for (std::size_t i = 0; i < inputs.size(); ++i)
    EXPECT_EQ(0, std::memcmp(inputs[i]->data(), before[i].data(), inputs[i]->size))
        << "input buffer " << i << " changed";
}

// ------------------------------------------------------------------ fields

// The set_* helpers copy each view to the field of the same name, and only
// those fields.
TEST(Layouts, SettersCopyTheirViews) {
  alignas(16) static std::uint16_t qkv[4 * (8 + 2 * 2) * 64];
  alignas(16) static std::uint8_t q_out[4 * 8 * 64], k[6 * 16 * 2 * 64], v[6 * 16 * 2 * 64];
  const QkvViews in = fused_qkv_views(qkv, DType::kBFloat16, 4, 8, 2, 64, 32);
  const HeadViews qo = split_heads(q_out, DType::kFloat8E4M3FN, 4, 8, 64, 32);
  const KvCacheViews c = nhd_kv_cache(k, v, DType::kFloat8E4M3FN, 6, 16, 2, 64, 32);
  Arguments a;
  set_inputs(a, in);
  set_query_output(a, qo);
  set_kv_cache(a, c);
  auto same = [](const TensorView& x, const TensorView& y) {
    return std::memcmp(&x, &y, sizeof x) == 0;
  };
  EXPECT_TRUE(same(a.q_rope, in.q_rope) && same(a.q_nope, in.q_nope));
  EXPECT_TRUE(same(a.k_rope, in.k_rope) && same(a.k_nope, in.k_nope) && same(a.v, in.v));
  EXPECT_TRUE(same(a.q_rope_out, qo.rope) && same(a.q_nope_out, qo.nope));
  EXPECT_TRUE(same(a.k_cache_rope, c.k_rope) && same(a.k_cache_nope, c.k_nope) &&
              same(a.v_cache, c.v));
  EXPECT_FALSE(a.cos_sin_cache.present());
  EXPECT_FALSE(a.positions.present());
  EXPECT_TRUE(validate(a, Backend::kHost).status != Status::kSuccess)
      << "no cos/sin table or positions: must not validate";
}

TEST(Layouts, MlaQueryViewsFields) {
  alignas(8) static std::uint16_t q[4 * 60];
  // 2 tokens, 3 heads of nope 5 + rope 4, rows 40 elements apart.
  HeadViews h = mla_query_views(q, DType::kBFloat16, 2, 3, 5, 4, 40);
  expect_view(h.nope, q, DType::kBFloat16, {2, 3, 5}, {40, 9, 1}, "nope first");
  expect_view(h.rope, q + 5, DType::kBFloat16, {2, 3, 4}, {40, 9, 1}, "rope after nope");
  h = mla_query_views(q, DType::kBFloat16, 2, 3, 5, 4);  // packed rows
  EXPECT_EQ(h.nope.stride[0], 27);
  EXPECT_EQ(h.rope.stride[0], 27);
  h = mla_query_views(q, DType::kBFloat16, 2, 3, 0, 4);  // no nope part
  EXPECT_FALSE(h.nope.present());
  expect_view(h.rope, q, DType::kBFloat16, {2, 3, 4}, {12, 4, 1}, "rope only");
}

TEST(Layouts, MlaKeyViewsFields) {
  // kv_c and k_pe as views into one kv_a [nnz, latent 6 + rope 4 + pad 2].
  alignas(8) static float kv_a[3 * 12];
  const HeadViews k = mla_key_views(kv_a, kv_a + 6, DType::kFloat32, 3, 6, 4, 12, 12);
  expect_view(k.nope, kv_a, DType::kFloat32, {3, 1, 6}, {12, 6, 1}, "latent");
  expect_view(k.rope, kv_a + 6, DType::kFloat32, {3, 1, 4}, {12, 4, 1}, "k_pe");
  // Separate packed buffers.
  alignas(8) static float lat[3 * 6], pe[3 * 4];
  const HeadViews p = mla_key_views(lat, pe, DType::kFloat32, 3, 6, 4);
  EXPECT_EQ(p.nope.stride[0], 6);
  EXPECT_EQ(p.rope.stride[0], 4);
}

TEST(Layouts, AddressingFields) {
  static std::int64_t slots[5];
  CacheIndex ci = slot_mapping_index(slots, DType::kInt64, 5);
  EXPECT_EQ(ci.form, Addressing::kSlotMapping);
  expect_view(ci.slot_mapping, slots, DType::kInt64, {5}, {1}, "slot_mapping");
  EXPECT_FALSE(ci.kv_indices.present());

  static std::int32_t idx[7], indptr[3], batch[5];
  static std::int64_t kvpos[5];
  ci = page_table_index(idx, DType::kInt32, 7, indptr, DType::kInt32, 3, batch, DType::kInt32,
                        kvpos, DType::kInt64, 5);
  EXPECT_EQ(ci.form, Addressing::kPageTable);
  EXPECT_FALSE(ci.slot_mapping.present());
  expect_view(ci.kv_indices, idx, DType::kInt32, {7}, {1}, "kv_indices");
  expect_view(ci.kv_indptr, indptr, DType::kInt32, {3}, {1}, "kv_indptr");
  expect_view(ci.batch_indices, batch, DType::kInt32, {5}, {1}, "batch_indices");
  expect_view(ci.kv_positions, kvpos, DType::kInt64, {5}, {1}, "kv_positions");
}

// step_of: each Step field holds what Arguments names so (written out here
// field by field), the sizes from their defining views.
TEST(Layouts, StepOfFields) {
  Arguments a;
  char b[32];
  TensorView* views[ropekv_test::kArgumentViews];  // in Arguments' order, as `fields` below
  ropekv_test::argument_views(a, views);
  for (int i = 0; i < ropekv_test::kArgumentViews; ++i) views[i]->data = b + i;
  a.q_rope.rank = 3;
  a.q_rope.extent[0] = 5;
  a.cache_index.kv_indices.rank = a.cache_index.kv_indptr.rank = 1;
  a.cache_index.kv_indices.extent[0] = 7;
  a.cache_index.kv_indptr.extent[0] = 4;
  const float scales[3] = {1, 2, 3};
  a.q_scale.device = scales;
  a.k_scale.device = scales + 1;
  a.v_scale.device = scales + 2;
  unsigned long long counter = 0;
  a.checked.skipped_tokens = &counter;
  a.stream = b + 20;
  const Step s = step_of(a);
  void* const fields[] = {
      s.q_rope,        s.q_nope,      s.k_rope,       s.k_nope,       s.v,
      s.q_rope_out,    s.q_nope_out,  s.k_cache_rope, s.k_cache_nope, s.v_cache,
      s.cos_sin_cache, s.positions,   s.slot_mapping, s.kv_indices,   s.kv_indptr,
      s.batch_indices, s.kv_positions};
  for (int i = 0; i < ropekv_test::kArgumentViews; ++i) EXPECT_EQ(fields[i], b + i) << "view " << i;
  EXPECT_EQ(s.q_scale, scales);
  EXPECT_EQ(s.k_scale, scales + 1);
  EXPECT_EQ(s.v_scale, scales + 2);
  EXPECT_EQ(s.skipped_tokens, &counter);
  EXPECT_EQ(s.nnz, 5);
  EXPECT_EQ(s.num_kv_indices, 7);
  EXPECT_EQ(s.kv_indptr_size, 4);
  EXPECT_EQ(s.stream, b + 20);
}

// ------------------------------------------------------------------ MLA

// DeepSeek-like MLA decode at a small size: H 4 heads, latent 32 (the
// absorbed query's nope dim too), rope 16; bf16 in, e4m3fn out.
struct MlaCase {
  static constexpr std::int64_t kNnz = 6, kH = 4, kLatent = 32, kRope = 16, kPages = 5,
                                kPageSize = 4, kMaxPos = 40;
  static constexpr std::int64_t kQRow = kH * (kLatent + kRope) + 8;  // padded query rows
  static constexpr std::int64_t kKvARow = kLatent + kRope + 4;       // padded kv_a rows

  Bytes q{kNnz * kQRow * 2}, kv_a{kNnz * kKvARow * 2}, cos{kMaxPos * kRope * 4};
  Bytes q_out{kNnz * kH * (kLatent + kRope), kGuard};
  Bytes cache{kPages * kPageSize * (kLatent + kRope), kGuard};
  Bytes ckv{kPages * kPageSize * kLatent, kGuard}, kpe{kPages * kPageSize * kRope, kGuard};
  Bytes positions{kNnz * 8};
  // Page table: 2 sequences, pages {3, 0} and {4, 1}; token 2 is padding.
  Bytes kv_indices{4 * 4}, kv_indptr{3 * 8}, batch{kNnz * 4}, kv_pos{kNnz * 4};
  Bytes slots{kNnz * 4};

  MlaCase() {
    fill_bf16(q, 11);
    fill_bf16(kv_a, 12);
    fill_cos_sin(cos, kMaxPos, kRope);
    const std::int64_t pos[kNnz] = {5, 6, 0, 7, 1, 2};
    std::memcpy(positions.data(), pos, sizeof pos);
    const std::int32_t idx[4] = {3, 0, 4, 1};
    std::memcpy(kv_indices.data(), idx, sizeof idx);
    const std::int64_t ptr[3] = {0, 2, 4};
    std::memcpy(kv_indptr.data(), ptr, sizeof ptr);
    const std::int32_t b[kNnz] = {0, 0, -1, 0, 1, 1};
    std::memcpy(batch.data(), b, sizeof b);
    // Positions in the sequence: token 3 goes to the sequence's second page.
    const std::int32_t kp[kNnz] = {1, 2, 0, 5, 0, 3};
    std::memcpy(kv_pos.data(), kp, sizeof kp);
    const std::int32_t sl[kNnz] = {17, 2, -1, 9, 0, 19};
    std::memcpy(slots.data(), sl, sizeof sl);
  }

  // Everything from the helpers; cache index and cache layout left to the caller.
  Arguments args(RopeStyle style) {
    Arguments a;
    a.kind = AttentionKind::kMla;
    a.rope_style = style;
    const HeadViews qi =
        mla_query_views(q.data(), DType::kBFloat16, kNnz, kH, kLatent, kRope, kQRow);
    a.q_rope = qi.rope;
    a.q_nope = qi.nope;
    const HeadViews k = mla_key_views(kv_a.data(), kv_a.as<std::uint16_t>() + kLatent,
                                      DType::kBFloat16, kNnz, kLatent, kRope, kKvARow, kKvARow);
    a.k_rope = k.rope;
    a.k_nope = k.nope;
    const HeadViews qo =
        mla_query_views(q_out.data(), DType::kFloat8E4M3FN, kNnz, kH, kLatent, kRope);
    a.q_rope_out = qo.rope;
    a.q_nope_out = qo.nope;
    const std::int64_t cs[2] = {kMaxPos, kRope};
    a.cos_sin_cache = make_contiguous(cos.data(), DType::kFloat32, 2, cs);
    a.positions = make_vector(positions.data(), DType::kInt64, kNnz);
    a.q_scale = Scale::host(0.0625f);
    a.k_scale = Scale::host(0.03f);
    return a;
  }
  CacheIndex page_table() {
    return page_table_index(kv_indices.data(), DType::kInt32, 4, kv_indptr.data(), DType::kInt64, 3,
                            batch.data(), DType::kInt32, kv_pos.data(), DType::kInt32, kNnz);
  }
  void single_cache(Arguments& a) {
    const KvCacheViews c =
        mla_cache_single(cache.data(), DType::kFloat8E4M3FN, kPages, kPageSize, kLatent, kRope);
    a.k_cache_rope = c.k_rope;
    a.k_cache_nope = c.k_nope;
  }
  std::vector<Bytes*> inputs() {
    return {&q, &kv_a, &cos, &positions, &kv_indices, &kv_indptr, &batch, &kv_pos, &slots};
  }
};

TEST(Layouts, MlaPageTableAgainstOracle) {
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
    SCOPED_TRACE(style == RopeStyle::kNeox ? "neox" : "interleaved");
    MlaCase m;
    Arguments a = m.args(style);
    m.single_cache(a);
    a.cache_index = m.page_table();
    expect_matches_oracle(a, {&m.q_out, &m.cache}, m.inputs(), 5, 1);
  }
}

TEST(Layouts, MlaSplitCacheSlotMappingAgainstOracle) {
  MlaCase m;
  Arguments a = m.args(RopeStyle::kNeox);
  const KvCacheViews c =
      mla_cache_split(m.ckv.data(), m.kpe.data(), DType::kFloat8E4M3FN, MlaCase::kPages,
                      MlaCase::kPageSize, MlaCase::kLatent, MlaCase::kRope);
  a.k_cache_rope = c.k_rope;
  a.k_cache_nope = c.k_nope;
  a.cache_index = slot_mapping_index(m.slots.data(), DType::kInt32, MlaCase::kNnz);
  expect_matches_oracle(a, {&m.q_out, &m.ckv, &m.kpe}, m.inputs(), 5, 1);
}

// The query's nope part comes first: a view built as if rope came first
// (split_heads) would rotate the wrong elements. The helper's rotary view
// must start `nope` elements into each head.
TEST(Layouts, MlaQueryRotatesTheTrailingRopePart) {
  MlaCase m;
  Arguments a = m.args(RopeStyle::kNeox);
  m.single_cache(a);
  a.cache_index = m.page_table();
  ASSERT_TRUE(run(a, Backend::kHost).ok());
  // Token 0 at position 5: its nope part passes through (scaled and
  // quantized), its rope part is rotated. Dequantize head 0 and compare with
  // the inputs: the nope part equals the input up to FP8 rounding, and the
  // rope part does not (position 5 rotates every pair).
  const auto* in = m.q.as<std::uint16_t>();
  auto bf = [](std::uint16_t h) {
    const std::uint32_t u = std::uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return double(f);
  };
  double nope_err = 0, rope_diff = 0;
  for (std::int64_t i = 0; i < MlaCase::kLatent + MlaCase::kRope; ++i) {
    const double got = orc::decode(DType::kFloat8E4M3FN, m.q_out.data()[i]) * 0.0625;
    const double want = bf(in[i]);
    if (i < MlaCase::kLatent)
      nope_err = std::max(nope_err, std::fabs(got - want) / (std::fabs(want) + 1e-3));
    else
      rope_diff += std::fabs(got - want);
  }
  EXPECT_LT(nope_err, 0.07) << "nope part must pass through (e4m3 has 3 mantissa bits)";
  EXPECT_GT(rope_diff, 1.0) << "rope part must be rotated";
}

// ------------------------------------------------------------------ GQA

TEST(Layouts, GqaSlotMappingAndPageTableAgainstOracle) {
  constexpr std::int64_t nnz = 5, hq = 4, hk = 2, d = 24, r = 16, pages = 6, ps = 4, max_pos = 32;
  for (bool page_table : {false, true}) {
    SCOPED_TRACE(page_table ? "page table" : "slot mapping");
    Bytes qkv{nnz * (hq + 2 * hk) * d * 2}, cos{max_pos * r * 4}, pos{nnz * 4};
    Bytes q_out{nnz * hq * d, kGuard}, k{pages * ps * hk * d, kGuard},
        v{pages * ps * hk * d, kGuard};
    Bytes slots{nnz * 8}, idx{3 * 8}, indptr{3 * 4}, batch{nnz * 8};
    fill_bf16(qkv, 21);
    fill_cos_sin(cos, max_pos, r);
    const std::int32_t p[nnz] = {9, 3, 0, 4, 31};
    std::memcpy(pos.data(), p, sizeof p);
    const std::int64_t s[nnz] = {5, -1, 0, 22, 13};
    std::memcpy(slots.data(), s, sizeof s);
    const std::int64_t ix[3] = {5, 2, 1};
    std::memcpy(idx.data(), ix, sizeof ix);
    const std::int32_t ip[3] = {0, 1, 3};
    std::memcpy(indptr.data(), ip, sizeof ip);
    const std::int64_t b[nnz] = {1, -1, 0, 1, 1};
    std::memcpy(batch.data(), b, sizeof b);

    Arguments a;
    const QkvViews in = fused_qkv_views(qkv.data(), DType::kBFloat16, nnz, hq, hk, d, r);
    a.q_rope = in.q_rope;
    a.q_nope = in.q_nope;
    a.k_rope = in.k_rope;
    a.k_nope = in.k_nope;
    a.v = in.v;
    const HeadViews qo = split_heads(q_out.data(), DType::kFloat8E5M2, nnz, hq, d, r);
    a.q_rope_out = qo.rope;
    a.q_nope_out = qo.nope;
    const KvCacheViews c =
        hnd_kv_cache(k.data(), v.data(), DType::kFloat8E4M3FN, pages, ps, hk, d, r);
    a.k_cache_rope = c.k_rope;
    a.k_cache_nope = c.k_nope;
    a.v_cache = c.v;
    const std::int64_t cs[2] = {max_pos, r};
    a.cos_sin_cache = make_contiguous(cos.data(), DType::kFloat32, 2, cs);
    a.positions = make_vector(pos.data(), DType::kInt32, nnz);
    // The page table uses the RoPE positions as kv positions (int32) and
    // int64 pages and batch indices: 2 sequences, pages {5} and {2, 1}.
    a.cache_index =
        page_table ? page_table_index(idx.data(), DType::kInt64, 3, indptr.data(), DType::kInt32, 3,
                                      batch.data(), DType::kInt64, pos.data(), DType::kInt32, nnz)
                   : slot_mapping_index(slots.data(), DType::kInt64, nnz);
    if (page_table) {  // positions of sequence 0 fit its one page
      const std::int32_t p0[nnz] = {4, 3, 2, 0, 7};
      std::memcpy(pos.data(), p0, sizeof p0);
    }
    a.q_scale = Scale::host(0.5f);
    a.k_scale = Scale::host(0.25f);
    a.v_scale = Scale::host(0.125f);
    expect_matches_oracle(a, {&q_out, &k, &v}, {&qkv, &cos, &pos, &slots, &idx, &indptr, &batch}, 4,
                          1);
  }
}

// Whether run(a, kHost) takes the host fast path: the kernel isa.cpp selects
// for a's lowering, as host_launch selects it, is a token range function.
bool takes_host_fast_path(const Arguments& a) {
  detail::LaunchParams p;
  if (!detail::lower(a, &p).ok()) return false;
  return detail::host::select_kernel_for_cpu(p).range != nullptr;
}

// The host backend's fast path (host/isa.cpp select_range: bf16 or fp16 in,
// q output and caches of one FP8 format, fp32 cos/sin, R of 64 or 128; any
// N and Dv), whose rows take bodies of their own (host/rows.hpp): every
// combination of input, FP8 format, R and style, with and without a
// non-rotary part, values of Dv == R and Dv != R (rows of a compile-time and
// a run-time length), a padding token and saturating keys. The test asserts
// that each call takes the fast path where the variant has one.
TEST(Layouts, HostFastPathAgainstOracle) {
  constexpr std::int64_t nnz = 9, hq = 8, hk = 2, pages = 4, ps = 4, max_pos = 64;
  const bool want_fast = detail::host::selected_isa().fast_path;
  if (!want_fast)
    std::printf("[ fast path ] not in the %s variant: the row path runs\n",
                detail::host::selected_isa().name);
  int cases = 0;
  for (DType in : {DType::kBFloat16, DType::kFloat16})
    for (DType out : {DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E4M3FNUZ})
      for (std::int64_t r : {64, 128})
        for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved})
          for (std::int64_t n : {0, 32})
            for (std::int64_t dv : {r, std::int64_t(80)}) {
              SCOPED_TRACE(std::string(to_string(in)) + " -> " + to_string(out) + ", R " +
                           std::to_string(r) +
                           (style == RopeStyle::kNeox ? ", NeoX" : ", interleaved") + ", N " +
                           std::to_string(n) + ", Dv " + std::to_string(dv));
              const std::int64_t d = r + n;
              // One input row per token: q heads, k heads, v heads, 8 spare.
              const std::int64_t row = (hq + hk) * d + hk * dv + 8;
              Bytes qkv{std::size_t(nnz * row * 2)}, cos{std::size_t(max_pos * r * 4)},
                  pos{nnz * 8}, slots{nnz * 8};
              Bytes q_out{std::size_t(nnz * hq * d), kGuard},
                  k{std::size_t(pages * ps * hk * d), kGuard},
                  v{std::size_t(pages * ps * hk * dv), kGuard};
              std::uint32_t s = std::uint32_t(31 + r + n + dv + 7 * cases);
              for (std::int64_t i = 0; i < nnz * row; ++i) {  // about [-2, 2], never 0
                s = s * 1664525u + 1013904223u;
                const double x = double((s >> 8) & 0xFFFF) / 16384.0 - 2.0 + 1.0 / 128;
                qkv.as<std::uint16_t>()[i] = std::uint16_t(orc::encode(in, x));
              }
              fill_cos_sin(cos, max_pos, r);
              for (std::int64_t t = 0; t < nnz; ++t) {
                pos.as<std::int64_t>()[t] = (7 * t + 3) % max_pos;
                slots.as<std::int64_t>()[t] = t == 4 ? -1 : (5 * t) % (pages * ps);  // 4: padding
              }
              auto view = [](void* p, DType t, std::int64_t e0, std::int64_t e1, std::int64_t e2,
                             std::int64_t s0, std::int64_t s1) {
                const std::int64_t e[3] = {e0, e1, e2}, st[3] = {s0, s1, 1};
                return make_strided(p, t, 3, e, st);
              };
              auto* x = qkv.as<std::uint16_t>();
              Arguments a;
              a.rope_style = style;
              a.q_rope = view(x, in, nnz, hq, r, row, d);
              a.k_rope = view(x + hq * d, in, nnz, hk, r, row, d);
              if (n > 0) {
                a.q_nope = view(x + r, in, nnz, hq, n, row, d);
                a.k_nope = view(x + hq * d + r, in, nnz, hk, n, row, d);
              }
              a.v = view(x + (hq + hk) * d, in, nnz, hk, dv, row, dv);
              set_query_output(a, split_heads(q_out.data(), out, nnz, hq, d, r));
              set_kv_cache(a, nhd_kv_cache(k.data(), v.data(), out, pages, ps, hk, d, r));
              const std::int64_t ve[4] = {pages, ps, hk, dv};
              a.v_cache = make_contiguous(v.data(), out, 4, ve);
              const std::int64_t cs[2] = {max_pos, r};
              a.cos_sin_cache = make_contiguous(cos.data(), DType::kFloat32, 2, cs);
              a.positions = make_vector(pos.data(), DType::kInt64, nnz);
              a.cache_index = slot_mapping_index(slots.data(), DType::kInt64, nnz);
              a.q_scale = Scale::host(0.05f);
              a.k_scale = Scale::host_multiplier(300.0f);  // keys past e4m3's range saturate
              a.v_scale = Scale::host(0.125f);
              ASSERT_EQ(takes_host_fast_path(a), want_fast);
              expect_matches_oracle(a, {&q_out, &k, &v}, {&qkv, &cos, &pos, &slots}, nnz - 1, 1);
              ++cases;
            }
  EXPECT_EQ(cases, 96);
}

// ------------------------------------------------------------------ validation

bool contains(const char* s, const char* w) { return std::strstr(s, w) != nullptr; }

void expect_rejected(const Arguments& a, Status want, std::initializer_list<const char*> words) {
  const Result r = validate(a, Backend::kHost);
  EXPECT_EQ(r.status, want) << to_string(r.status) << ": " << r.message;
  for (const char* w : words)
    EXPECT_TRUE(contains(r.message, w)) << "\"" << r.message << "\" lacks \"" << w << "\"";
}

class LayoutsValidate : public ::testing::Test {
 protected:
  Arguments Valid() {
    Arguments a = m_.args(RopeStyle::kNeox);
    m_.single_cache(a);
    a.cache_index = m_.page_table();
    return a;
  }
  MlaCase m_;
};

TEST_F(LayoutsValidate, HelperBuiltCallsValidate) {
  Result r = validate(Valid(), Backend::kHost);
  EXPECT_TRUE(r.ok()) << r.message;
  Arguments a = Valid();
  a.cache_index = slot_mapping_index(m_.slots.data(), DType::kInt32, MlaCase::kNnz);
  r = validate(a, Backend::kHost);
  EXPECT_TRUE(r.ok()) << r.message;
}

TEST(Layouts, ViewHelpersKeepTheRank) {
  // A rank outside 0-4 stays in the view (at most four extents copied), so
  // validation names it instead of checking a truncated or absent view.
  const std::int64_t ext[5] = {3, 2, 16, 1, 64}, str[5] = {2048, 1024, 64, 64, 1};
  std::uint8_t buf[8] = {};
  const TensorView s = make_strided(buf, DType::kFloat8E4M3FN, 5, ext, str);
  EXPECT_EQ(s.rank, 5);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(s.extent[k], ext[k]) << k;
    EXPECT_EQ(s.stride[k], str[k]) << k;
  }
  EXPECT_EQ(make_contiguous(buf, DType::kFloat8E4M3FN, 5, ext).rank, 5);
  const TensorView n = make_strided(buf, DType::kFloat8E4M3FN, -1, ext, str);
  EXPECT_EQ(n.rank, -1);
  EXPECT_FALSE(n.present());
  EXPECT_EQ(make_contiguous(buf, DType::kFloat8E4M3FN, -1, ext).rank, -1);
}

TEST_F(LayoutsValidate, WholeStackedCacheIsARankError) {
  // vLLM's stacked [P, 2, ps, Hk, D] cache passed whole, not through
  // stacked_kv_cache: the rank is named, not a stride of a truncated view.
  Arguments a = Valid();
  const TensorView& c = a.k_cache_rope;
  const std::int64_t ext[5] = {c.extent[0], 2, c.extent[1], c.extent[2], c.extent[3]};
  const std::int64_t str[5] = {2 * c.stride[0], c.stride[0], c.stride[1], c.stride[2], 1};
  a.k_cache_rope = make_strided(c.data, c.dtype, 5, ext, str);
  expect_rejected(a, Status::kErrorInvalidRank, {"k_cache_rope must have rank 4", "got 5"});
}

TEST_F(LayoutsValidate, MlaKindNotSet) {
  Arguments a = Valid();
  a.kind = AttentionKind::kGqa;  // MLA views, but the kind left at its default
  expect_rejected(a, Status::kErrorInvalidRank, {"v must have rank 3", "got 0"});
}

TEST_F(LayoutsValidate, QueryNopeNotTheLatentDim) {
  // A pre-absorption query (nope 16) with a latent-32 key.
  Arguments a = Valid();
  const HeadViews qi = mla_query_views(m_.q.data(), DType::kBFloat16, MlaCase::kNnz, MlaCase::kH,
                                       16, MlaCase::kRope, MlaCase::kQRow);
  a.q_rope = qi.rope;
  a.q_nope = qi.nope;
  expect_rejected(a, Status::kErrorShapeMismatch, {"k_nope.extent[2]", "N = q_nope.extent[2]"});
}

TEST_F(LayoutsValidate, QueryOutputRowsTooClose) {
  Arguments a = Valid();
  // Rows half a row apart: the heads of one token overlap the next token's.
  const std::int64_t row = MlaCase::kH * (MlaCase::kLatent + MlaCase::kRope);
  const HeadViews qo = mla_query_views(m_.q_out.data(), DType::kFloat8E4M3FN, MlaCase::kNnz,
                                       MlaCase::kH, MlaCase::kLatent, MlaCase::kRope, row / 2);
  a.q_rope_out = qo.rope;
  a.q_nope_out = qo.nope;
  expect_rejected(a, Status::kErrorOverlap, {"q_rope_out", "overlap itself"});
}

TEST_F(LayoutsValidate, KeyRopeMisaligned) {
  Arguments a = Valid();
  const HeadViews k = mla_key_views(m_.kv_a.data(), m_.kv_a.data() + 2 * MlaCase::kLatent + 1,
                                    DType::kBFloat16, MlaCase::kNnz, MlaCase::kLatent,
                                    MlaCase::kRope, MlaCase::kKvARow, MlaCase::kKvARow);
  a.k_rope = k.rope;
  expect_rejected(a, Status::kErrorMisaligned, {"k_rope.data", "aligned"});
}

TEST_F(LayoutsValidate, PageTableIndexDtype) {
  Arguments a = Valid();
  a.cache_index = page_table_index(m_.kv_indices.data(), DType::kInt32, 4, m_.kv_indptr.data(),
                                   DType::kFloat32, 3, m_.batch.data(), DType::kInt32,
                                   m_.kv_pos.data(), DType::kInt32, MlaCase::kNnz);
  expect_rejected(a, Status::kErrorUnsupportedDType,
                  {"cache_index.kv_indptr.dtype", "int32 or int64"});
}

TEST_F(LayoutsValidate, PageTableIndexTokenCount) {
  Arguments a = Valid();
  a.cache_index = page_table_index(m_.kv_indices.data(), DType::kInt32, 4, m_.kv_indptr.data(),
                                   DType::kInt64, 3, m_.batch.data(), DType::kInt32,
                                   m_.kv_pos.data(), DType::kInt32, MlaCase::kNnz - 1);
  expect_rejected(a, Status::kErrorShapeMismatch, {"cache_index.batch_indices.extent[0]", "nnz"});
}

TEST_F(LayoutsValidate, PageTableIndexEmptyIndptr) {
  Arguments a = Valid();
  a.cache_index = page_table_index(m_.kv_indices.data(), DType::kInt32, 4, m_.kv_indptr.data(),
                                   DType::kInt64, 0, m_.batch.data(), DType::kInt32,
                                   m_.kv_pos.data(), DType::kInt32, MlaCase::kNnz);
  expect_rejected(a, Status::kErrorShapeMismatch, {"cache_index.kv_indptr.extent[0]", "batch + 1"});
}

TEST_F(LayoutsValidate, PageTableIndexNullIndices) {
  Arguments a = Valid();
  a.cache_index = page_table_index(nullptr, DType::kInt32, 4, m_.kv_indptr.data(), DType::kInt64, 3,
                                   m_.batch.data(), DType::kInt32, m_.kv_pos.data(), DType::kInt32,
                                   MlaCase::kNnz);
  expect_rejected(a, Status::kErrorNullPointer, {"cache_index.kv_indices.data", "null"});
}

TEST_F(LayoutsValidate, SlotMappingIndexTokenCount) {
  Arguments a = Valid();
  a.cache_index = slot_mapping_index(m_.slots.data(), DType::kInt32, MlaCase::kNnz + 1);
  expect_rejected(a, Status::kErrorShapeMismatch, {"cache_index.slot_mapping.extent[0]", "nnz"});
}

}  // namespace
