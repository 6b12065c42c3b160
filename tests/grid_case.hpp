// The grid suite's internals that more than one of its files needs: the case spec
// (made by grid_spec.cpp), the case data and its Builder (grid_case_views.cpp and
// grid_case_values.cpp); grid_suite.cpp runs the cases.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "oracle.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv_test {

namespace orc = ropekv_oracle;
using ropekv::Addressing;
using ropekv::Arguments;
using ropekv::AttentionKind;
using ropekv::DType;
using ropekv::RopeStyle;
using ropekv::Scale;
using ropekv::TensorView;

constexpr int kNumCases = 540;

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

Spec make_spec(int index);

// The output formats, in the order of the tallies' slots (format_slot in grid_suite.cpp).
const DType kSlotDtypes[6] = {DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E4M3FNUZ,
                              DType::kBFloat16,     DType::kFloat16,    DType::kFloat32};

// ------------------------------------------------------------------ case data
enum class Role { kInput, kOutput, kCounter };

struct HostBuffer {
  std::string name;
  Role role = Role::kInput;
  std::size_t bytes = 0;
  std::shared_ptr<unsigned char> data;  // 256-byte aligned, like device allocations
  unsigned char* ptr() const { return data.get(); }
};

std::shared_ptr<unsigned char> aligned_bytes(std::size_t n);

struct CaseData {
  std::vector<HostBuffer> buffers;
  Arguments args;  // points into `buffers`
  std::int64_t expected_bad = 0;
  unsigned long long counter_init = 0;
  int counter_buffer = -1;
  std::string layout_errors;  // layout helpers that disagree with the layouts' definitions
  std::int64_t nonzero_inputs = 0;
  std::int64_t scale_probes = 0;  // see Builder::scale_probes
};

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
  void scale_probes();
  std::uint32_t value_code(int which);  // which: 0 q, 1 k, 2 v
  std::uint32_t special_code();

  const Spec& s_;
  CaseData& d_;
  Rng r_;
  std::int64_t num_pages_ = 1;
  std::int64_t max_pos_ = 1;  // the cos/sin table's height, set by build_indices
};

CaseData build_case(const Spec& s);

}  // namespace ropekv_test
