#include "perf_problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <utility>

namespace ropekv_perf {

namespace {

Shape gqa(const char* name, std::int64_t hq, std::int64_t hk, std::int64_t d, std::int64_t r) {
  Shape s;
  s.name = name;
  s.kind = ropekv::AttentionKind::kGqa;
  s.hq = hq;
  s.hk = hk;
  s.rotary = r;
  s.nope = d - r;
  s.v_dim = d;
  return s;
}

const std::vector<std::int64_t> kCanonicalGpuTokens = {1, 8, 64, 256, 1024, 8192, 32768};

// The GPU rows' token counts: the canonical ones, or for measurements of the
// launch rules those ROPEKV_PERF_GPU_NNZ lists ("512,2048,4096").
std::vector<std::int64_t> gpu_tokens() {
  const char* env = std::getenv("ROPEKV_PERF_GPU_NNZ");
  if (env == nullptr || *env == '\0') return kCanonicalGpuTokens;
  std::vector<std::int64_t> v;
  std::stringstream in(env);
  for (std::string item; std::getline(in, item, ',');) {
    const long long n = std::atoll(item.c_str());
    if (n > 0) v.push_back(n);
  }
  return v;
}
const std::vector<std::int64_t> kHostTokens = {1, 64, 1024, 8192};
const std::vector<std::int64_t> kHostVariantTokens = {64, 8192};

std::vector<Shape> build_shapes() {
  const std::vector<std::int64_t> gpu_nnz = gpu_tokens();
  std::vector<Shape> v;
  v.push_back(gqa("gpt-oss-120b-tp8", 8, 1, 64, 64));
  v.push_back(gqa("gpt-oss-120b-tp1", 64, 8, 64, 64));
  v.push_back(gqa("llama-3.1-8b", 32, 8, 128, 128));
  v.push_back(gqa("llama-3.1-70b-tp8", 8, 1, 128, 128));
  v.push_back(gqa("partial-rotary", 32, 8, 128, 64));
  {
    Shape s;
    s.name = "deepseek-v3-mla-tp8";
    s.kind = ropekv::AttentionKind::kMla;
    s.hq = 16;
    s.hk = 1;
    s.rotary = 64;
    s.nope = 512;
    s.v_dim = 0;
    s.style = ropekv::RopeStyle::kInterleaved;
    s.layout = CacheLayout::kMlaSingle;
    v.push_back(s);
  }
  for (Shape& s : v) {
    s.host_nnz = kHostTokens;
    s.gpu_nnz = gpu_nnz;
  }
  // The one host prefill-32768 run: the shape of the host target.
  v[2].host_nnz.push_back(32768);

  // Variants of llama-3.1-8b.
  const Shape base = v[2];
  Shape hnd = base;
  hnd.name = "llama-3.1-8b-hnd";
  hnd.layout = CacheLayout::kHnd;
  Shape ps64 = base;
  ps64.name = "llama-3.1-8b-ps64";
  ps64.page_size = 64;
  Shape kv = base;
  kv.name = "llama-3.1-8b-kvscales";
  kv.k_scale = 0.03f;
  kv.v_scale = 0.0125f;
  Shape generic = base;
  generic.name = "llama-3.1-8b-generic";
  generic.row_pad = 1;  // odd token stride: every row misaligned for vector loads
  Shape fp16 = base;
  fp16.name = "llama-3.1-8b-fp16";
  fp16.in = ropekv::DType::kFloat16;
  for (Shape s : {hnd, ps64, kv, generic, fp16}) {
    s.canonical = false;
    s.host_nnz = kHostVariantTokens;
    s.gpu_nnz = gpu_nnz;
    v.push_back(s);
  }
  return v;
}

}  // namespace

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> v = build_shapes();
  return v;
}

Batch make_batch(const Shape& s, std::int64_t nnz, std::uint64_t seed) {
  Batch b;
  b.nnz = nnz;
  b.max_pos = 8192;
  b.positions.resize(nnz);
  b.slots.resize(nnz);
  std::mt19937_64 rng(seed);
  const std::int64_t ps = s.page_size;
  std::vector<std::int64_t> perm;
  auto shuffled_pool = [&](std::int64_t pages) {
    perm.resize(pages);
    std::iota(perm.begin(), perm.end(), std::int64_t(0));
    std::shuffle(perm.begin(), perm.end(), rng);
  };
  b.batch_indices.resize(nnz);
  b.kv_positions.resize(nnz);
  b.kv_indptr.assign(1, 0);
  if (nnz <= 1024) {
    b.num_pages = 2 * nnz + 8;
    shuffled_pool(b.num_pages);
    std::uniform_int_distribution<std::int64_t> pos(16, 4015);
    std::uniform_int_distribution<std::int64_t> any_page(0, b.num_pages - 1);
    for (std::int64_t t = 0; t < nnz; ++t) {
      const std::int64_t p = pos(rng);
      b.positions[t] = p;
      b.slots[t] = perm[t] * ps + p % ps;
      b.batch_indices[t] = std::int32_t(t);
      b.kv_positions[t] = std::int32_t(p);
      for (std::int64_t j = 0; j < p / ps; ++j) b.kv_indices.push_back(std::int32_t(any_page(rng)));
      b.kv_indices.push_back(std::int32_t(perm[t]));
      b.kv_indptr.push_back(std::int32_t(b.kv_indices.size()));
    }
  } else {
    const std::int64_t nseq = 4;
    std::int64_t pages = 0;
    std::vector<std::int64_t> len(nseq);
    for (std::int64_t q = 0; q < nseq; ++q) {
      len[q] = nnz / nseq + (q == nseq - 1 ? nnz % nseq : 0);
      pages += (len[q] + ps - 1) / ps;
    }
    b.num_pages = pages + pages / 8 + 8;
    shuffled_pool(b.num_pages);
    std::int64_t t = 0, next_page = 0;
    for (std::int64_t q = 0; q < nseq; ++q) {
      for (std::int64_t j = 0; j < len[q]; ++j, ++t) {
        b.positions[t] = j;
        b.slots[t] = perm[next_page + j / ps] * ps + j % ps;
        b.batch_indices[t] = std::int32_t(q);
        b.kv_positions[t] = std::int32_t(j);
      }
      const std::int64_t seq_pages = (len[q] + ps - 1) / ps;
      for (std::int64_t j = 0; j < seq_pages; ++j)
        b.kv_indices.push_back(std::int32_t(perm[next_page + j]));
      b.kv_indptr.push_back(std::int32_t(b.kv_indices.size()));
      next_page += seq_pages;
    }
    const std::int64_t longest = *std::max_element(len.begin(), len.end());
    b.max_pos = std::max<std::int64_t>(b.max_pos, longest);
  }
  return b;
}

Sizes sizes_of(const Shape& s, const Batch& b) {
  Sizes z;
  const std::int64_t d = s.head_dim();
  z.in_row = s.hq * d + s.hk * d + s.hk * s.v_dim + s.row_pad;
  z.in_elems = b.nnz * z.in_row;
  z.q_out_bytes = b.nnz * s.hq * d;
  z.k_cache_bytes = b.num_pages * s.page_size * s.hk * d;
  z.v_cache_bytes = b.num_pages * s.page_size * s.hk * s.v_dim;
  z.q_rot_elems = b.nnz * s.hq * s.rotary;
  z.k_rot_elems = b.nnz * s.hk * s.rotary;
  return z;
}

double model_bytes(const Shape& s, std::int64_t nnz) {
  const double elems = double(s.hq * s.head_dim() + s.hk * s.head_dim() + s.hk * s.v_dim);
  const double per_token = elems * 2.0               // bf16 in
                           + elems * 1.0             // e4m3fn out
                           + double(s.rotary) * 4.0  // fp32 cos/sin row
                           + 8.0 + 8.0;              // int64 position + slot
  return per_token * double(nnz);
}

ropekv::Arguments make_arguments(const Shape& s, const Batch& b, const Buffers& buf,
                                 bool page_table) {
  using namespace ropekv;
  const DType in = s.in, out = DType::kFloat8E4M3FN;
  const std::int64_t nnz = b.nnz, d = s.head_dim(), r = s.rotary, n = s.nope;
  const Sizes z = sizes_of(s, b);
  auto* base = static_cast<std::uint16_t*>(buf.in);
  // [nnz, H, len] view of the input at element offset `off`, heads `hs` apart.
  auto in_view = [&](std::int64_t off, std::int64_t heads, std::int64_t len, std::int64_t hs) {
    if (len == 0) return TensorView{};
    const std::int64_t e[3] = {nnz, heads, len};
    const std::int64_t st[3] = {z.in_row, hs, 1};
    return make_strided(base + off, in, 3, e, st);
  };
  Arguments a;
  a.kind = s.kind;
  a.rope_style = s.style;
  const std::int64_t k_off = s.hq * d;
  if (s.kind == AttentionKind::kGqa) {
    // Row: [q heads | k heads | v heads], each head [rope | nope].
    a.q_rope = in_view(0, s.hq, r, d);
    a.q_nope = in_view(r, s.hq, n, d);
    a.k_rope = in_view(k_off, s.hk, r, d);
    a.k_nope = in_view(k_off + r, s.hk, n, d);
    a.v = in_view(k_off + s.hk * d, s.hk, s.v_dim, s.v_dim);
    const KvCacheViews c =
        s.layout == CacheLayout::kHnd
            ? hnd_kv_cache(buf.k_cache, buf.v_cache, out, b.num_pages, s.page_size, s.hk, d, r)
            : nhd_kv_cache(buf.k_cache, buf.v_cache, out, b.num_pages, s.page_size, s.hk, d, r);
    a.k_cache_rope = c.k_rope;
    a.k_cache_nope = c.k_nope;
    a.v_cache = c.v;
  } else {
    // Row: [q heads, each [rope 64 | nope 512] | k: latent 512 | rope 64]
    // (the kv_a projection output of DeepSeek is [latent | rope]).
    a.q_rope = in_view(0, s.hq, r, d);
    a.q_nope = in_view(r, s.hq, n, d);
    a.k_nope = in_view(k_off, 1, n, d);
    a.k_rope = in_view(k_off + n, 1, r, d);
    const KvCacheViews c = mla_cache_single(buf.k_cache, out, b.num_pages, s.page_size, n, r);
    a.k_cache_rope = c.k_rope;
    a.k_cache_nope = c.k_nope;
  }
  const HeadViews qo = split_heads(buf.q_out, out, nnz, s.hq, d, r);
  a.q_rope_out = qo.rope;
  a.q_nope_out = qo.nope;
  const std::int64_t cs_ext[2] = {b.max_pos, r};
  a.cos_sin_cache = make_contiguous(buf.cos_sin, DType::kFloat32, 2, cs_ext);
  if (page_table) {
    CacheIndex& ci = a.cache_index;
    ci.form = Addressing::kPageTable;
    ci.batch_indices = make_vector(buf.batch_indices, DType::kInt32, nnz);
    ci.kv_positions = make_vector(buf.kv_positions, DType::kInt32, nnz);
    ci.kv_indptr = make_vector(buf.kv_indptr, DType::kInt32, std::int64_t(b.kv_indptr.size()));
    ci.kv_indices = make_vector(buf.kv_indices, DType::kInt32, std::int64_t(b.kv_indices.size()));
    a.positions = ci.kv_positions;
  } else {
    a.positions = make_vector(buf.positions, DType::kInt64, nnz);
    a.cache_index.form = Addressing::kSlotMapping;
    a.cache_index.slot_mapping = make_vector(buf.slots, DType::kInt64, nnz);
  }
  a.q_scale = Scale::host(s.q_scale);
  a.k_scale = Scale::host(s.k_scale);
  a.v_scale = Scale::host(s.v_scale);
  return a;
}

void fill_random_bf16(std::uint16_t* data, std::int64_t n, std::uint64_t seed) {
  std::int64_t i = 0;
  for (std::uint64_t c = 0; i < n; ++c) {
    const std::uint64_t h = fill_hash(seed, c);
    for (int k = 0; k < 4 && i < n; ++k, ++i) data[i] = random_bf16(h >> (16 * k));
  }
}

const std::vector<float>& cos_sin_table(std::int64_t rotary, std::int64_t max_pos) {
  static std::map<std::pair<std::int64_t, std::int64_t>, std::vector<float>> tables;
  std::vector<float>& t = tables[{rotary, max_pos}];
  if (t.empty()) {
    t.resize(std::size_t(rotary * max_pos));
    const std::int64_t half = rotary / 2;
    for (std::int64_t i = 0; i < half; ++i) {
      const double f = std::pow(500000.0, -2.0 * double(i) / double(rotary));
      for (std::int64_t p = 0; p < max_pos; ++p) {
        t[p * rotary + i] = float(std::cos(double(p) * f));
        t[p * rotary + half + i] = float(std::sin(double(p) * f));
      }
    }
  }
  return t;
}

}  // namespace ropekv_perf
