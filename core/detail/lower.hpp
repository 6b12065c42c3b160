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

// validate_step(plan, args), then the lowering; false: lower() decides.
bool lower_step(const StepPlan& plan, const Arguments& args, LaunchParams* out) noexcept;

}  // namespace detail
}  // namespace ropekv
