// The validator (validate.cpp): its phases, and a prepared call's step check
// that reuses some of them (step_plan.cpp). Internal to those two files.
#pragma once

#include <cstdint>

#include "detail/argument_table.hpp"
#include "detail/validate.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv {
namespace detail {

// One call's arguments against the rules: every rule (run, validate.cpp), or
// a step's re-check (run_step, step_plan.cpp).
class Validator {
 public:
  explicit Validator(const Arguments& a) : a_(a), on_(a) {}

  // Every rule.
  Result run() const;
  // A prepared call's step: the rules that the fields a step may change enter.
  bool run_step(const StepPlan& plan) const;

 private:
  // The rule phases, in the order run() applies them. kStep: only the rules
  // on sizes a step may change (the token count, the page-table lengths).
  Result check_enums() const;
  Result check_views() const;
  Result check_dtypes() const;
  Result check_sizes(const std::int64_t* size) const;
  template <bool kStep>
  Result check_extents() const;
  Result check_scales() const;
  Result check_overlaps() const;

  const TensorView& view(ViewId id) const { return view_in(a_, kViews[id]); }

  const Arguments& a_;
  const Active on_;
};

// The step's extent rules: defined in validate.cpp, instantiated there for
// run_step (step_plan.cpp).
extern template Result Validator::check_extents<true>() const;

}  // namespace detail
}  // namespace ropekv
