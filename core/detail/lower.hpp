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

// A step: nothing for the arguments plan.lowered holds (plan.last_step),
// else validate_step(plan, args), then plan.lowered's step fields from
// args; false: lower() decides.
bool lower_step(StepPlan& plan, const Arguments& args) noexcept;
// The same for plan.last_step with step's fields (apply_step), written into
// plan.last_step when the re-check passes; false (plan unchanged but for
// extent 0 of views the call does not use): lower() decides.
bool lower_step(StepPlan& plan, const Step& step) noexcept;

}  // namespace detail
}  // namespace ropekv
