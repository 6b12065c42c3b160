// Lowering: Arguments -> LaunchParams, after validation (validate.hpp). On
// failure `out` is untouched and the Result names the argument and the rule.
#pragma once

#include "detail/params.hpp"
#include "detail/result.hpp"
#include "detail/validate.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv {
namespace detail {

// validate_arguments(args), then the lowering.
Result lower(const Arguments& args, LaunchParams* out) noexcept;

// A prepared call's plan: new (null when out of memory), made the plan of
// `validated` (arguments validation accepted: plan.lowered is their
// lowering, plan.launch_state cleared), deleted.
StepPlan* new_step_plan() noexcept;
void fill_step_plan(StepPlan* plan, const Arguments& validated) noexcept;
void delete_step_plan(StepPlan* plan) noexcept;

// A step given as its fields: nothing where they are those plan.lowered
// holds (plan.moved); a moving step (the sizes of the last) re-checked from
// its pointers and lowered by copying them; another written into
// plan.last_step, re-checked and lowered there. False (the plan unchanged
// but for extent 0 of views the call does not use): lower() decides.
bool lower_step(StepPlan& plan, const Step& step) noexcept;
// The same for whole arguments: their step fields (step_of_prepared), or
// false where they differ from the prepared arguments otherwise.
bool lower_step(StepPlan& plan, const Arguments& args) noexcept;

}  // namespace detail
}  // namespace ropekv
