// The C++ host backend called directly, for the Python tests (ctypes): calls
// built with the C++ API's own layout helpers, so that the op's translation of
// torch tensors is checked against an independent construction of the same call.
// Dtypes are named as ropekv::to_string names them ("bf16", "e4m3fn", ...).
// Each function returns 0, or the ropekv::Status with its message in `message`.
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "ropekv/ropekv.hpp"

namespace {

using namespace ropekv;

DType dtype_named(const char* name) {
  for (int d = 0; d <= static_cast<int>(DType::kInt64); ++d)
    if (std::strcmp(to_string(static_cast<DType>(d)), name) == 0) return static_cast<DType>(d);
  return DType::kInvalid;
}

Scale scale(float s, int multiply) { return multiply ? Scale::host_multiplier(s) : Scale::host(s); }

int finish(const Arguments& a, char* message, int message_size) {
  const Result r = run(a, Backend::kHost);
  std::snprintf(message, std::size_t(message_size), "%s", r.message);
  return static_cast<int>(r.status);
}

}  // namespace

extern "C" {

// GQA: fused QKV [nnz, (hq + 2 hk) d], query output [nnz, hq, d], NHD caches
// [P, ps, hk, d]; int64 positions; int64 slots, or (slots null) an int32 page
// table whose kv positions are `kv_positions`.
int ropekv_ref_gqa(const void* qkv, const char* in_dtype, std::int64_t nnz, std::int64_t hq,
                   std::int64_t hk, std::int64_t d, std::int64_t r, int interleaved, void* q_out,
                   const char* q_dtype, void* k_cache, void* v_cache, const char* cache_dtype,
                   std::int64_t num_pages, std::int64_t page_size, const void* cos_sin,
                   const char* cos_sin_dtype, std::int64_t max_pos, const std::int64_t* positions,
                   const std::int64_t* slots, const std::int32_t* kv_indices,
                   std::int64_t num_kv_indices, const std::int32_t* kv_indptr, std::int64_t batch,
                   const std::int32_t* batch_indices, const std::int32_t* kv_positions,
                   float q_scale, float k_scale, float v_scale, int multiply, char* message,
                   int message_size) {
  Arguments a;
  a.rope_style = interleaved ? RopeStyle::kInterleaved : RopeStyle::kNeox;
  set_inputs(a, fused_qkv_views(const_cast<void*>(qkv), dtype_named(in_dtype), nnz, hq, hk, d, r));
  set_query_output(a, split_heads(q_out, dtype_named(q_dtype), nnz, hq, d, r));
  set_kv_cache(
      a, nhd_kv_cache(k_cache, v_cache, dtype_named(cache_dtype), num_pages, page_size, hk, d, r));
  const std::int64_t cs[2] = {max_pos, r};
  a.cos_sin_cache = make_contiguous(const_cast<void*>(cos_sin), dtype_named(cos_sin_dtype), 2, cs);
  a.positions = make_vector(const_cast<std::int64_t*>(positions), DType::kInt64, nnz);
  a.cache_index = slots != nullptr
                      ? slot_mapping_index(slots, DType::kInt64, nnz)
                      : page_table_index(kv_indices, DType::kInt32, num_kv_indices, kv_indptr,
                                         DType::kInt32, batch + 1, batch_indices, DType::kInt32,
                                         kv_positions, DType::kInt32, nnz);
  a.q_scale = scale(q_scale, multiply);
  a.k_scale = scale(k_scale, multiply);
  a.v_scale = scale(v_scale, multiply);
  return finish(a, message, message_size);
}

// MLA: query [nnz, h, latent + rope] (nope part first), kv_a [nnz, latent +
// rope] holding kv_c then k_pe, vLLM's single cache [P, ps, latent + rope];
// int64 positions and slots; interleaved RoPE.
int ropekv_ref_mla(const void* q, const void* kv_a, const char* in_dtype, std::int64_t nnz,
                   std::int64_t h, std::int64_t latent, std::int64_t rope, void* q_out,
                   const char* q_dtype, void* cache, const char* cache_dtype,
                   std::int64_t num_pages, std::int64_t page_size, const void* cos_sin,
                   std::int64_t max_pos, const std::int64_t* positions, const std::int64_t* slots,
                   float q_scale, float k_scale, int multiply, char* message, int message_size) {
  Arguments a;
  a.kind = AttentionKind::kMla;
  a.rope_style = RopeStyle::kInterleaved;
  const DType in = dtype_named(in_dtype);
  const HeadViews qv = mla_query_views(const_cast<void*>(q), in, nnz, h, latent, rope);
  a.q_rope = qv.rope;
  a.q_nope = qv.nope;
  const std::size_t es = size_of(in);
  char* kv = static_cast<char*>(const_cast<void*>(kv_a));
  const HeadViews kvv = mla_key_views(kv, kv + std::size_t(latent) * es, in, nnz, latent, rope,
                                      latent + rope, latent + rope);
  a.k_rope = kvv.rope;
  a.k_nope = kvv.nope;
  const HeadViews qo = mla_query_views(q_out, dtype_named(q_dtype), nnz, h, latent, rope);
  a.q_rope_out = qo.rope;
  a.q_nope_out = qo.nope;
  set_kv_cache(
      a, mla_cache_single(cache, dtype_named(cache_dtype), num_pages, page_size, latent, rope));
  const std::int64_t cs[2] = {max_pos, rope};
  a.cos_sin_cache = make_contiguous(const_cast<void*>(cos_sin), DType::kFloat32, 2, cs);
  a.positions = make_vector(const_cast<std::int64_t*>(positions), DType::kInt64, nnz);
  a.cache_index = slot_mapping_index(slots, DType::kInt64, nnz);
  a.q_scale = scale(q_scale, multiply);
  a.k_scale = scale(k_scale, multiply);
  return finish(a, message, message_size);
}

}  // extern "C"
