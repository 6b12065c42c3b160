// The host test binary's check of ROPEKV_HOST_ISA (tests/CMakeLists.txt
// registers tests again with avx2 and baseline). isa.cpp never raises the
// variant above what the CPU supports and ignores values it does not know, so
// a registration named for a variant could silently run another one. Here
// every test skips, visibly, when the requested variant is not on this CPU or
// build, and fails for a value isa.cpp does not know.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "host/rows.hpp"  // ROPEKV_HOST_MULTI_ISA

namespace {

// Whether the CPU runs the x86-64-v3 (AVX2 + FMA) variant.
bool cpu_has_avx2_variant() {
#if ROPEKV_HOST_MULTI_ISA
  __builtin_cpu_init();
  return __builtin_cpu_supports("x86-64-v3");
#else
  return false;  // one variant only: the baseline
#endif
}

// Runs at each test's start, inside the test: a skip or failure raised here
// is that test's, and its body does not run.
class HostIsaCheck : public ::testing::EmptyTestEventListener {
 public:
  void OnTestProgramStart(const ::testing::UnitTest&) override {
    if (env_ != nullptr && (want_ == "baseline" || (want_ == "avx2" && cpu_has_avx2_variant())))
      std::printf("[ host ISA ] ROPEKV_HOST_ISA=%s: that variant runs\n", env_);
  }
  void OnTestStart(const ::testing::TestInfo&) override { check(); }

 private:
  void check() const {
    if (env_ == nullptr || want_ == "baseline") return;
    if (want_ == "avx2") {
      if (!cpu_has_avx2_variant())
        GTEST_SKIP() << "ROPEKV_HOST_ISA=avx2: no x86-64-v3 variant on this CPU or build";
      return;
    }
    GTEST_FAIL() << "ROPEKV_HOST_ISA=" << want_
                 << " is not a variant (avx2 or baseline): isa.cpp would ignore it";
  }
  const char* env_ = std::getenv("ROPEKV_HOST_ISA");
  std::string want_ = env_ != nullptr ? env_ : "";
};

// Appended after gtest's printer: its "[ RUN ]" line comes first.
[[maybe_unused]] const bool kHostIsaCheckAdded = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new HostIsaCheck);
  return true;
}();

}  // namespace
