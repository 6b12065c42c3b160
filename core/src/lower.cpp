// Lowering: Arguments -> LaunchParams, for arguments validation accepted.
#include "detail/lower.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#include "detail/argument_table.hpp"

namespace ropekv {
namespace detail {

namespace {

bool is_fp8(DType d) { return dtype_info(d).quantized; }

// A validated view holds an element (numel() > 0: its extents, none
// negative, all above 0), without numel()'s overflow-checked product.
bool has_elements(const TensorView& v) {
  if (v.rank <= 0) return false;
  for (int k = 0; k < v.rank; ++k)
    if (v.extent[k] <= 0) return false;
  return true;
}

// The launch parameters of arguments every rule accepted, in two parts,
// each assigning its fields in place (no clear of the 656-byte struct: a
// prepared step lowers on every call). lower_shape: the fields a step keeps;
// lower_data: those a step may change (data pointers, the token count, the
// page-table lengths, device scale and counter pointers, the stream).
static_assert(sizeof(void*) != 8 || sizeof(LaunchParams) == 656,
              "LaunchParams changed: assign the new field in lower_shape or lower_data");
void lower_shape(const Arguments& a, LaunchParams& p) {
  const std::int64_t page_size = a.k_cache_rope.extent[1];
  p.num_q_heads = a.q_rope.extent[1];
  p.num_kv_heads = a.k_rope.extent[1];
  p.rotary_dim = a.q_rope.extent[2];
  p.nope_dim = has_nope(a) ? a.q_nope.extent[2] : 0;
  p.v_dim = a.kind == AttentionKind::kMla ? 0 : a.v.extent[2];
  p.max_pos = a.cos_sin_cache.extent[0];
  p.page_size = page_size;
  p.page_shift = -1;
  if ((page_size & (page_size - 1)) == 0) {
    p.page_shift = 0;
    while ((std::int64_t(1) << p.page_shift) < page_size) ++p.page_shift;
  }
  p.num_pages = a.k_cache_rope.extent[0];
  p.kind = a.kind;
  p.style = a.rope_style;
  auto element = [](DType d) { return ElementType{d, std::int64_t(size_of(d))}; };
  p.in = element(a.q_rope.dtype);
  p.q_out = element(a.q_rope_out.dtype);
  p.cache = element(a.k_cache_rope.dtype);
  p.cos = element(a.cos_sin_cache.dtype);
  p.cos_row_stride = a.cos_sin_cache.stride[0];
  p.addressing = a.cache_index.form;
  p.checked = a.checked.enabled;
  p.pdl = a.programmatic_dependent_launch;
  p.early_indices = a.programmatic_dependent_launch && a.indices_ready_before_previous_kernel;
}

void lower_data(const Arguments& a, LaunchParams& p) {
  const CacheIndex& ci = a.cache_index;
  p.nnz = a.q_rope.extent[0];
  auto head = [](const TensorView& v) {
    HeadTensor h;
    if (has_elements(v)) {
      h.data = static_cast<char*>(v.data);
      h.token_stride = v.stride[0];
      h.head_stride = v.stride[1];
    }
    return h;
  };
  auto cache = [](const TensorView& v) {
    CacheTensor c;
    if (has_elements(v)) {
      c.data = static_cast<char*>(v.data);
      for (int k = 0; k < 3; ++k) c.stride[k] = v.stride[k];
    }
    return c;
  };
  p.q_rope = head(a.q_rope);
  p.q_nope = head(a.q_nope);
  p.k_rope = head(a.k_rope);
  p.k_nope = head(a.k_nope);
  p.v = head(a.v);
  p.q_rope_out = head(a.q_rope_out);
  p.q_nope_out = head(a.q_nope_out);
  p.k_cache_rope = cache(a.k_cache_rope);
  p.k_cache_nope = cache(a.k_cache_nope);
  p.v_cache = cache(a.v_cache);
  p.cos_sin = static_cast<const char*>(a.cos_sin_cache.data);
  auto index = [](const TensorView& v) { return IndexArray{v.data, v.dtype == DType::kInt64}; };
  p.positions = index(a.positions);
  const bool slots = ci.form == Addressing::kSlotMapping;
  p.slot_mapping = slots ? index(ci.slot_mapping) : IndexArray{};
  p.kv_indices = slots ? IndexArray{} : index(ci.kv_indices);
  p.kv_indptr = slots ? IndexArray{} : index(ci.kv_indptr);
  p.batch_indices = slots ? IndexArray{} : index(ci.batch_indices);
  p.kv_positions = slots ? IndexArray{} : index(ci.kv_positions);
  p.batch_size = slots ? 0 : ci.kv_indptr.extent[0] - 1;
  p.num_kv_indices = slots ? 0 : ci.kv_indices.extent[0];
  // A scale is read only where it applies: an FP8 output of a present tensor
  // (otherwise the defaults: 1, not read, dividing).
  auto scale = [](const Scale& sc, bool applies) {
    return applies ? ScaleParam{sc.value, sc.device, sc.convention} : ScaleParam{};
  };
  const bool cache_fp8 = is_fp8(a.k_cache_rope.dtype);
  p.q_scale = scale(a.q_scale, is_fp8(a.q_rope_out.dtype));
  p.k_scale = scale(a.k_scale, cache_fp8);
  p.v_scale = scale(a.v_scale, cache_fp8 && a.kind != AttentionKind::kMla);
  p.skipped_tokens = a.checked.skipped_tokens;
  p.stream = a.stream;
}

}  // namespace

Result lower(const Arguments& args, LaunchParams* out) noexcept {
  Result r = validate_arguments(args);
  if (r.ok()) {
    lower_shape(args, *out);
    lower_data(args, *out);
  }
  return r;
}

StepPlan* new_step_plan() noexcept { return new (std::nothrow) StepPlan; }
void delete_step_plan(StepPlan* plan) noexcept { delete plan; }

void fill_step_plan(StepPlan* plan, const Arguments& validated) noexcept {
  plan_shape(plan, validated);
  lower_shape(validated, plan->lowered);
  lower_data(validated, plan->lowered);
  plan->launch_state.valid = false;
  std::memcpy(&plan->last_step, &validated, sizeof validated);  // padding too: compared as bytes
  plan->moved = step_of_arguments(validated);
  plan->last_step_current = true;
  plan->moving_valid = false;
  plan->copies_valid = false;
}

namespace {

constexpr std::size_t kLaunchWords = sizeof(LaunchParams) / sizeof(void*);
// Word o of launch parameters, as plan_copies finds them and the moving step
// writes them.
std::uintptr_t launch_word(const LaunchParams& p, std::size_t o) noexcept {
  std::uintptr_t v;
  std::memcpy(&v, reinterpret_cast<const char*>(&p) + o * sizeof v, sizeof v);
  return v;
}
void set_launch_word(LaunchParams* p, std::size_t o, std::uintptr_t v) noexcept {
  std::memcpy(reinterpret_cast<char*>(p) + o * sizeof v, &v, sizeof v);
}

// The words of plan.lowered that lower_data copies Step words into, for
// last_step's sizes (StepPlan::copies): found by lowering last_step with
// every Step pointer and the stream set to marks, twice with different
// marks (a word that holds the same word's mark both times is its copy), so
// that lower_data stays the one definition of the lowering.
static_assert(sizeof(LaunchParams) % sizeof(void*) == 0 &&
                  alignof(LaunchParams) >= alignof(void*) && kLaunchWords <= 256,
              "StepPlan::copies names lowered's words in a byte");
bool plan_copies(StepPlan& plan) {
  constexpr std::uintptr_t kTag[2] = {0x5eed, 0x7ab1};
  const auto mark = [&](int round, std::size_t word) {
    return kTag[round] << 44 | std::uintptr_t(word + 1) << 8;
  };
  std::uintptr_t got[2][kLaunchWords];
  Arguments probe = plan.last_step;
  for (int round = 0; round < 2; ++round) {
    Step marks = plan.moved;
    for (std::size_t w = 0; w <= kStepStreamWord; ++w)
      if (w < kNumViews || w == kStepStreamWord) {
        set_step_word(&marks, w, mark(round, w));
      }
    apply_step(marks, &probe);
    LaunchParams lowered = plan.lowered;
    lower_data(probe, lowered);
    for (std::size_t o = 0; o < kLaunchWords; ++o) got[round][o] = launch_word(lowered, o);
  }
  plan.num_copies = 0;
  for (std::size_t o = 0; o < kLaunchWords; ++o) {
    if (got[0][o] >> 44 != kTag[0]) continue;
    const std::size_t w = std::size_t((got[0][o] >> 8) & 0xfff) - 1;  // the mark it holds
    if (w > kStepStreamWord || got[0][o] != mark(0, w) || got[1][o] != mark(1, w)) continue;
    if (plan.num_copies == sizeof(plan.copies) / sizeof(plan.copies[0])) return false;
    plan.copies[plan.num_copies][0] = std::uint8_t(o);
    plan.copies[plan.num_copies][1] = std::uint8_t(w);
    ++plan.num_copies;
  }
  return true;
}

// Which of a step's sizes are 0: the copies depend on nothing else (a view
// with an extent 0 has no data in the launch parameters).
std::uint8_t zero_sizes(const Step& s) {
  return std::uint8_t((s.nnz == 0) | (s.num_kv_indices == 0) << 1 | (s.kv_indptr_size == 0) << 2);
}

// A moving step (StepPlan::moving): true when it passed and was lowered.
// The plan's part for the sizes is made at the first moving step after
// they change; the copies where another size becomes or stops being 0.
bool moving_step(StepPlan& plan, const Step& step) {
  if (!plan.moving_valid) {
    if (!plan_moving(&plan)) return false;
    plan.moving_valid = true;
  }
  const std::uint8_t zeros = zero_sizes(step);
  if (!plan.copies_valid || plan.copies_zeros != zeros) {
    plan.copies_valid = plan_copies(plan);
    plan.copies_zeros = zeros;
    if (!plan.copies_valid) return false;
  }
  if (!moving_step_holds(plan, step)) return false;
  for (std::size_t k = 0; k < plan.num_copies; ++k)
    set_launch_word(&plan.lowered, plan.copies[k][0], step_word(step, plan.copies[k][1]));
  plan.moved = step;
  plan.last_step_current = false;
  return true;
}

}  // namespace

static_assert(std::is_trivially_copyable<Arguments>::value, "lower_step compares Arguments' bytes");
bool lower_step(StepPlan& plan, const Arguments& args) noexcept {
  // The arguments lowered holds again (an engine's buffers that stay put).
  if (plan.last_step_current && std::memcmp(&plan.last_step, &args, sizeof args) == 0) return true;
  Step step;
  return step_of_prepared(plan, args, &step) && lower_step(plan, step);
}

static_assert(std::is_trivially_copyable<Step>::value, "lower_step compares Step's bytes");
bool lower_step(StepPlan& plan, const Step& step) noexcept {
  const Step& last = plan.moved;
  if (std::memcmp(&last, &step, sizeof step) == 0) return true;  // lowered holds it
  // A step keeps which scales are device pointers and whether the counter is set.
  const auto set = [](const Step& s) {
    return (s.q_scale != nullptr) | (s.k_scale != nullptr) << 1 | (s.v_scale != nullptr) << 2 |
           (s.skipped_tokens != nullptr) << 3;
  };
  if (set(last) != set(step)) return false;
  if (step.nnz == last.nnz && step.num_kv_indices == last.num_kv_indices &&
      step.kv_indptr_size == last.kv_indptr_size)
    return moving_step(plan, step);
  // Other sizes: every step field written into last_step, re-checked there,
  // and lowered.
  apply_step(step, &plan.last_step);
  plan.last_step_current = true;  // whether it passes (step's fields) or not (last's)
  if (!recheck_step(plan, plan.last_step)) {
    apply_step(last, &plan.last_step);
    return false;
  }
  lower_data(plan.last_step, plan.lowered);
  plan.moved = step;
  plan.moving_valid = false;
  return true;
}

}  // namespace detail
}  // namespace ropekv
