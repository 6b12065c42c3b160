// The randomized grid suite (see grid_suite.hpp): one case run and checked, the tallies
// and their summary, the registration and GridCase.Run, GridSummary.AllCases. Cases are
// made by grid_spec.cpp, grid_case_views.cpp and grid_case_values.cpp (grid_case.hpp).
//
// Each case is generated from its own seed (std::mt19937_64), so a case is
// replayed by its name alone: --gtest_filter='*GridCase.Run/c0123_*'. A case
// builds every buffer in host memory first (the "mirror"): inputs, index
// arrays and device scales with their data, outputs and caches filled with
// guard bytes, every buffer with margins around its views. The mirror is
// uploaded to the backend's memory, run there, downloaded and checked.
#include "grid_suite.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "argument_views.hpp"
#include "grid_case.hpp"
#include "oracle.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv_test {
namespace {

// The largest fraction of FP8/bf16/fp16 elements allowed to differ from the
// oracle's nearest code (see GridSummary.AllCases for the justification).
constexpr double kMaxNonIdenticalFraction = 0.001;

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

struct FormatTally {
  std::uint64_t elements = 0, identical = 0, beyond_one_step = 0;
  std::int64_t max_steps = 0;
};

struct Tallies {
  FormatTally formats[6];
  std::map<std::string, std::set<int>> cases_run;  // backend name -> case indices
  std::uint64_t bytes_compared = 0;                // device vs host
  std::uint64_t exact_elements = 0;                // checked against the float32 formula
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
  const std::uint64_t key = (n * 1000003ull + t.bytes_compared) * 1000003ull + t.exact_elements;
  if (key == t.printed_at) return;
  t.printed_at = key;
  if (t.exact_elements != 0)
    std::printf(
        "[ grid ] %llu named output elements (every backend run) checked: each the code of the "
        "contract's float32 formula, bit for bit\n",
        static_cast<unsigned long long>(t.exact_elements));
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

  auto code_of = [&](const orc::ExpectedElement& e) {
    const int bits = orc::bits_of(e.dtype);
    const auto loc = locate(d, e.address, std::size_t(bits / 8));
    return orc::load_code(got[std::size_t(loc.first)].data() + loc.second, bits);
  };
  // ---- every named element against the contract's float32 formula, bit for bit: the
  // contract fixes each float32 operation (fmaf RoPE, IEEE scale step), so every backend
  // must write exactly this code. The oracle's own two definitions must agree too.
  for (const orc::ExpectedElement& e : ref.elements) {
    const std::uint32_t code = code_of(e);
    if (!e.allows(e.exact))
      fail.add("oracle: float32 formula's code outside the oracle's double-precision bound",
               e.describe());
    if (code != e.exact) {
      char b[64];
      std::snprintf(b, sizeof(b), "; backend wrote 0x%x", code);
      fail.add("elements not bit-identical to the contract's float32 formula", e.describe() + b);
    }
  }
  tallies().exact_elements += ref.elements.size();

  if (mem.backend == ropekv::Backend::kHost) {
    // ---- every named element against the oracle's double value and error bound
    Tallies& t = tallies();
    for (const orc::ExpectedElement& e : ref.elements) {
      const std::uint32_t code = code_of(e);
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
    EXPECT_GT(ropekv_test::tallies().exact_elements, 0u);
    EXPECT_LE(frac, ropekv_test::kMaxNonIdenticalFraction) << line;
  }
  ropekv_test::print_summary();
}
