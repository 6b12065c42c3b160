// Validation: every host-side rule of the contract (docs/CONTRACT.md), and a
// prepared call's re-check of a step. Lowering (lower.hpp) runs these first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "detail/params.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv {
namespace detail {

// Every rule, in a fixed order; the Result of the first that fails names the
// argument and the rule.
Result validate_arguments(const Arguments& args) noexcept;
// The rules a prepared call's step re-checks besides the data's (step_plan.cpp):
// the sizes a step may change (the token count, the page-table lengths) and
// the scales; true where they hold.
bool step_rules_hold(const Arguments& args) noexcept;

// Any of the non-rotary views present: N is given (possibly 0).
inline bool has_nope(const Arguments& a) noexcept {
  return a.q_nope.present() || a.k_nope.present() || a.q_nope_out.present() ||
         a.k_cache_nope.present();
}

// Step (ropekv.hpp) as pointer-sized words: word w < kNumViews is view w's
// data or scalar pointer (kViews' order, asserted in step_plan.cpp), then the
// sizes, then the stream (kStepStreamWord).
constexpr std::size_t kStepStreamWord = offsetof(Step, stream) / sizeof(void*);
inline std::uintptr_t step_word(const Step& s, std::size_t w) noexcept {
  std::uintptr_t v;
  std::memcpy(&v, reinterpret_cast<const char*>(&s) + w * sizeof(void*), sizeof v);
  return v;
}
inline void set_step_word(Step* s, std::size_t w, std::uintptr_t v) noexcept {
  std::memcpy(reinterpret_cast<char*>(s) + w * sizeof(void*), &v, sizeof v);
}

// A prepared call's plan (PreparedCall): what a step's re-check needs of the
// shape of arguments validation accepted (the arguments themselves are
// last_step's, below).
struct StepPlan {
  // The query outputs do not overlap themselves for token counts up to this.
  std::int64_t self_checked_tokens = 0;
  // Per view of the overlap rule (argument_table.hpp, kOverlapOrder): element
  // size (a power of two: the dtype table's), a rank-1 view whose stride is not 1 (contiguous only
  // for <= 1 element), every extent but the first > 0, and 1 + sum over dims k >= 1 of (extent - 1)
  // * stride, and whether that fits in int64 (it may not for a view prepared with no elements,
  // whose span was not checked).
  // Also the span's byte length at the prepared extent 0 (-1: none), which a
  // step with that extent keeps (only data and extent 0 may move).
  struct View {
    std::int64_t es = 0, rest_elems = 1;
    std::int64_t prepared_n = 0, prepared_bytes = -1;
    bool strided_vector = false, others_nonzero = false, rest_fits = true;
  };
  View view[21];
  // The views present (rank > 0; a step keeps every rank), ascending.
  std::uint8_t present[21] = {};
  std::uint8_t num_present = 0;
  // The overlap rule's pairs among them: (output, later view), in the
  // rule's order.
  std::uint8_t pair[120][2] = {};
  std::uint8_t num_pairs = 0;
  // The views' groups: those whose spans met in the prepared arguments,
  // directly or through others, share one. A step checks the groups' union
  // spans against each other (the pairs of groups, one holding an output),
  // then the pairs within a group: `interleaved` and `inner`.
  std::uint8_t group[21] = {};
  std::uint8_t num_groups = 0;
  std::uint8_t group_pair[210][2] = {};
  std::uint16_t num_group_pairs = 0;
  std::uint8_t inner[120][2] = {};
  std::uint8_t num_inner = 0;
  // The pairs within a group whose spans met in the prepared arguments
  // (interleaved rows, which the rule proved disjoint), while there is room
  // (the rest are `inner`): a step with the same distance between their data
  // and the same extents keeps that verdict (the proof is
  // translation-invariant).
  struct Interleaved {
    std::uint8_t i = 0, j = 0;
    std::uintptr_t distance = 0;    // data of j minus data of i, modulo 2^64
    std::int64_t n_i = 0, n_j = 0;  // extent 0 of each
  };
  Interleaved interleaved[8];
  std::uint8_t num_interleaved = 0;
  // A step's launch parameters (lower_step writes the step fields in place),
  // and the backend's decision for them.
  LaunchParams lowered;
  LaunchState launch_state;
  // The prepared arguments with the last step's fields (ropekv::Step):
  // `moved`, the fields `lowered` holds. last_step takes them at each step
  // that changes a size; after moving steps (below) its pointers and stream
  // are behind `moved` (read only where a step's fields are written over
  // them, or for its shapes and sizes) and `last_step_current` is false.
  Arguments last_step;
  Step moved;
  bool last_step_current = true;
  // A moving step: one whose sizes (nnz, the page table's lengths) are
  // moved's, so that only pointers and the stream change. While
  // `moving_valid` (made from last_step, its sizes moved's): per present
  // view, in present order, its span's byte length (0: empty), the view and
  // its Step word; which interleaved pairs have their planned extents (bit
  // k: interleaved[k]). While `copies_valid`, for sizes zero as
  // `copies_zeros` says (bit per size: which words they are depends on
  // nothing else): the words of `lowered` that lower_data copies Step words
  // into (lowered's word, Step's word), so that the step's lowering is
  // those copies.
  struct MovingView {
    std::int64_t bytes = 0;
    std::uint8_t view = 0, word = 0, align_mask = 0;
  };
  MovingView moving[21];
  std::uint8_t interleaved_sized = 0;
  std::uint8_t num_copies = 0;
  std::uint8_t copies[32][2] = {};
  std::uint8_t copies_zeros = 0;
  bool moving_valid = false, copies_valid = false;
};
// The shape part of `plan` for `validated` (arguments validation accepted):
// the views' constants, the pairs (lower.hpp fills the rest).
void plan_shape(StepPlan* plan, const Arguments& validated) noexcept;
// A step given as whole arguments: true, with *step their step fields,
// when `args` differs from plan.last_step only in what a step may change
// (views' data, extent 0 of the per-token views and of the page table's
// arrays, device scale and counter pointers, the stream), each view's
// extent 0 the size the step gives it. False: validate_arguments() decides.
bool step_of_prepared(const StepPlan& plan, const Arguments& args, Step* step) noexcept;
// Step (ropekv.hpp) and Arguments: step's fields written into *a (each
// view's data, extent 0 of each present view whose dim 0 a step may change,
// the scalars' pointers, the stream), and a's step fields (ropekv::step_of).
void apply_step(const Step& step, Arguments* a) noexcept;
Step step_of_arguments(const Arguments& a) noexcept;
// For args that differ from plan.last_step at most in what apply_step
// writes, with the same scalars set (null or not): every rule the step's
// fields enter holds.
bool recheck_step(const StepPlan& plan, const Arguments& args) noexcept;
// A moving step's part of the plan (StepPlan::moving, interleaved_sized)
// from plan.last_step's shapes and sizes; false where a present view's span
// does not fit (never for arguments a step re-check accepted).
bool plan_moving(StepPlan* plan) noexcept;
// recheck_step for a moving step (its sizes plan.moved's, the same scalars
// set), from the step's words and plan.moving (moving_valid).
bool moving_step_holds(const StepPlan& plan, const Step& step) noexcept;

}  // namespace detail
}  // namespace ropekv
