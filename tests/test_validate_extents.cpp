// Validation tests (fixture: validate_fixture.hpp), the shape rules: rotary dim and
// cos/sin table, extents (nnz, heads, R/N/Dv, pages), MLA, page table.
#include <gtest/gtest.h>

#include "ropekv/ropekv.hpp"
#include "validate_fixture.hpp"

namespace ropekv_test {
namespace validation {
namespace {

// ======================================================= rotary dim, cos/sin

TEST_F(Validate, RotaryDimOdd) {
  Arguments a = Baseline();
  a.q_rope.extent[2] = kR - 1;
  ExpectRejected(a, Status::kErrorInvalidRotaryDim,
                 {"rotary dim R", "q_rope.extent[2]", "even and > 0", "got 7"});
}

TEST_F(Validate, RotaryDimZero) {
  Arguments a = Baseline();
  a.q_rope.extent[2] = 0;
  ExpectRejected(a, Status::kErrorInvalidRotaryDim,
                 {"rotary dim R", "q_rope.extent[2]", "even and > 0", "got 0"});
}

TEST_F(Validate, CosSinWidthMismatch) {
  Arguments a = Baseline();
  a.cos_sin_cache.extent[1] = kR / 2;  // a table holding cos only
  a.cos_sin_cache.stride[0] = kR / 2;
  ExpectRejected(a, Status::kErrorCosSinMismatch,
                 {"cos_sin_cache.extent[1]", "must equal the rotary dim R (8)", "got 4"});
}

TEST_F(Validate, CosSinEmpty) {
  Arguments a = Baseline();
  a.cos_sin_cache.extent[0] = 0;
  ExpectRejected(a, Status::kErrorCosSinMismatch,
                 {"cos_sin_cache.extent[0]", "max_pos", "must be > 0", "got 0"});
}

// ======================================================= extents: nnz

TEST_F(Validate, NnzMismatchKRope) {
  Arguments a = Baseline();
  a.k_rope.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"k_rope.extent[0]", "must equal nnz (3)", "got 2"});
}

TEST_F(Validate, NnzMismatchQNope) {
  Arguments a = Baseline();
  a.q_nope.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"q_nope.extent[0]", "must equal nnz (3)"});
}

TEST_F(Validate, NnzMismatchV) {
  Arguments a = Baseline();
  a.v.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"v.extent[0]", "must equal nnz (3)"});
}

TEST_F(Validate, NnzMismatchQRopeOut) {
  Arguments a = Baseline();
  a.q_rope_out.extent[0] = kNnz + 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"q_rope_out.extent[0]", "must equal nnz (3)", "got 4"});
}

TEST_F(Validate, NnzMismatchPositions) {
  Arguments a = Baseline();
  a.positions.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"positions.extent[0]", "must equal nnz (3)"});
}

TEST_F(Validate, NnzMismatchSlotMapping) {
  Arguments a = Baseline();
  a.cache_index.slot_mapping.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"cache_index.slot_mapping.extent[0]", "must equal nnz (3)"});
}

// ======================================================= extents: heads

TEST_F(Validate, HqZero) {
  Arguments a = Baseline();
  a.q_rope.extent[1] = 0;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"q_rope.extent[1]", "Hq", "must be > 0"});
}

TEST_F(Validate, HqMismatchQRopeOut) {
  Arguments a = Baseline();
  a.q_rope_out.extent[1] = kHq - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"q_rope_out.extent[1]", "must equal Hq (4)", "got 3"});
}

TEST_F(Validate, HqMismatchQNope) {
  Arguments a = Baseline();
  a.q_nope.extent[1] = kHq - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"q_nope.extent[1]", "must equal Hq (4)"});
}

TEST_F(Validate, HqMismatchQNopeOut) {
  Arguments a = Baseline();
  a.q_nope_out.extent[1] = kHq - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"q_nope_out.extent[1]", "must equal Hq (4)"});
}

TEST_F(Validate, HkZero) {
  Arguments a = Baseline();
  a.k_rope.extent[1] = 0;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_rope.extent[1]", "Hk", "must be > 0"});
}

TEST_F(Validate, HkMismatchKNope) {
  Arguments a = Baseline();
  a.k_nope.extent[1] = kHk - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"k_nope.extent[1]", "must equal Hk (2)", "got 1"});
}

TEST_F(Validate, HkMismatchV) {
  Arguments a = Baseline();
  a.v.extent[1] = kHk - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"v.extent[1]", "must equal Hk (2)"});
}

TEST_F(Validate, HkMismatchKCacheRope) {
  Arguments a = Baseline();
  a.k_cache_rope.extent[2] = kHk - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_cache_rope.extent[2]", "must equal Hk (2)"});
}

TEST_F(Validate, HkMismatchKCacheNope) {
  Arguments a = Baseline();
  a.k_cache_nope.extent[2] = kHk - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_cache_nope.extent[2]", "must equal Hk (2)"});
}

TEST_F(Validate, HkMismatchVCache) {
  Arguments a = Baseline();
  a.v_cache.extent[2] = kHk - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"v_cache.extent[2]", "must equal Hk (2)"});
}

// ======================================================= extents: R, N, Dv

TEST_F(Validate, RMismatchKRope) {
  Arguments a = Baseline();
  a.k_rope.extent[2] = kR - 2;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_rope.extent[2]", "must equal R (8)", "got 6"});
}

TEST_F(Validate, RMismatchQRopeOut) {
  Arguments a = Baseline();
  a.q_rope_out.extent[2] = kR - 2;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"q_rope_out.extent[2]", "must equal R (8)"});
}

TEST_F(Validate, RMismatchKCacheRope) {
  Arguments a = Baseline();
  a.k_cache_rope.extent[3] = kR - 2;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_cache_rope.extent[3]", "must equal R (8)"});
}

TEST_F(Validate, NMismatchKNope) {
  Arguments a = Baseline();
  a.k_nope.extent[2] = kN - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_nope.extent[2]", "must equal N", "got 3"});
}

TEST_F(Validate, NMismatchQNopeOut) {
  Arguments a = Baseline();
  a.q_nope_out.extent[2] = kN - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"q_nope_out.extent[2]", "must equal N"});
}

TEST_F(Validate, NMismatchKCacheNope) {
  Arguments a = Baseline();
  a.k_cache_nope.extent[3] = kN - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_cache_nope.extent[3]", "must equal N"});
}

TEST_F(Validate, DvZero) {
  Arguments a = Baseline();
  a.v.extent[2] = 0;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"v.extent[2]", "Dv", "must be > 0"});
}

TEST_F(Validate, DvMismatchVCache) {
  Arguments a = Baseline();
  a.v_cache.extent[3] = kD - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"v_cache.extent[3]", "must equal Dv", "(12)", "got 11"});
}

// ======================================================= extents: pages

TEST_F(Validate, PageSizeZero) {
  Arguments a = Baseline();
  a.k_cache_rope.extent[1] = 0;
  ExpectRejected(a, Status::kErrorInvalidPageSize,
                 {"page_size", "k_cache_rope.extent[1]", "must be > 0", "got 0"});
}

TEST_F(Validate, PageSizeNegative) {
  // The contract: "page_size <= 0" is its own rule; ropekv.hpp documents
  // kErrorInvalidPageSize as "page_size <= 0".
  Arguments a = Baseline();
  a.k_cache_rope.extent[1] = -kPageSize;
  ExpectRejected(a, Status::kErrorInvalidPageSize, {"page_size", "k_cache_rope.extent[1]", "-4"});
}

TEST_F(Validate, NumPagesZero) {
  Arguments a = Baseline();
  a.k_cache_rope.extent[0] = 0;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"num_pages", "k_cache_rope.extent[0]", "must be > 0", "got 0"});
}

TEST_F(Validate, PageSizeMismatchKCacheNope) {
  Arguments a = Baseline();
  a.k_cache_nope.extent[1] = kPageSize - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"k_cache_nope.extent[1]", "must equal page_size (4)", "got 3"});
}

TEST_F(Validate, PageSizeMismatchVCache) {
  Arguments a = Baseline();
  a.v_cache.extent[1] = kPageSize * 2;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"v_cache.extent[1]", "must equal page_size (4)", "got 8"});
}

TEST_F(Validate, NumPagesMismatchKCacheNope) {
  Arguments a = Baseline();
  a.k_cache_nope.extent[0] = kPages - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"k_cache_nope.extent[0]", "must equal num_pages (4)", "got 3"});
}

TEST_F(Validate, NumPagesMismatchVCache) {
  Arguments a = Baseline();
  a.v_cache.extent[0] = kPages - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"v_cache.extent[0]", "must equal num_pages (4)", "got 3"});
}

// ======================================================= MLA

TEST_F(Validate, MlaWithValue) {
  Arguments a = MlaBaseline();
  a.v = Baseline().v;
  a.v.extent[1] = 1;
  ExpectRejected(a, Status::kErrorInvalidArgument, {"v and v_cache", "absent", "kMla"});
}

TEST_F(Validate, MlaWithValueCache) {
  Arguments a = MlaBaseline();
  a.v_cache = Baseline().v_cache;
  a.v_cache.extent[2] = 1;
  ExpectRejected(a, Status::kErrorInvalidArgument, {"v_cache", "absent", "kMla"});
}

TEST_F(Validate, MlaHkNot1) {
  Arguments a = MlaBaseline();
  a.k_rope.extent[1] = kHk;
  ExpectRejected(a, Status::kErrorShapeMismatch, {"k_rope.extent[1]", "Hk", "must be 1", "kMla"});
}

// ======================================================= page table

TEST_F(Validate, PageTableMissingKvIndptr) {
  Arguments a = PageTableBaseline();
  a.cache_index.kv_indptr = TensorView{};
  ExpectRejected(a, Status::kErrorInvalidRank,
                 {"cache_index.kv_indptr", "must have rank 1", "got 0"});
}

TEST_F(Validate, PageTableMissingBatchIndices) {
  Arguments a = PageTableBaseline();
  a.cache_index.batch_indices = TensorView{};
  ExpectRejected(a, Status::kErrorInvalidRank,
                 {"cache_index.batch_indices", "must have rank 1", "got 0"});
}

TEST_F(Validate, KvIndptrEmpty) {
  Arguments a = PageTableBaseline();
  a.cache_index.kv_indptr.extent[0] = 0;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"cache_index.kv_indptr.extent[0]", "batch + 1", "got 0"});
}

TEST_F(Validate, PageTableBatchIndicesNnzMismatch) {
  Arguments a = PageTableBaseline();
  a.cache_index.batch_indices.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"cache_index.batch_indices.extent[0]", "must equal nnz (3)"});
}

TEST_F(Validate, PageTableKvPositionsNnzMismatch) {
  Arguments a = PageTableBaseline();
  a.cache_index.kv_positions.extent[0] = kNnz - 1;
  ExpectRejected(a, Status::kErrorShapeMismatch,
                 {"cache_index.kv_positions.extent[0]", "must equal nnz (3)"});
}

TEST_F(Validate, PageTableFormWithOnlySlotMapping) {
  // Switching the form without giving the page-table arrays.
  Arguments a = Baseline();
  a.cache_index.form = Addressing::kPageTable;
  ExpectRejected(a, Status::kErrorInvalidRank,
                 {"cache_index.kv_indices", "must have rank 1", "got 0"});
}

}  // namespace
}  // namespace validation
}  // namespace ropekv_test
