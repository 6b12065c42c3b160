// Views and the layout helpers of the public header: TensorView builders,
// the common QKV, query and cache layouts, the addressing forms, assembly.
#include <cstdint>

#include "ropekv/ropekv.hpp"

namespace ropekv {

// ------------------------------------------------------------------ views
std::int64_t TensorView::numel() const noexcept {
  if (rank <= 0) return 0;
  if (rank > 4) return -1;
  for (int k = 0; k < rank; ++k) {
    if (extent[k] < 0) return -1;
    if (extent[k] == 0) return 0;
  }
  constexpr std::int64_t kMax = INT64_MAX;
  std::int64_t n = 1;
  for (int k = 0; k < rank; ++k) {  // saturates instead of wrapping
#if defined(__GNUC__) || defined(__clang__)
    if (__builtin_mul_overflow(n, extent[k], &n)) return kMax;
#else
    if (n > kMax / extent[k]) return kMax;
    n *= extent[k];
#endif
  }
  return n;
}

TensorView make_strided(void* data, DType dtype, std::int32_t rank, const std::int64_t* extents,
                        const std::int64_t* strides) noexcept {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = rank;  // kept as given: validation names a rank outside 0-4
  const int n = rank < 0 ? 0 : (rank > 4 ? 4 : rank);
  for (int k = 0; k < n; ++k) {
    v.extent[k] = extents[k];
    v.stride[k] = strides[k];
  }
  return v;
}

TensorView make_contiguous(void* data, DType dtype, std::int32_t rank,
                           const std::int64_t* extents) noexcept {
  std::int64_t strides[4] = {1, 1, 1, 1};
  const int r = rank < 0 ? 0 : (rank > 4 ? 4 : rank);
  for (int k = r - 2; k >= 0; --k) strides[k] = strides[k + 1] * extents[k + 1];
  return make_strided(data, dtype, rank, extents, strides);
}

TensorView make_vector(void* data, DType dtype, std::int64_t n) noexcept {
  return make_contiguous(data, dtype, 1, &n);
}

// ------------------------------------------------------------------ layouts
namespace {

void* offset_elems(void* base, DType dtype, std::int64_t elems) {
  return base == nullptr ? nullptr
                         : static_cast<char*>(base) + elems * std::int64_t(size_of(dtype));
}

// A [d0, d1, d2, len] view at `base + offset` elements with the given outer
// strides; absent when len == 0.
TensorView view4(void* base, DType dtype, std::int64_t offset, const std::int64_t (&ext)[3],
                 const std::int64_t (&str)[3], std::int64_t len) {
  if (len == 0) return TensorView{};
  const std::int64_t e[4] = {ext[0], ext[1], ext[2], len};
  const std::int64_t s[4] = {str[0], str[1], str[2], 1};
  return make_strided(offset_elems(base, dtype, offset), dtype, 4, e, s);
}

TensorView view3(void* base, DType dtype, std::int64_t offset, std::int64_t nnz, std::int64_t heads,
                 std::int64_t len, std::int64_t token_stride, std::int64_t head_stride) {
  if (len == 0) return TensorView{};
  const std::int64_t e[3] = {nnz, heads, len};
  const std::int64_t s[3] = {token_stride, head_stride, 1};
  return make_strided(offset_elems(base, dtype, offset), dtype, 3, e, s);
}

// K (rotary + non-rotary) and V views of one cache layout given its strides.
KvCacheViews kv_views(void* k_base, void* v_base, DType dtype, const std::int64_t (&ext)[3],
                      const std::int64_t (&str)[3], std::int64_t head_dim,
                      std::int64_t rotary_dim) {
  KvCacheViews c;
  c.k_rope = view4(k_base, dtype, 0, ext, str, rotary_dim);
  c.k_nope = view4(k_base, dtype, rotary_dim, ext, str, head_dim - rotary_dim);
  c.v = view4(v_base, dtype, 0, ext, str, head_dim);
  return c;
}

}  // namespace

QkvViews fused_qkv_views(void* qkv, DType dtype, std::int64_t nnz, std::int64_t num_q_heads,
                         std::int64_t num_kv_heads, std::int64_t head_dim, std::int64_t rotary_dim,
                         std::int64_t token_stride) noexcept {
  const std::int64_t ts =
      token_stride > 0 ? token_stride : (num_q_heads + 2 * num_kv_heads) * head_dim;
  const std::int64_t k_off = num_q_heads * head_dim;
  const std::int64_t v_off = k_off + num_kv_heads * head_dim;
  const std::int64_t n = head_dim - rotary_dim;
  QkvViews q;
  q.q_rope = view3(qkv, dtype, 0, nnz, num_q_heads, rotary_dim, ts, head_dim);
  q.q_nope = view3(qkv, dtype, rotary_dim, nnz, num_q_heads, n, ts, head_dim);
  q.k_rope = view3(qkv, dtype, k_off, nnz, num_kv_heads, rotary_dim, ts, head_dim);
  q.k_nope = view3(qkv, dtype, k_off + rotary_dim, nnz, num_kv_heads, n, ts, head_dim);
  q.v = view3(qkv, dtype, v_off, nnz, num_kv_heads, head_dim, ts, head_dim);
  return q;
}

HeadViews split_heads(void* data, DType dtype, std::int64_t nnz, std::int64_t num_heads,
                      std::int64_t head_dim, std::int64_t rotary_dim) noexcept {
  HeadViews h;
  const std::int64_t ts = num_heads * head_dim;
  h.rope = view3(data, dtype, 0, nnz, num_heads, rotary_dim, ts, head_dim);
  h.nope = view3(data, dtype, rotary_dim, nnz, num_heads, head_dim - rotary_dim, ts, head_dim);
  return h;
}

KvCacheViews nhd_kv_cache(void* k_cache, void* v_cache, DType dtype, std::int64_t num_pages,
                          std::int64_t page_size, std::int64_t num_kv_heads, std::int64_t head_dim,
                          std::int64_t rotary_dim) noexcept {
  const std::int64_t ext[3] = {num_pages, page_size, num_kv_heads};
  const std::int64_t str[3] = {page_size * num_kv_heads * head_dim, num_kv_heads * head_dim,
                               head_dim};
  return kv_views(k_cache, v_cache, dtype, ext, str, head_dim, rotary_dim);
}

KvCacheViews hnd_kv_cache(void* k_cache, void* v_cache, DType dtype, std::int64_t num_pages,
                          std::int64_t page_size, std::int64_t num_kv_heads, std::int64_t head_dim,
                          std::int64_t rotary_dim) noexcept {
  const std::int64_t ext[3] = {num_pages, page_size, num_kv_heads};
  const std::int64_t str[3] = {page_size * num_kv_heads * head_dim, head_dim, page_size * head_dim};
  return kv_views(k_cache, v_cache, dtype, ext, str, head_dim, rotary_dim);
}

KvCacheViews stacked_kv_cache(void* cache, StackOrder order, DType dtype, std::int64_t num_pages,
                              std::int64_t page_size, std::int64_t num_kv_heads,
                              std::int64_t head_dim, std::int64_t rotary_dim) noexcept {
  const std::int64_t block = page_size * num_kv_heads * head_dim;  // one page of K (or V)
  const bool page_major = order == StackOrder::kPageMajor;
  const std::int64_t ext[3] = {num_pages, page_size, num_kv_heads};
  const std::int64_t str[3] = {page_major ? 2 * block : block, num_kv_heads * head_dim, head_dim};
  const std::int64_t v_offset = page_major ? block : num_pages * block;
  return kv_views(cache, offset_elems(cache, dtype, v_offset), dtype, ext, str, head_dim,
                  rotary_dim);
}

KvCacheViews mla_cache_single(void* cache, DType dtype, std::int64_t num_pages,
                              std::int64_t page_size, std::int64_t latent_dim,
                              std::int64_t rope_dim) noexcept {
  const std::int64_t entry = latent_dim + rope_dim;
  const std::int64_t ext[3] = {num_pages, page_size, 1};
  const std::int64_t str[3] = {page_size * entry, entry, entry};
  KvCacheViews c;
  c.k_nope = view4(cache, dtype, 0, ext, str, latent_dim);
  c.k_rope = view4(cache, dtype, latent_dim, ext, str, rope_dim);
  return c;
}

KvCacheViews mla_cache_split(void* ckv, void* kpe, DType dtype, std::int64_t num_pages,
                             std::int64_t page_size, std::int64_t latent_dim,
                             std::int64_t rope_dim) noexcept {
  const std::int64_t ext[3] = {num_pages, page_size, 1};
  const std::int64_t ckv_str[3] = {page_size * latent_dim, latent_dim, latent_dim};
  const std::int64_t kpe_str[3] = {page_size * rope_dim, rope_dim, rope_dim};
  KvCacheViews c;
  c.k_nope = view4(ckv, dtype, 0, ext, ckv_str, latent_dim);
  c.k_rope = view4(kpe, dtype, 0, ext, kpe_str, rope_dim);
  return c;
}

HeadViews mla_query_views(void* q, DType dtype, std::int64_t nnz, std::int64_t num_heads,
                          std::int64_t nope_dim, std::int64_t rope_dim,
                          std::int64_t token_stride) noexcept {
  const std::int64_t head = nope_dim + rope_dim;
  const std::int64_t ts = token_stride > 0 ? token_stride : num_heads * head;
  HeadViews h;
  h.nope = view3(q, dtype, 0, nnz, num_heads, nope_dim, ts, head);
  h.rope = view3(q, dtype, nope_dim, nnz, num_heads, rope_dim, ts, head);
  return h;
}

HeadViews mla_key_views(void* k_latent, void* k_rope, DType dtype, std::int64_t nnz,
                        std::int64_t latent_dim, std::int64_t rope_dim,
                        std::int64_t latent_token_stride, std::int64_t rope_token_stride) noexcept {
  // One kv head: the head stride is never stepped, the row length will do.
  HeadViews h;
  h.nope = view3(k_latent, dtype, 0, nnz, 1, latent_dim,
                 latent_token_stride > 0 ? latent_token_stride : latent_dim, latent_dim);
  h.rope = view3(k_rope, dtype, 0, nnz, 1, rope_dim,
                 rope_token_stride > 0 ? rope_token_stride : rope_dim, rope_dim);
  return h;
}

// ------------------------------------------------------------------ addressing
CacheIndex slot_mapping_index(const void* slot_mapping, DType dtype, std::int64_t nnz) noexcept {
  CacheIndex ci;
  ci.form = Addressing::kSlotMapping;
  ci.slot_mapping = make_vector(const_cast<void*>(slot_mapping), dtype, nnz);
  return ci;
}

CacheIndex page_table_index(const void* kv_indices, DType kv_indices_dtype,
                            std::int64_t num_kv_indices, const void* kv_indptr,
                            DType kv_indptr_dtype, std::int64_t kv_indptr_length,
                            const void* batch_indices, DType batch_indices_dtype,
                            const void* kv_positions, DType kv_positions_dtype,
                            std::int64_t nnz) noexcept {
  CacheIndex ci;
  ci.form = Addressing::kPageTable;
  ci.kv_indices = make_vector(const_cast<void*>(kv_indices), kv_indices_dtype, num_kv_indices);
  ci.kv_indptr = make_vector(const_cast<void*>(kv_indptr), kv_indptr_dtype, kv_indptr_length);
  ci.batch_indices = make_vector(const_cast<void*>(batch_indices), batch_indices_dtype, nnz);
  ci.kv_positions = make_vector(const_cast<void*>(kv_positions), kv_positions_dtype, nnz);
  return ci;
}

void set_inputs(Arguments& a, const QkvViews& in) noexcept {
  a.q_rope = in.q_rope;
  a.q_nope = in.q_nope;
  a.k_rope = in.k_rope;
  a.k_nope = in.k_nope;
  a.v = in.v;
}
void set_query_output(Arguments& a, const HeadViews& q_out) noexcept {
  a.q_rope_out = q_out.rope;
  a.q_nope_out = q_out.nope;
}
void set_kv_cache(Arguments& a, const KvCacheViews& cache) noexcept {
  a.k_cache_rope = cache.k_rope;
  a.k_cache_nope = cache.k_nope;
  a.v_cache = cache.v;
}

}  // namespace ropekv
