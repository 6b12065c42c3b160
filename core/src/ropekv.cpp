// Public entry points: names, validate(), run() and PreparedCall. Views and
// layout helpers are in layouts.cpp, backend selection in backends/.
#include "ropekv/ropekv.hpp"

#include "backends/backend.hpp"
#include "detail/lower.hpp"

namespace ropekv {

namespace {
// The table is in enum order (dtype_info indexes it by value).
constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < kNumDTypes; ++i)
    if (static_cast<std::size_t>(kDTypes[i].dtype) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kDTypes: one row per DType, in enum order");
}  // namespace

const char* to_string(Status status) noexcept {
  switch (status) {
    case Status::kSuccess: return "success";
    case Status::kErrorNullPointer: return "null pointer";
    case Status::kErrorUnsupportedDType: return "unsupported dtype";
    case Status::kErrorInvalidRank: return "invalid rank";
    case Status::kErrorShapeMismatch: return "shape mismatch";
    case Status::kErrorInvalidRotaryDim: return "invalid rotary dim";
    case Status::kErrorCosSinMismatch: return "cos/sin table mismatch";
    case Status::kErrorNonContiguous: return "non-contiguous last dim";
    case Status::kErrorInvalidStride: return "invalid stride";
    case Status::kErrorMisaligned: return "misaligned operand";
    case Status::kErrorInvalidPageSize: return "invalid page size";
    case Status::kErrorInvalidScale: return "invalid scale";
    case Status::kErrorOverlap: return "overlapping views";
    case Status::kErrorInvalidArgument: return "invalid argument";
    case Status::kErrorBackendNotCompiled: return "backend not compiled";
    case Status::kErrorNoDevice: return "no device";
    case Status::kErrorLaunchFailed: return "launch failed";
  }
  return "unknown status";
}

Result validate(const Arguments& args, Backend backend) noexcept {
  const detail::BackendOps* ops = nullptr;
  Result r = detail::select_backend(backend, &ops);
  if (!r.ok()) return r;
  return detail::validate_arguments(args);
}

Result run(const Arguments& args, Backend backend) noexcept {
  const detail::BackendOps* ops = nullptr;
  Result r = detail::select_backend(backend, &ops);
  if (!r.ok()) return r;
  detail::LaunchParams p;
  r = detail::lower(args, &p);
  if (!r.ok()) return r;
  return detail::launch_on(*ops, p);
}

PreparedCall::~PreparedCall() { detail::delete_step_plan(plan_); }
PreparedCall::PreparedCall(PreparedCall&& other) noexcept
    : plan_(other.plan_), backend_(other.backend_), last_step_(other.last_step_) {
  other.plan_ = nullptr;
}
PreparedCall& PreparedCall::operator=(PreparedCall&& other) noexcept {
  if (this != &other) {
    detail::delete_step_plan(plan_);
    plan_ = other.plan_;
    backend_ = other.backend_;
    last_step_ = other.last_step_;
    other.plan_ = nullptr;
  }
  return *this;
}

// Keeps validated arguments as the prepared call: the plan is rebuilt in
// place, allocated only the first time.
Result PreparedCall::keep(const Arguments& validated) noexcept {
  if (plan_ == nullptr) plan_ = detail::new_step_plan();
  if (plan_ == nullptr)
    return detail::make_result(Status::kErrorLaunchFailed, "PreparedCall: out of memory");
  detail::fill_step_plan(plan_, validated);
  return Result{};
}

Result PreparedCall::prepare(const Arguments& args) noexcept {
  const Result r = validate(args, backend_);
  return r.ok() ? keep(args) : r;
}

Result PreparedCall::run(const Arguments& args) noexcept {
  last_step_ = false;
  if (plan_ != nullptr) {
    // The backend resolves as it did at prepare() (a process's devices are fixed).
    const detail::BackendOps* ops = nullptr;
    if (detail::lower_step(*plan_, args) && detail::select_backend(backend_, &ops).ok()) {
      last_step_ = true;
      return detail::launch_on(*ops, plan_->lowered, &plan_->launch_state);
    }
  }
  // Another shape, or a step that breaks a rule: every rule, and its message.
  const Result r = ropekv::run(args, backend_);
  if (r.ok()) (void)keep(args);  // out of memory: stays unprepared, r stands
  return r;
}

Result PreparedCall::run(const Step& step) noexcept {
  last_step_ = false;
  if (plan_ == nullptr)
    return detail::make_result(Status::kErrorInvalidArgument,
                               "PreparedCall::run(step): nothing prepared (prepare(args) or "
                               "run(args) first)");
  const detail::BackendOps* ops = nullptr;
  if (detail::lower_step(*plan_, step) && detail::select_backend(backend_, &ops).ok()) {
    last_step_ = true;
    return detail::launch_on(*ops, plan_->lowered, &plan_->launch_state);
  }
  // A step that breaks a rule: every rule on the arguments it makes.
  Arguments args = plan_->last_step;
  detail::apply_step(step, &args);
  const Result r = ropekv::run(args, backend_);
  if (r.ok()) (void)keep(args);
  return r;
}

Step step_of(const Arguments& args) noexcept { return detail::step_of_arguments(args); }

}  // namespace ropekv
