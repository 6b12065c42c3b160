// Validation and lowering: Arguments -> LaunchParams. Runs every host-side
// rule of the contract (README.md); on failure `out` is untouched and
// the Result names the argument and the rule.
#pragma once

#include "detail/params.hpp"
#include "detail/result.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv {
namespace detail {

Result lower(const Arguments& args, LaunchParams* out) noexcept;

// A prepared call's plan (PreparedCall): arguments lower() accepted, and
// what a step's re-check needs of their shape.
struct StepPlan {
  Arguments prepared;
  // The query outputs do not overlap themselves for token counts up to this.
  std::int64_t self_checked_tokens = 0;
  // Per view of the overlap rule (validate.cpp, OverlapViews): element size,
  // a rank-1 view whose stride is not 1 (contiguous only for <= 1 element),
  // every extent but the first > 0, and 1 + sum over dims k >= 1 of
  // (extent - 1) * stride.
  struct View {
    std::int64_t es = 0, rest_elems = 1;
    bool strided_vector = false, others_nonzero = false;
  };
  View view[21];
};
// Null when out of memory.
StepPlan* new_step_plan() noexcept;
void delete_step_plan(StepPlan* plan) noexcept;
// Makes `plan` the plan of `validated` (arguments lower() accepted).
void fill_step_plan(StepPlan* plan, const Arguments& validated) noexcept;
// A step: true when `args` differs from plan.prepared only in the fields a
// step may change (views' data, extent 0 of the per-token views and of the
// page table's arrays, device scale and counter pointers, the stream) and
// passes every rule those fields enter; *out is then lower(args)'s. False:
// lower() decides, and names the rule.
bool lower_step(const StepPlan& plan, const Arguments& args, LaunchParams* out) noexcept;

}  // namespace detail
}  // namespace ropekv
