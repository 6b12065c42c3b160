// The host test binary's check of ROPEKV_HOST_ISA (tests/CMakeLists.txt
// registers tests again with avx2 and baseline). isa.cpp never raises the
// variant above what the CPU supports and ignores values it does not know, so
// a registration named for a variant could silently run another one. Here
// every test skips, visibly, when the variant that runs is not the one
// requested (the CPU or build lacks it), and fails for a value isa.cpp does
// not know.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "host/isa.hpp"

namespace {

// Runs at each test's start, inside the test: a skip or failure raised here
// is that test's, and its body does not run.
class HostIsaCheck : public ::testing::EmptyTestEventListener {
 public:
  void OnTestProgramStart(const ::testing::UnitTest&) override {
    if (env_ != nullptr && want_ == runs())
      std::printf("[ host ISA ] ROPEKV_HOST_ISA=%s: that variant runs\n", env_);
  }
  void OnTestStart(const ::testing::TestInfo&) override { check(); }

 private:
  static std::string runs() { return ropekv::detail::host::selected_isa().name; }
  void check() const {
    if (env_ == nullptr) return;
    if (want_ != "avx2" && want_ != "baseline")
      GTEST_FAIL() << "ROPEKV_HOST_ISA=" << want_
                   << " is not a variant (avx2 or baseline): isa.cpp would ignore it";
    if (want_ != runs())
      GTEST_SKIP() << "ROPEKV_HOST_ISA=" << want_ << ": this CPU or build runs the " << runs()
                   << " variant";
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
