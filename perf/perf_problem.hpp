// The perf suite's problems: the canonical shapes, the token
// indices of a decode or prefill batch, the byte model, and the ropekv
// argument views over one set of buffers. Plain C++ (no vendor types), shared
// by the host benchmarks and the CUDA timing code, which differ only in where
// the buffers live.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "detail/element_math.hpp"  // ROPEKV_HD
#include "ropekv/ropekv.hpp"

namespace ropekv_perf {

enum class CacheLayout {
  kNhd,        // K and V buffers, each [P, ps, Hk, D]
  kHnd,        // K and V buffers, each [P, Hk, ps, D]
  kMlaSingle,  // vLLM MLA: one buffer [P, ps, latent | rope], no V
};

struct Shape {
  std::string name;
  ropekv::AttentionKind kind = ropekv::AttentionKind::kGqa;
  std::int64_t hq = 0, hk = 0;
  std::int64_t rotary = 0;  // R
  std::int64_t nope = 0;    // N (MLA: the 512 nope / latent dims)
  std::int64_t v_dim = 0;   // Dv (0 for MLA)
  ropekv::RopeStyle style = ropekv::RopeStyle::kNeox;
  CacheLayout layout = CacheLayout::kNhd;
  std::int64_t page_size = 16;
  float q_scale = 0.05f, k_scale = 0.04f, v_scale = 0.04f;
  // Extra bf16 elements at the end of every token row of the input buffer.
  // An odd value misaligns every row (token stride odd): the generic path.
  std::int64_t row_pad = 0;
  // Token counts timed on the host and on GPUs.
  std::vector<std::int64_t> host_nnz, gpu_nnz;
  bool canonical = true;  // a canonical shape (else a variant of one)
  // Input dtype: bf16, or fp16 (a variant; the same random 16-bit codes, which
  // read as fp16 are finite values of magnitude 1 to 4). No unfused rows for fp16.
  ropekv::DType in = ropekv::DType::kBFloat16;

  std::int64_t head_dim() const { return rotary + nope; }
};

// The canonical shapes and the variants, in the order they are registered.
const std::vector<Shape>& shapes();

// Token indices of one batch, in both addressing forms (the same cache
// entries): slot mapping with int64 positions and slots (vLLM), and a page
// table with int32 arrays (FlashInfer/SGLang; the RoPE positions are the
// int32 kv_positions there).
//  * decode (nnz <= 1024): one token per sequence, each at a random position
//    in [16, 4016), the page it writes a random page of a shuffled pool
//    (2 * nnz + 8 pages); its earlier pages in the page table are random
//    pages of the pool (never written: only the token's own entry is);
//  * prefill (nnz > 1024): 4 sequences of nnz/4 tokens at positions 0..L-1,
//    pages taken from a shuffled pool with 1/8 spare pages.
struct Batch {
  std::int64_t nnz = 0;
  std::int64_t num_pages = 0;
  std::int64_t max_pos = 0;  // rows of the cos/sin table
  std::vector<std::int64_t> positions, slots;
  std::vector<std::int32_t> batch_indices, kv_positions, kv_indptr, kv_indices;
};
Batch make_batch(const Shape& s, std::int64_t nnz, std::uint64_t seed);

// Element counts / byte sizes of one set of buffers.
struct Sizes {
  std::int64_t in_row = 0;       // bf16 elements per token row of the input
  std::int64_t in_elems = 0;     // bf16 elements of the input buffer
  std::int64_t q_out_bytes = 0;  // e4m3fn
  std::int64_t k_cache_bytes = 0, v_cache_bytes = 0;
  std::int64_t q_rot_elems = 0, k_rot_elems = 0;  // unfused scratch, bf16 [nnz, H, R]
};
Sizes sizes_of(const Shape& s, const Batch& b);

// Bytes one call moves by the byte model (reads: q, k, v in bf16,
// the fp32 cos/sin row, position + slot; writes: q, k, v in e4m3fn).
double model_bytes(const Shape& s, std::int64_t nnz);

// One set of buffers (host or device pointers).
struct Buffers {
  void* in = nullptr;         // bf16 or fp16 (Shape::in) [nnz, in_row]
  void* q_out = nullptr;      // e4m3fn [nnz, Hq, D]
  void* k_cache = nullptr;    // e4m3fn, layout of the shape
  void* v_cache = nullptr;    // e4m3fn (GQA only)
  void* cos_sin = nullptr;    // fp32 [max_pos, R]
  void* positions = nullptr;  // int64 [nnz]
  void* slots = nullptr;      // int64 [nnz]
  // Page table (int32): [nnz], [nnz], [nnz + 1], [kv_indptr[nnz]].
  void* batch_indices = nullptr;
  void* kv_positions = nullptr;
  void* kv_indptr = nullptr;
  void* kv_indices = nullptr;
};
// The arguments of one call over `buf`, addressing the cache by slot mapping
// or (page_table) by the page table.
ropekv::Arguments make_arguments(const Shape& s, const Batch& b, const Buffers& buf,
                                 bool page_table = false);

// Fill helpers (host memory).
// Random bf16 values, never zero: random sign, exponent 2^-6 .. 2^1, random
// mantissa. The same recipe runs on the GPU (perf/cuda_timing.cu).
ROPEKV_HD std::uint16_t random_bf16(std::uint64_t h) {
  const std::uint32_t sign = std::uint32_t(h >> 15) & 1u;
  const std::uint32_t exp = 121u + std::uint32_t(h & 7u);
  const std::uint32_t mant = std::uint32_t(h >> 3) & 0x7fu;
  return std::uint16_t((sign << 15) | (exp << 7) | mant);
}
ROPEKV_HD std::uint64_t mix64(std::uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Element i of a filled buffer is random_bf16(mix64(seed * C + i / 4) >> 16 * (i % 4)).
ROPEKV_HD std::uint64_t fill_hash(std::uint64_t seed, std::uint64_t chunk) {
  return mix64(seed * 0x100000001b3ull + chunk);
}
void fill_random_bf16(std::uint16_t* data, std::int64_t n, std::uint64_t seed);
// The fp32 cos/sin table [max_pos, R] (theta 500000), computed once per (R, max_pos).
const std::vector<float>& cos_sin_table(std::int64_t rotary, std::int64_t max_pos);

}  // namespace ropekv_perf
