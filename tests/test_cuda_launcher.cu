// The launcher's per-thread decision cache (cuda/launcher.cu,
// prepare_launch): a call reuses the last decision only when everything the
// decision reads is the same, and the per-call fields (stream, data
// pointers, scales) always come from the call. Decisions only: nothing is
// launched, so the parameters point at made-up (aligned) addresses.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "cuda/launch_geometry.hpp"
#include "cuda/launcher.hpp"
#include "detail/lower.hpp"
#include "ropekv/ropekv.hpp"

// For tests/test_cuda_runtime.cpp (no CUDA headers there): the bulk and rows
// kernels' measurement overrides on or off, and the path the launcher takes
// for a call.
namespace ropekv_test {
void set_bulk_tuning(bool on) {
  ropekv::detail::gpu::Tuning t;
  if (on) {
    t.decode = -1;  // every launch on a vector path, so the bulk kernel wherever it can
    t.bulk = 1;
  }
  ropekv::detail::gpu::set_tuning(t);
}
void set_rows_tuning(int rows, int order) {
  ropekv::detail::gpu::Tuning t;
  if (rows > 0) t.decode = -1;  // every launch on a vector path, so the rows kernel wherever it can
  t.rows = rows;
  t.rows_dynamic = order == 1 ? 1 : 0;
  t.rows_guided = order == 2 ? 25 : (order == 3 ? -1 : 0);
  ropekv::detail::gpu::set_tuning(t);
}
void set_decode_tuning(int decode, int flat_pair) {
  ropekv::detail::gpu::Tuning t;
  t.decode = decode;
  t.flat_pair = flat_pair;
  ropekv::detail::gpu::set_tuning(t);
}
std::string launch_path(const ropekv::Arguments& a) {
  ropekv::detail::LaunchParams p;
  ropekv::detail::gpu::PreparedLaunch l;
  if (!ropekv::detail::lower(a, &p).ok() || !ropekv::detail::gpu::prepare_launch(p, &l).ok())
    return "none";
  return ropekv::detail::gpu::path_name(l);
}
// The test's own reading of the device rule for slot mapping's flat layout:
// peak DRAM bandwidth (double data rate) a multiprocessor below 30 GB/s.
bool slots_flat_by_device() {
  int dev = 0, khz = 0, bits = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return false;
  const double bytes_per_s = 2.0 * khz * 1000.0 * (bits / 8);
  return sms > 0 && bytes_per_s > 0 && bytes_per_s / sms < 30e9;
}
}  // namespace ropekv_test

namespace {

using namespace ropekv;
namespace gpu = ropekv::detail::gpu;
using detail::LaunchParams;

// gpt-oss-120b TP8-like parameters: bf16 in, e4m3fn out, fp32 cos/sin, R = D
// = 64, 8 query and 1 KV heads, NHD pages of 16, int64 slots and positions.
LaunchParams params(std::int64_t nnz, std::uintptr_t base) {
  LaunchParams p;
  p.nnz = nnz;
  p.num_q_heads = 8;
  p.num_kv_heads = 1;
  p.rotary_dim = 64;
  p.v_dim = 64;
  p.max_pos = 4096;
  p.page_size = 16;
  p.page_shift = 4;
  p.num_pages = 1024;
  p.in = {DType::kBFloat16, 2};
  p.q_out = p.cache = {DType::kFloat8E4M3FN, 1};
  p.cos = {DType::kFloat32, 4};
  auto at = [base](std::uintptr_t off) { return reinterpret_cast<char*>(base + off); };
  const std::int64_t row = (8 + 2) * 64;  // fused QKV, elements
  p.q_rope = {at(0), row, 64};
  p.k_rope = {at(8 * 64 * 2), row, 64};
  p.v = {at(9 * 64 * 2), row, 64};
  p.q_rope_out = {at(1 << 24), 8 * 64, 64};
  p.k_cache_rope.data = at(2 << 24);
  p.v_cache.data = at(3 << 24);
  for (detail::CacheTensor* c : {&p.k_cache_rope, &p.v_cache}) {
    c->stride[0] = 16 * 64;
    c->stride[1] = 64;
    c->stride[2] = 64;
  }
  p.cos_sin = at(4 << 24);
  p.cos_row_stride = 64;
  p.positions = {at(5 << 24), true};
  p.slot_mapping = {at(6 << 24), true};
  return p;
}

gpu::PreparedLaunch decide(const LaunchParams& p) {
  gpu::PreparedLaunch l;
  EXPECT_TRUE(gpu::prepare_launch(p, &l).ok());
  return l;
}

// The current device's multiprocessors (0 without one).
int multiprocessors() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 0;
  return sms;
}

// The same call addressed by a page table with int32 arrays (the decode
// kernel's fixed form kIndexTable32).
LaunchParams page_table_params(std::int64_t nnz, std::uintptr_t base) {
  LaunchParams p = params(nnz, base);
  auto at = [base](std::uintptr_t off) { return reinterpret_cast<char*>(base + off); };
  p.addressing = Addressing::kPageTable;
  p.slot_mapping = {};
  p.positions = {at(5 << 24), false};
  p.batch_indices = {at(7 << 24), false};
  p.kv_positions = {at(8 << 24), false};
  p.kv_indptr = {at(9 << 24), false};
  p.kv_indices = {at(10 << 24), false};
  p.batch_size = 8;
  p.num_kv_indices = 64;
  return p;
}

TEST(CudaLauncher, DecisionCacheFollowsWhatTheDecisionReads) {
  if (!backend_available(Backend::kCuda))
    GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)";
  const std::uintptr_t base = std::uintptr_t(1) << 32;
  const LaunchParams small = params(8, base);
  const gpu::PreparedLaunch first = decide(small);
  ASSERT_EQ(first.path, gpu::Path::kDecode);

  // The same decision again, with this call's own pointers, scales and stream.
  LaunchParams moved = params(8, base + 4096);
  moved.q_scale.value = 0.5f;
  moved.stream = reinterpret_cast<void*>(std::uintptr_t(0x1230));
  const gpu::PreparedLaunch again = decide(moved);
  EXPECT_EQ(again.path, gpu::Path::kDecode);
  EXPECT_EQ(again.kernel, first.kernel);
  EXPECT_EQ(again.grid.y, first.grid.y);
  EXPECT_EQ(again.params, &moved);
  EXPECT_EQ(again.stream, reinterpret_cast<gpu::Stream>(moved.stream));
  EXPECT_EQ(again.decode.part[0].src, moved.q_rope.data);
  EXPECT_EQ(again.decode.part[0].dst, moved.q_rope_out.data);
  EXPECT_EQ(again.decode.positions, moved.positions.data);
  EXPECT_EQ(again.decode.part[0].div.recip, 2.0f);

  // A cache page stride beyond 32 bits: not the decode kernel (its strides
  // are 32-bit), a vector kernel.
  LaunchParams wide = params(8, base);
  wide.v_cache.stride[0] = std::int64_t(1) << 32;
  EXPECT_EQ(decide(wide).path, gpu::Path::kVector);

  // A query input one element off 16 bytes: not vector-eligible, the
  // generic kernel, although nothing else changed.
  LaunchParams misaligned = params(8, base);
  misaligned.q_rope.data += 2;
  EXPECT_EQ(decide(misaligned).path, gpu::Path::kGeneric);
  EXPECT_EQ(decide(small).path, gpu::Path::kDecode);  // and back

  // Another token count: another grid (and beyond the decode-sized launches,
  // another path).
  EXPECT_EQ(decide(params(9, base)).grid.y, 9u);
  const LaunchParams many = params(200000, base);
  const gpu::PreparedLaunch large = decide(many);
  EXPECT_NE(large.path, gpu::Path::kDecode);
  EXPECT_EQ(large.params, &many);

  // Index widths pick the decode kernel's index form.
  LaunchParams narrow = params(8, base);
  narrow.positions.i64 = false;
  EXPECT_NE(decide(narrow).kernel, first.kernel);

  // The measurement overrides enter the decision too.
  gpu::Tuning t;
  t.decode = -1;
  gpu::set_tuning(t);
  const gpu::Path without_decode = decide(small).path;
  gpu::set_tuning(gpu::Tuning{});
  EXPECT_EQ(without_decode, gpu::Path::kVector);
  EXPECT_EQ(decide(small).path, gpu::Path::kDecode);
}

// The decode kernel's layouts (cuda/kernels/decode.cuh): packed for slot
// mapping, a token's 40 units on 2 warps; by part for the page table of a
// shape without non-rotary parts, each row part on warps of its own (query
// rotary 32 units, key rotary 4, values 4: 3 warps).
TEST(CudaLauncher, DecodeLayoutByForm) {
  if (!backend_available(Backend::kCuda))
    GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)";
  const std::uintptr_t base = std::uintptr_t(1) << 32;
  const gpu::PreparedLaunch slot = decide(params(8, base));
  ASSERT_EQ(slot.path, gpu::Path::kDecode);
  EXPECT_FALSE(slot.decode_by_part);
  EXPECT_EQ(slot.block.x, 64u);
  EXPECT_EQ(slot.grid.x, 1u);
  EXPECT_EQ(slot.decode.units, 40u);

  const gpu::PreparedLaunch table = decide(page_table_params(8, base));
  ASSERT_EQ(table.path, gpu::Path::kDecode);
  EXPECT_TRUE(table.decode_by_part);
  EXPECT_EQ(table.block.x, 96u);
  EXPECT_EQ(table.grid.x, 1u);
  EXPECT_EQ(table.grid.y, 8u);
  const std::uint32_t units[5] = {32, 4, 0, 0, 4};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(table.decode.part[i].units, units[i]) << "part " << i;
  EXPECT_EQ(table.decode.warp_k, 1u);
  EXPECT_EQ(table.decode.warp_v, 2u);
  EXPECT_NE(table.kernel, slot.kernel);

  // With non-rotary parts (here N = 64: a shape with its own specialisation)
  // the page table takes the by-role layout: the query's 64 units (rope and
  // nope rows) on warps 0-1, the cache's 16 (key rope, key nope, value) on
  // warp 2.
  LaunchParams with_nope = page_table_params(8, base);
  with_nope.nope_dim = 64;
  with_nope.v_dim = 128;
  with_nope.q_nope = {with_nope.q_rope.data + 64 * 2, 1024, 128};
  with_nope.k_nope = {with_nope.k_rope.data + 64 * 2, 1024, 128};
  with_nope.q_rope = {with_nope.q_rope.data, 1024, 128};
  with_nope.k_rope = {with_nope.k_rope.data, 1024, 128};
  const gpu::PreparedLaunch roles = decide(with_nope);
  ASSERT_EQ(roles.path, gpu::Path::kDecode);
  EXPECT_TRUE(roles.decode_by_part);
  EXPECT_EQ(roles.decode.warp_k, 2u);
  EXPECT_EQ(roles.block.x, 96u);
  EXPECT_EQ(roles.grid.x, 1u);
  // With slot mapping: packed.
  const LaunchParams slots = params(8, base);
  with_nope.addressing = Addressing::kSlotMapping;
  with_nope.slot_mapping = slots.slot_mapping;
  with_nope.positions = slots.positions;
  EXPECT_FALSE(decide(with_nope).decode_by_part);
}

// The decode kernel's body (kernels/decode.cuh): lean unless a present
// part's host scale needs IEEE division (a device scale's value is tested in
// the kernel; a multiplying scale never needs it), with the RoPE style in the
// low bit; both layouts.
TEST(CudaLauncher, DecodeBodyFollowsScalesAndStyle) {
  if (!backend_available(Backend::kCuda))
    GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)";
  const std::uintptr_t base = std::uintptr_t(1) << 32;
  for (const bool table : {false, true}) {
    SCOPED_TRACE(table ? "page table" : "slot mapping");
    LaunchParams p = table ? page_table_params(8, base) : params(8, base);
    EXPECT_EQ(decide(p).decode.body, gpu::kBodyLean | 0);
    p.style = RopeStyle::kInterleaved;
    EXPECT_EQ(decide(p).decode.body, gpu::kBodyLean | 1);
    p.v_scale.value = 0x1p-70f;  // outside [2^-60, 2^60]
    EXPECT_EQ(decide(p).decode.body, gpu::kBodyGeneral | 1);
    p.v_scale.convention = ScaleConvention::kMultiply;
    EXPECT_EQ(decide(p).decode.body, gpu::kBodyLean | 1);
    p.style = RopeStyle::kNeox;
    p.q_scale.value = 0.f;
    EXPECT_EQ(decide(p).decode.body, gpu::kBodyGeneral | 0);
    p.q_scale.value = 0.25f;
    p.k_scale.device = reinterpret_cast<const float*>(base + (11u << 24));
    EXPECT_EQ(decide(p).decode.body, gpu::kBodyLean | 0);
  }
}

// 32 query and 8 KV heads of D = 64: 192 units a token, 6 warps.
LaunchParams wide(std::int64_t nnz) {
  LaunchParams p = params(nnz, std::uintptr_t(1) << 32);
  const std::int64_t row = (32 + 16) * 64;
  p.num_q_heads = 32;
  p.num_kv_heads = 8;
  p.q_rope = {p.q_rope.data, row, 64};
  p.k_rope = {p.q_rope.data + 32 * 64 * 2, row, 64};
  p.v = {p.q_rope.data + 40 * 64 * 2, row, 64};
  p.q_rope_out = {p.q_rope_out.data, 32 * 64, 64};
  return p;
}

// The packed layout's blocks: 4 warps, or 2 with PDL and early indices
// while 4-warp blocks are fewer than 4 a multiprocessor (the per-thread
// decision cache tells the two apart); the by-part layout keeps 4.
TEST(CudaLauncher, DecodeBlocksOfTwoWarpsForSmallEarlyLaunches) {
  if (!backend_available(Backend::kCuda))
    GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)";
  const int sms = multiprocessors();
  ASSERT_GT(sms, 0);
  LaunchParams small = wide(2 * sms - 1);  // 4-warp blocks: 2 a token, < 4 a multiprocessor
  gpu::PreparedLaunch l = decide(small);
  ASSERT_EQ(l.path, gpu::Path::kDecode);
  ASSERT_FALSE(l.decode_by_part);
  EXPECT_EQ(l.block.x, 128u);
  EXPECT_EQ(l.grid.x, 2u);
  small.pdl = true;
  EXPECT_EQ(decide(small).block.x, 128u);  // PDL alone: 4 warps
  small.early_indices = true;
  l = decide(small);
  EXPECT_EQ(l.block.x, 64u);
  EXPECT_EQ(l.grid.x, 3u);
  LaunchParams large = wide(2 * sms);  // 4 blocks a multiprocessor
  large.pdl = large.early_indices = true;
  l = decide(large);
  ASSERT_EQ(l.path, gpu::Path::kDecode);
  EXPECT_EQ(l.block.x, 128u);
  small.pdl = false;  // early indices without PDL: not early
  EXPECT_EQ(decide(small).block.x, 128u);
  LaunchParams table = page_table_params(8, std::uintptr_t(1) << 32);
  table.pdl = table.early_indices = true;
  l = decide(table);
  ASSERT_TRUE(l.decode_by_part);
  EXPECT_EQ(l.block.x, 96u);
}

// Page tables with PDL and early indices from 64 tokens: the flat layout by
// role where the 2D grid fits at once; not below 64 tokens, not without early
// indices, not for slot mapping, not against the measurement overrides.
TEST(CudaLauncher, FlatDecodeLayoutForEarlyPageTablesFromSixtyFourTokens) {
  if (!backend_available(Backend::kCuda))
    GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)";
  const std::uintptr_t base = std::uintptr_t(1) << 32;
  LaunchParams table = page_table_params(64, base);
  table.pdl = table.early_indices = true;
  gpu::PreparedLaunch l = decide(table);
  ASSERT_EQ(l.path, gpu::Path::kDecode);
  EXPECT_TRUE(l.decode_flat);
  EXPECT_TRUE(l.decode_by_part);  // by role
  EXPECT_EQ(l.block.x, 128u);
  EXPECT_EQ(l.grid.x, unsigned((64 * 40 + 127) / 128));
  EXPECT_EQ(l.grid.y, 1u);
  LaunchParams fewer = page_table_params(63, base);
  fewer.pdl = fewer.early_indices = true;
  EXPECT_FALSE(decide(fewer).decode_flat);
  table.early_indices = false;  // PDL alone
  EXPECT_FALSE(decide(table).decode_flat);
  LaunchParams slots = params(64, base);
  slots.pdl = slots.early_indices = true;
  EXPECT_FALSE(decide(slots).decode_flat);
  table.early_indices = true;
  gpu::Tuning t;
  t.decode = 1;  // the decode kernel wherever it can run, its 2D grid
  gpu::set_tuning(t);
  const gpu::PreparedLaunch grid = decide(table);
  gpu::set_tuning(gpu::Tuning{});
  EXPECT_EQ(grid.path, gpu::Path::kDecode);
  EXPECT_FALSE(grid.decode_flat);
}

// Without PDL, from 4 blocks of 4 warps a multiprocessor on: one block of a
// token's 6 warps (blocks of up to 8 warps, the warps spread evenly); below
// that, or with PDL, blocks of 4 warps.
TEST(CudaLauncher, DecodeBlocksOfUpToEightWarpsForLargeLaunchesWithoutPdl) {
  if (!backend_available(Backend::kCuda))
    GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)";
  const int sms = multiprocessors();
  ASSERT_GT(sms, 0);
  LaunchParams large = wide(2 * sms);  // 4-warp blocks: 2 a token, 4 a multiprocessor
  gpu::PreparedLaunch l = decide(large);
  ASSERT_EQ(l.path, gpu::Path::kDecode);
  EXPECT_EQ(l.block.x, 192u);
  EXPECT_EQ(l.grid.x, 1u);
  EXPECT_EQ(l.grid.y, unsigned(2 * sms));
  large.pdl = true;
  l = decide(large);
  EXPECT_EQ(l.block.x, 128u);
  EXPECT_EQ(l.grid.x, 2u);
  LaunchParams small = wide(2 * sms - 1);
  l = decide(small);
  ASSERT_EQ(l.path, gpu::Path::kDecode);
  EXPECT_EQ(l.block.x, 128u);
  // The measurement override: the old rule, then 3-warp blocks spread evenly.
  gpu::Tuning t;
  t.decode_warps = -1;
  gpu::set_tuning(t);
  large.pdl = false;
  const unsigned old_block = decide(large).block.x;
  t.decode_warps = 3;
  gpu::set_tuning(t);
  const gpu::PreparedLaunch three = decide(large);
  gpu::set_tuning(gpu::Tuning{});
  EXPECT_EQ(old_block, 128u);
  EXPECT_EQ(three.block.x, 96u);
  EXPECT_EQ(three.grid.x, 2u);
}

// The flat decode layout where the rows kernel's grid would hold every token
// in one wave (a team a token): gpt-oss TP8's 40 units a token at 64 tokens
// a multiprocessor (the rows kernel's blocks: one a multiprocessor), blocks
// of 128 threads over the tokens' units back to back (page tables: by role);
// not where the rows kernel's teams loop (200000 tokens) or the overrides
// say otherwise.
TEST(CudaLauncher, FlatDecodeLayoutWhereRowsTeamsTakeOneToken) {
  if (!backend_available(Backend::kCuda))
    GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)";
  const int sms = multiprocessors();
  ASSERT_GT(sms, 0);
  const std::uintptr_t base = std::uintptr_t(1) << 32;
  const LaunchParams mid = params(64 * std::int64_t(sms), base);
  const gpu::PreparedLaunch l = decide(mid);
  ASSERT_EQ(l.path, gpu::Path::kDecode);
  EXPECT_TRUE(l.decode_flat);
  EXPECT_EQ(l.block.x, 128u);
  EXPECT_EQ(l.grid.x, unsigned((64 * sms * 40 + 127) / 128));
  EXPECT_EQ(l.grid.y, 1u);
  EXPECT_FALSE(l.decode_by_part);  // packed
  // With a page table, by role: the query's 32 units of every token, then
  // the cache's 8 (key 4, value 4), each role with its own divisor.
  const std::int64_t nnz = 64 * std::int64_t(sms);
  const gpu::PreparedLaunch roles = decide(page_table_params(nnz, base));
  ASSERT_EQ(roles.path, gpu::Path::kDecode);
  EXPECT_TRUE(roles.decode_flat);
  EXPECT_TRUE(roles.decode_by_part);
  EXPECT_EQ(roles.grid.x, l.grid.x);
  const gpu::FlatDivisor q = gpu::flat_divisor(32), c = gpu::flat_divisor(8);
  EXPECT_EQ(roles.decode.warp_k, q.m);
  EXPECT_EQ(roles.decode.warp_v, (std::uint32_t(nnz) << 8) | q.s);
  EXPECT_EQ(roles.decode.*gpu::FlatRoleFields::cache_m, c.m);
  EXPECT_EQ(roles.decode.*gpu::FlatRoleFields::cache_s, c.s);
  EXPECT_EQ(roles.decode.*gpu::FlatRoleFields::query_end, std::uint32_t(nnz) * 32u);
  EXPECT_NE(decide(params(200000, base)).path, gpu::Path::kDecode);
  EXPECT_FALSE(roles.decode_stream);
  EXPECT_EQ(roles.decode.body, gpu::kBodyLean);
  gpu::Tuning t;
  t.rows = 1;  // the rows kernel wherever it can (and the decode kernel nowhere)
  t.decode = -1;
  gpu::set_tuning(t);
  const gpu::PreparedLaunch rows = decide(mid);
  gpu::set_tuning(gpu::Tuning{});
  EXPECT_EQ(rows.path, gpu::Path::kRows);
  EXPECT_FALSE(rows.decode_flat);
}

// Tokens of page_table_params' shape (gpt-oss TP8: 40 units of 16 elements,
// 2 bytes in and 1 out, 1920 bytes a token) whose bytes fill the device's
// L2; 0 where the query fails.
std::int64_t tokens_filling_l2() {
  int dev = 0, l2 = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess)
    return 0;
  return std::int64_t(l2) / 1920;
}

// Page tables past the decode grid: flat by role up to four L2s of bytes a
// launch, in the kernel whose inputs load evict-first past one L2;
// the rows kernel beyond and under flat_tables=-1 (which, like every
// override, enters a kept decision); slot mapping the same (packed) on devices
// of low DRAM bandwidth a multiprocessor or under flat_slots=4, else and under
// flat_slots=-1 the rows kernel. A flat layout within one L2
// (the TP8 rule at 8192 tokens, decode=2) takes the other kernel; decode=4
// forces the streaming one.
TEST(CudaLauncher, PageTablesFlatWithinFourL2sStreamingPastOne) {
  if (!backend_available(Backend::kCuda))
    GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)";
  const std::uintptr_t base = std::uintptr_t(1) << 32;
  const std::int64_t per_l2 = tokens_filling_l2();
  ASSERT_GT(per_l2, 0);
  const gpu::PreparedLaunch two = decide(page_table_params(2 * per_l2, base));
  const gpu::PreparedLaunch half = decide(page_table_params(per_l2 / 2, base));
  const gpu::PreparedLaunch five = decide(page_table_params(5 * per_l2, base));
  const gpu::PreparedLaunch slots = decide(params(2 * per_l2, base));
  gpu::Tuning t;
  t.flat_tables = -1;
  gpu::set_tuning(t);
  const gpu::PreparedLaunch never = decide(page_table_params(2 * per_l2, base));
  t = gpu::Tuning{};
  t.flat_slots = 4;  // slot mapping flat within four L2s on any device
  gpu::set_tuning(t);
  const gpu::PreparedLaunch slots_flat = decide(params(2 * per_l2, base));
  t.flat_slots = -1;  // never
  gpu::set_tuning(t);
  const gpu::PreparedLaunch slots_rows = decide(params(2 * per_l2, base));
  t = gpu::Tuning{};
  t.decode = 2;
  gpu::set_tuning(t);
  const gpu::PreparedLaunch forced = decide(page_table_params(8, base));
  t.decode = 4;
  gpu::set_tuning(t);
  const gpu::PreparedLaunch forced_stream = decide(page_table_params(8, base));
  gpu::set_tuning(gpu::Tuning{});
  ASSERT_EQ(two.path, gpu::Path::kDecode);
  EXPECT_TRUE(two.decode_flat);
  EXPECT_TRUE(two.decode_by_part);
  EXPECT_TRUE(two.decode_stream);
  EXPECT_EQ(two.decode.body, gpu::kBodyLean);
  ASSERT_EQ(half.path, gpu::Path::kDecode);
  EXPECT_TRUE(half.decode_flat);
  EXPECT_FALSE(half.decode_stream);
  EXPECT_NE(half.kernel, two.kernel);
  EXPECT_EQ(five.path, gpu::Path::kRows);
  EXPECT_EQ(never.path, gpu::Path::kRows);
  ASSERT_EQ(slots_flat.path, gpu::Path::kDecode);
  EXPECT_TRUE(slots_flat.decode_flat);
  EXPECT_FALSE(slots_flat.decode_by_part);
  EXPECT_TRUE(slots_flat.decode_stream);
  EXPECT_EQ(slots_rows.path, gpu::Path::kRows);
  if (ropekv_test::slots_flat_by_device()) {  // the H100 SXM: 25 GB/s a multiprocessor
    EXPECT_EQ(slots.path, gpu::Path::kDecode) << "a device of low DRAM bandwidth a multiprocessor";
    EXPECT_EQ(slots.kernel, slots_flat.kernel);
    EXPECT_EQ(slots.grid.x, slots_flat.grid.x);
  } else {  // the H200: 37 GB/s
    EXPECT_EQ(slots.path, gpu::Path::kRows) << "a device of high DRAM bandwidth a multiprocessor";
  }
  EXPECT_TRUE(forced.decode_flat);
  EXPECT_FALSE(forced.decode_stream);
  EXPECT_EQ(forced.kernel, half.kernel);
  EXPECT_TRUE(forced_stream.decode_flat);
  EXPECT_TRUE(forced_stream.decode_stream);
  EXPECT_EQ(forced_stream.kernel, two.kernel);
  // The override enters a kept decision like the others.
  detail::LaunchState state;
  const LaunchParams tables = page_table_params(2 * per_l2, base);
  gpu::PreparedLaunch kept;
  ASSERT_TRUE(gpu::prepare_launch(tables, &kept, &state).ok());
  EXPECT_TRUE(kept.decode_stream);
  t = gpu::Tuning{};
  t.flat_tables = -1;
  gpu::set_tuning(t);
  const bool prepared = gpu::prepare_launch(tables, &kept, &state).ok();
  gpu::set_tuning(gpu::Tuning{});
  ASSERT_TRUE(prepared);
  EXPECT_EQ(kept.path, gpu::Path::kRows);
}

// The rows kernel's grid: the rule's (one wave of resident blocks, and the
// guided order's blocks after it where DRAM bandwidth a multiprocessor is
// low), the guided order's share as asked, and the override (a measurement
// tool): N blocks as asked, past one wave too; -1 the fewest blocks that keep
// one wave's tokens a team.
TEST(CudaLauncher, RowsGridRuleAndOverride) {
  if (!backend_available(Backend::kCuda))
    GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)";
  const std::uintptr_t base = std::uintptr_t(1) << 32;
  const std::int64_t per_l2 = tokens_filling_l2();
  ASSERT_GT(per_l2, 0);
  const std::int64_t nnz = 5 * per_l2 + 7;  // past four L2s: the rows kernel
  const gpu::PreparedLaunch rule = decide(page_table_params(nnz, base));
  ASSERT_EQ(rule.path, gpu::Path::kRows);
  // The rule's grid: one wave of resident blocks; on devices of low DRAM
  // bandwidth a multiprocessor the guided order's blocks of one token a team
  // after it, for a tenth of the tokens.
  int per_sm = 0;
  ASSERT_EQ(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rule.kernel, int(rule.block.x), 0),
      cudaSuccess);
  const std::int64_t wave = std::int64_t(multiprocessors()) * per_sm;
  const std::int64_t teams = rule.geometry.teams;
  ASSERT_GT(wave, 0);
  ASSERT_GT(nnz / 2, wave * teams);
  const bool guided = ropekv_test::slots_flat_by_device();
  EXPECT_EQ(std::int64_t(rule.grid.x), wave + (guided ? nnz * 10 / 100 / teams : 0));
  EXPECT_EQ(std::int64_t(rule.geometry.guided_blocks), guided ? wave : 0);
  gpu::Tuning t;
  t.rows_guided = 25;
  gpu::set_tuning(t);
  const gpu::PreparedLaunch quarter = decide(page_table_params(nnz, base));
  t.rows_guided = -1;
  gpu::set_tuning(t);
  const gpu::PreparedLaunch one_wave = decide(page_table_params(nnz, base));
  t.rows_guided = 0;
  EXPECT_EQ(std::int64_t(quarter.grid.x), wave + nnz * 25 / 100 / teams);
  EXPECT_EQ(std::int64_t(quarter.geometry.guided_blocks), wave);
  EXPECT_EQ(std::int64_t(one_wave.grid.x), wave);
  EXPECT_EQ(one_wave.geometry.guided_blocks, 0u);
  t.rows_blocks = int(3 * rule.grid.x);
  gpu::set_tuning(t);
  const gpu::PreparedLaunch waves = decide(page_table_params(nnz, base));
  t.rows_blocks = -1;
  gpu::set_tuning(t);
  const gpu::PreparedLaunch even = decide(page_table_params(nnz, base));
  gpu::set_tuning(gpu::Tuning{});
  EXPECT_EQ(waves.path, gpu::Path::kRows);
  EXPECT_EQ(waves.kernel, rule.kernel);
  EXPECT_EQ(waves.grid.x, 3 * rule.grid.x);
  ASSERT_EQ(even.path, gpu::Path::kRows);
  const auto rounds = [&](std::int64_t grid) { return (nnz + grid * teams - 1) / (grid * teams); };
  // The fewest blocks that keep one wave's rounds a team.
  EXPECT_LE(std::int64_t(even.grid.x), wave);
  EXPECT_EQ(rounds(even.grid.x), rounds(wave));
  EXPECT_GT(rounds(even.grid.x - 1), rounds(wave)) << "not the fewest blocks";
}

// The MLA kernels' 64-register twin (kernels/decode.cuh, kDecodeFewBlocks):
// taken where its grid fits on the device at once, the 48-register kernel
// where only that one's does.
TEST(CudaLauncher, DecodeTwinOfMoreRegistersWhereItsGridFits) {
  if (!backend_available(Backend::kCuda))
    GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)";
  const int sms = multiprocessors();
  ASSERT_GT(sms, 0);
  const std::uintptr_t base = std::uintptr_t(1) << 32;
  // deepseek-v3 MLA TP8: 16 query heads, one latent head, R 64, N 512: 612
  // units a token, 20 warps, 5 blocks of 4 warps.
  const auto mla = [&](std::int64_t nnz) {
    LaunchParams p = params(nnz, base);
    auto at = [base](std::uintptr_t off) { return reinterpret_cast<char*>(base + off); };
    p.kind = AttentionKind::kMla;
    p.num_q_heads = 16;
    p.num_kv_heads = 1;
    p.nope_dim = 512;
    p.v_dim = 0;
    p.q_nope = {at(0), 16 * 576, 576};
    p.q_rope = {at(512 * 2), 16 * 576, 576};
    p.k_nope = {at(1u << 22), 576, 576};
    p.k_rope = {at((1u << 22) + 512 * 2), 576, 576};
    p.v = {};
    p.q_nope_out = {at(1u << 24), 16 * 576, 576};
    p.q_rope_out = {at((1u << 24) + 512), 16 * 576, 576};
    p.k_cache_nope.data = at(2u << 24);
    p.k_cache_rope.data = at((2u << 24) + 512);
    for (detail::CacheTensor* c : {&p.k_cache_nope, &p.k_cache_rope}) {
      c->stride[0] = 16 * 576;
      c->stride[1] = 576;
      c->stride[2] = 576;
    }
    p.v_cache = {};
    return p;
  };
  const gpu::PreparedLaunch one = decide(mla(1)), wave = decide(mla(sms));
  const gpu::PreparedLaunch full = decide(mla(2 * sms));  // 10 blocks a multiprocessor
  ASSERT_EQ(one.path, gpu::Path::kDecode);
  ASSERT_EQ(full.path, gpu::Path::kDecode);
  EXPECT_EQ(one.block.x, 128u);
  EXPECT_EQ(one.grid.x, 5u);
  EXPECT_EQ(one.kernel, wave.kernel);
  EXPECT_NE(one.kernel, full.kernel);
  // The same at run time: a 64-register kernel, 8 blocks of 128 threads a
  // multiprocessor at most, against the 48-register one's 10.
  cudaFuncAttributes fa{}, fb{};
  ASSERT_EQ(cudaFuncGetAttributes(&fa, one.kernel), cudaSuccess);
  ASSERT_EQ(cudaFuncGetAttributes(&fb, full.kernel), cudaSuccess);
  EXPECT_GT(fa.numRegs, 48);
  EXPECT_LE(fb.numRegs, 48);
}

// A caller's kept decision (LaunchState, a PreparedCall's): the same as the
// per-thread one for every call, reused while the token count and the
// alignment verdict stay, with the data of each call.
TEST(CudaLauncher, KeptDecisionFollowsTokenCountAlignmentAndData) {
  if (!backend_available(Backend::kCuda))
    GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)";
  const std::uintptr_t base = std::uintptr_t(1) << 32;
  detail::LaunchState state;
  const auto kept = [&](const LaunchParams& p) {
    gpu::PreparedLaunch l;
    EXPECT_TRUE(gpu::prepare_launch(p, &l, &state).ok());
    EXPECT_TRUE(state.valid);
    return l;
  };
  const auto expect_same = [](const gpu::PreparedLaunch& a, const gpu::PreparedLaunch& b) {
    EXPECT_EQ(a.path, b.path);
    EXPECT_EQ(a.kernel, b.kernel);
    EXPECT_EQ(a.grid.x, b.grid.x);
    EXPECT_EQ(a.grid.y, b.grid.y);
    EXPECT_EQ(a.block.x, b.block.x);
    EXPECT_EQ(a.smem, b.smem);
    EXPECT_EQ(a.params, b.params);
    EXPECT_EQ(a.stream, b.stream);
    if (a.path != gpu::Path::kDecode) return;  // the decode parameters are not read
    EXPECT_EQ(std::memcmp(&a.decode.part, &b.decode.part, sizeof a.decode.part), 0);
    EXPECT_EQ(a.decode.positions, b.decode.positions);
    EXPECT_EQ(a.decode.slot_mapping, b.decode.slot_mapping);
    EXPECT_EQ(a.decode.cos_sin, b.decode.cos_sin);
    EXPECT_EQ(a.decode.units, b.decode.units);
    EXPECT_EQ(a.decode_by_part, b.decode_by_part);
    EXPECT_EQ(a.decode.warp_k, b.decode.warp_k);
    EXPECT_EQ(a.decode.warp_v, b.decode.warp_v);
  };
  const LaunchParams first = params(8, base);
  const gpu::PreparedLaunch a = kept(first);
  ASSERT_EQ(a.path, gpu::Path::kDecode);
  expect_same(a, decide(first));
  // Moved data (same token count): the kept decision, this call's data.
  LaunchParams moved = params(8, base + 4096);
  moved.stream = reinterpret_cast<void*>(std::uintptr_t(0x1230));
  const gpu::PreparedLaunch b = kept(moved);
  expect_same(b, decide(moved));
  EXPECT_EQ(b.decode.part[0].src, moved.q_rope.data);
  // Misaligned rows, another token count, a large launch, and back.
  LaunchParams misaligned = params(8, base);
  misaligned.q_rope.data += 2;
  EXPECT_EQ(kept(misaligned).path, gpu::Path::kGeneric);
  expect_same(kept(first), decide(first));
  const LaunchParams nine = params(9, base);
  expect_same(kept(nine), decide(nine));
  const LaunchParams many = params(200000, base);
  const gpu::PreparedLaunch large = kept(many);
  EXPECT_NE(large.path, gpu::Path::kDecode);
  expect_same(large, decide(many));
  expect_same(kept(first), decide(first));
}

}  // namespace

// The bulk kernel's plan (measurement override bulk=1): where each input
// part lies in a token's span, kept for calls whose parts keep their places
// relative to each other (only the base moves), made afresh where they move
// apart, and no plan where the parts leave gaps in the span.
TEST(CudaLauncherBulk, PlanFollowsTheInputsPlaces) {
  if (!backend_available(Backend::kCuda))
    GTEST_SKIP() << "no CUDA device present: CUDA tests skipped (not passed)";
  const std::uintptr_t base = std::uintptr_t(1) << 32;
  ropekv_test::set_bulk_tuning(true);
  const gpu::PreparedLaunch first = decide(params(20000, base));
  ASSERT_EQ(first.path, gpu::Path::kBulk);
  EXPECT_EQ(first.bulk.base, reinterpret_cast<const char*>(base));
  EXPECT_EQ(first.bulk.span, 1280u);
  EXPECT_EQ(first.bulk.token_bytes, 1280);
  EXPECT_TRUE(first.bulk.contiguous);
  const std::uint32_t off[5] = {0, 1024, 0, 0, 1152};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(first.bulk.off[i], off[i]) << "part " << i;
  EXPECT_GT(first.smem, 48u * 1024);  // three slots of bulk.tokens spans: above the default

  const gpu::PreparedLaunch moved = decide(params(20000, base + 4096));
  ASSERT_EQ(moved.path, gpu::Path::kBulk);
  EXPECT_EQ(moved.bulk.base, reinterpret_cast<const char*>(base + 4096));
  EXPECT_EQ(moved.bulk.off[gpu::kRotK], 1024u);

  // Values first, then the key, then the queries: the same decision key,
  // another plan.
  LaunchParams swapped = params(20000, base);
  const std::int64_t row = 10 * 64;
  char* at0 = reinterpret_cast<char*>(base);
  swapped.v = {at0, row, 64};
  swapped.k_rope = {at0 + 64 * 2, row, 64};
  swapped.q_rope = {at0 + 2 * 64 * 2, row, 64};
  const gpu::PreparedLaunch other = decide(swapped);
  ASSERT_EQ(other.path, gpu::Path::kBulk);
  EXPECT_EQ(other.bulk.off[gpu::kRotQ], 256u);
  EXPECT_EQ(other.bulk.off[gpu::kRotK], 128u);
  EXPECT_EQ(other.bulk.off[gpu::kValue], 0u);

  // Rows one 16-byte word apart beyond the span: a copy per token.
  LaunchParams spaced = params(20000, base);
  for (detail::HeadTensor* t : {&spaced.q_rope, &spaced.k_rope, &spaced.v}) t->token_stride += 8;
  const gpu::PreparedLaunch per_token = decide(spaced);
  ASSERT_EQ(per_token.path, gpu::Path::kBulk);
  EXPECT_FALSE(per_token.bulk.contiguous);
  EXPECT_EQ(per_token.bulk.token_bytes, 1296);

  // A gap between the key and the values inside the span: no bulk plan.
  LaunchParams gap = spaced;
  gap.v.data += 16;
  EXPECT_NE(decide(gap).path, gpu::Path::kBulk);
  ropekv_test::set_bulk_tuning(false);
  EXPECT_NE(decide(params(20000, base)).path, gpu::Path::kBulk);  // the override only
}

// The flat grids' token of thread x (ROPEKV_FLAT_QUOTIENT, flat_divisor)
// against x / units, at the quotient's worst points: the last thread of a
// token (largest remainder) and the first of the next, for tokens spread
// over the whole range below 2^31 (flat_grid_fits' bound), and unit counts
// from 1 to beyond the decode kernel's 16-bit parts. Arithmetic only: no
// device needed.
TEST(CudaLauncher, VectorPathOnlyWhereUnitCountsFit32Bits) {
  // Host arithmetic, no device. Heads * units a head must stay below 2^31,
  // including where their product would pass 2^63 (2^34 heads of 2^26 units
  // are 2^60 units; 2^34 heads of 2^30 dims make 2^64 elements, which wrap).
  LaunchParams p = params(8, std::uintptr_t(1) << 32);
  EXPECT_TRUE(gpu::vector_eligible(p));
  const std::int64_t per_head = p.rotary_dim + p.v_dim;  // 128: 8 units of 16
  p.num_q_heads = ((std::int64_t(1) << 31) - 1) / (per_head / 16) - p.num_kv_heads;
  EXPECT_TRUE(gpu::vector_eligible(p)) << "2^31 - 8 units";
  ++p.num_q_heads;
  EXPECT_FALSE(gpu::vector_eligible(p)) << "2^31 units";
  p.num_q_heads = (std::int64_t(1) << 34) - 1;
  p.v_dim = (std::int64_t(1) << 30) - p.rotary_dim;
  EXPECT_FALSE(gpu::vector_eligible(p)) << "2^60 units";
}

TEST(CudaLauncher, FlatQuotientIsExactBelowTwoToThe31) {
  const std::uint64_t limit = std::uint64_t(1) << 31;
  std::uint64_t checked = 0, wrong = 0;
  std::string first_wrong;
  auto check_units = [&](std::uint32_t units) {
    const gpu::FlatDivisor d = gpu::flat_divisor(units);
    const std::uint64_t tokens = (limit - 1) / units + 1;  // tokens with a thread below 2^31
    const std::uint64_t step = tokens / 4096 + 1;
    auto check_token = [&](std::uint64_t t) {
      for (const std::uint64_t x : {t * units, t * units + units - 1}) {
        if (x >= limit) continue;
        ++checked;
        const std::uint32_t got = ROPEKV_FLAT_QUOTIENT(std::uint32_t(x), d);
        if (got != x / units && wrong++ == 0)
          first_wrong = "units " + std::to_string(units) + ", thread " + std::to_string(x) + ": " +
                        std::to_string(got) + " instead of " + std::to_string(x / units);
      }
    };
    for (std::uint64_t t = 0; t < tokens; t += step) check_token(t);
    for (std::uint64_t t = tokens > 64 ? tokens - 64 : 0; t < tokens; ++t) check_token(t);
  };
  for (std::uint32_t units = 1; units <= 4096; ++units) check_units(units);
  for (const std::uint32_t units :
       {6000u, 40000u, 65535u, 65536u, 65537u, 196605u, 1u << 20, (1u << 20) + 1, 1000003u})
    check_units(units);
  EXPECT_EQ(wrong, 0u) << first_wrong;
  EXPECT_GT(checked, 4096u * 8192u);  // every unit count, thousands of tokens each
}
