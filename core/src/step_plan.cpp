// A prepared call: the plan of the shape validation accepted (plan_shape) and
// a step's re-check against it and the prepared arguments.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "detail/argument_table.hpp"
#include "detail/overlap.hpp"
#include "detail/validate.hpp"

namespace ropekv {
namespace detail {

namespace {

static_assert(
    [] {
      for (const DTypeInfo& d : kDTypes)
        if ((d.bytes & (d.bytes - 1)) != 0) return false;
      return true;
    }(),
    "run_step tests alignment with a mask: element sizes must be powers of two");
// The byte length of a view's span with extent 0 = n > 0 (its other extents
// > 0, their part pv.rest_elems): false where it does not fit in int64.
bool span_bytes(const StepPlan::View& pv, std::int64_t n, std::int64_t stride0, std::int64_t* elems,
                std::int64_t* bytes) {
  return mul_fits(n - 1, stride0, elems) && add_fits(*elems, pv.rest_elems, elems) &&
         mul_fits(*elems, pv.es, bytes);
}

// Equal dtype, rank, strides and extents; with `token_free`, extent 0 (a
// token count or a page-table length) may differ.
static_assert(sizeof(TensorView) == 80 && offsetof(TensorView, dtype) == 8 &&
                  offsetof(TensorView, rank) == 12 && offsetof(TensorView, extent) == 16 &&
                  offsetof(TensorView, stride) == 48,
              "TensorView's layout changed: update same_view");
inline bool same_view(const TensorView& a, const TensorView& b, bool token_free) {
  // dtype and rank, extents, strides: the 9 words after data (word 1:
  // extent 0), compared without branches.
  auto differ = [&](int k) {
    std::uint64_t x, y;
    std::memcpy(&x, reinterpret_cast<const char*>(&a.dtype) + 8 * k, 8);
    std::memcpy(&y, reinterpret_cast<const char*>(&b.dtype) + 8 * k, 8);
    return x ^ y;
  };
  std::uint64_t diff = differ(0) | (token_free ? 0 : differ(1));
  for (int k = 2; k < 9; ++k) diff |= differ(k);
  return diff == 0;
}
// Equal convention and, for a host scale, value; a device scale may move.
bool same_scale(const Scale& a, const Scale& b) {
  return a.convention == b.convention && (a.device == nullptr) == (b.device == nullptr) &&
         (a.device != nullptr || a.value == b.value);
}

// `a` and `b` differ at most in the fields a step may change: the views'
// data, extent 0 of the views whose dim 0 a step may change (per-token,
// page table), device scale and checked-mode counter pointers (not whether
// they are null), the stream.
bool same_except_step(const Arguments& a, const Arguments& b) {
  // Every field of Arguments is named here or in kViews; a new field must be added.
  static_assert(sizeof(void*) != 8 || sizeof(Arguments) == 1480,
                "Arguments changed: update same_except_step");
  if (a.kind != b.kind || a.rope_style != b.rope_style || a.cache_index.form != b.cache_index.form)
    return false;
  // With equal kind, form and ranks, the views a call uses are b's.
  const Active on(b);
  const bool views = walk<kNumViews>([&](auto i) {
    constexpr const ViewSpec& s = kViews[decltype(i)::value];
    if constexpr (is_scalar(s.role)) {
      return true;
    } else {
      // Of a view the call does not use, the rules read only its rank.
      if (!on(s.when)) return view_in(a, s).rank == view_in(b, s).rank;
      return same_view(view_in(a, s), view_in(b, s), size_spec(s.dim[0].size).per_step);
    }
  });
  return views && same_scale(a.q_scale, b.q_scale) && same_scale(a.k_scale, b.k_scale) &&
         same_scale(a.v_scale, b.v_scale) && a.checked.enabled == b.checked.enabled &&
         (a.checked.skipped_tokens == nullptr) == (b.checked.skipped_tokens == nullptr) &&
         a.programmatic_dependent_launch == b.programmatic_dependent_launch &&
         a.indices_ready_before_previous_kernel == b.indices_ready_before_previous_kernel;
}

// The overlap rule over the plan's pairs of present views, for a step's
// spans (a view empty at this step has the span [0, 0): disjoint from every
// span). as_planned(e): interleaved pair e lies as planned (the same distance
// between the two data, the same extents); disjoint(i, j): the pair's full
// test. First the groups' union spans, in one pass without branches: where
// two meet, every pair one by one.
template <class AsPlanned, class Disjoint>
bool spans_hold(const StepPlan& plan, const Span* spans, AsPlanned as_planned, Disjoint disjoint) {
  if (plan.num_group_pairs > 0) {
    Span unions[OverlapViews::kAll];
    for (std::size_t g = 0; g < plan.num_groups; ++g) unions[g] = {~std::uintptr_t(0), 0};
    for (std::size_t k = 0; k < plan.num_present; ++k) {
      const std::size_t i = plan.present[k];
      if (spans[i].hi == 0) continue;  // empty
      Span& u = unions[plan.group[i]];
      u.lo = spans[i].lo < u.lo ? spans[i].lo : u.lo;
      u.hi = spans[i].hi > u.hi ? spans[i].hi : u.hi;
    }
    bool any = false;
    for (std::size_t k = 0; k < plan.num_group_pairs; ++k)
      any |= spans_meet(unions[plan.group_pair[k][0]], unions[plan.group_pair[k][1]]);
    if (any) {
      for (std::size_t k = 0; k < plan.num_pairs; ++k)
        if (!disjoint(plan.pair[k][0], plan.pair[k][1])) return false;
      return true;
    }
  }
  // Within the groups: the interleaved pairs keep the plan's verdict where
  // they lie as they did (the proof is translation-invariant).
  for (std::size_t k = 0; k < plan.num_interleaved; ++k) {
    const StepPlan::Interleaved& e = plan.interleaved[k];
    if (!as_planned(e) && !disjoint(e.i, e.j)) return false;
  }
  bool any = false;
  for (std::size_t k = 0; k < plan.num_inner; ++k)
    any |= spans_meet(spans[plan.inner[k][0]], spans[plan.inner[k][1]]);
  if (!any) return true;
  for (std::size_t k = 0; k < plan.num_inner; ++k)
    if (!disjoint(plan.inner[k][0], plan.inner[k][1])) return false;
  return true;
}

// A step's re-check of `a` against the plan.
bool run_step(const StepPlan& plan, const Arguments& a) {
  // Every view's data rules (null, alignment, span, end address) and span,
  // from the plan's shape and this step's data and extent 0.
  const OverlapViews v(a, Active(a));
  Span spans[OverlapViews::kAll];
  for (std::size_t k = 0; k < plan.num_present; ++k) {
    const std::size_t i = plan.present[k];
    const TensorView& t = *v.view[i];
    const StepPlan::View& pv = plan.view[i];
    const std::int64_t n = t.extent[0];
    if (n < 0 || (pv.strided_vector && n > 1)) return false;
    if (n == 0 || !pv.others_nonzero) {
      spans[i] = {0, 0};  // empty: disjoint from every span
      continue;
    }
    const std::uintptr_t lo = reinterpret_cast<std::uintptr_t>(t.data);
    std::int64_t elems = 0, bytes = pv.prepared_bytes;
    if (n != pv.prepared_n || bytes < 0) {
      if (!pv.rest_fits || !span_bytes(pv, n, t.stride[0], &elems, &bytes)) return false;
    }
    if (t.data == nullptr || (lo & std::uintptr_t(pv.es - 1)) != 0 ||
        lo > std::numeric_limits<std::uintptr_t>::max() - std::uintptr_t(bytes))
      return false;
    spans[i].lo = lo;
    spans[i].hi = lo + std::uintptr_t(bytes);
  }
  if (!step_rules_hold(a)) return false;
  // Outputs of a fixed shape keep the plan's verdict on overlapping
  // themselves; the per-token ones' holds up to the plan's token count.
  const bool self_ok = walk<OverlapViews::kOutputs>([&](auto i) {
    constexpr std::size_t k = decltype(i)::value;
    if constexpr (per_token(kViews[kOverlapOrder.view[k]])) {
      return v.view[k]->extent[0] <= plan.self_checked_tokens || self_disjoint(*v.view[k]);
    } else {
      return true;
    }
  });
  if (!self_ok) return false;
  return spans_hold(
      plan, spans,
      [&](const StepPlan::Interleaved& e) {
        const TensorView &a = *v.view[e.i], &b = *v.view[e.j];
        const std::uintptr_t distance =
            reinterpret_cast<std::uintptr_t>(b.data) - reinterpret_cast<std::uintptr_t>(a.data);
        return distance == e.distance && a.extent[0] == e.n_i && b.extent[0] == e.n_j;
      },
      [&](std::size_t i, std::size_t j) {
        return provably_disjoint(*v.view[i], spans[i], *v.view[j], spans[j]);
      });
}

}  // namespace

static_assert(
    sizeof(StepPlan::view) / sizeof(StepPlan::View) == OverlapViews::kAll &&
        sizeof(StepPlan::present) == OverlapViews::kAll &&
        sizeof(StepPlan::pair) / 2 >=
            OverlapViews::kOutputs * (2 * OverlapViews::kAll - OverlapViews::kOutputs - 1) / 2,
    "StepPlan::view, present: one entry per view of the overlap rule; pair: room for all pairs");

void plan_shape(StepPlan* plan, const Arguments& validated) noexcept {
  plan->self_checked_tokens = validated.q_rope.extent[0];
  const OverlapViews v(validated, Active(validated));
  plan->num_present = 0;
  plan->num_pairs = 0;
  for (std::size_t i = 0; i < OverlapViews::kAll; ++i) {
    const TensorView& t = *v.view[i];
    StepPlan::View& pv = plan->view[i];
    if (t.rank > 0) {
      for (std::size_t k = 0; k < plan->num_present; ++k)
        if (plan->present[k] < OverlapViews::kOutputs) {
          plan->pair[plan->num_pairs][0] = plan->present[k];
          plan->pair[plan->num_pairs][1] = std::uint8_t(i);
          ++plan->num_pairs;
        }
      plan->present[plan->num_present++] = std::uint8_t(i);
    }
    pv.es = std::int64_t(size_of(t.dtype));
    pv.strided_vector = t.rank == 1 && t.stride[0] != 1;
    pv.others_nonzero = t.rank > 0;
    pv.rest_elems = 1;
    pv.rest_fits = true;
    for (int k = 1; k < t.rank; ++k) {
      pv.others_nonzero = pv.others_nonzero && t.extent[k] > 0;
      std::int64_t term = 0;
      if (t.extent[k] > 0 && !(mul_fits(t.extent[k] - 1, t.stride[k], &term) &&
                               add_fits(pv.rest_elems, term, &pv.rest_elems)))
        pv.rest_fits = false;
    }
    pv.prepared_n = t.rank > 0 ? t.extent[0] : 0;
    pv.prepared_bytes = -1;
    std::int64_t elems = 0, bytes = 0;
    if (pv.prepared_n > 0 && pv.others_nonzero && pv.rest_fits &&
        span_bytes(pv, pv.prepared_n, t.stride[0], &elems, &bytes))
      pv.prepared_bytes = bytes;
  }
  // Groups: views joined while their spans meet (a view and its group's
  // first view share its number), then the pairs of groups one of which
  // holds an output, and the pairs within a group.
  Span spans[OverlapViews::kAll];
  for (std::size_t k = 0; k < plan->num_present; ++k) {
    const std::size_t i = plan->present[k];
    spans[i] = span_of(*v.view[i]);
    plan->group[i] = std::uint8_t(i);
  }
  const auto meet = [&](std::size_t i, std::size_t j) { return spans_meet(spans[i], spans[j]); };
  for (bool joined = true; joined;) {  // to a fixed point: at most 21 rounds of 21 x 21
    joined = false;
    for (std::size_t a = 0; a < plan->num_present; ++a)
      for (std::size_t b = a + 1; b < plan->num_present; ++b) {
        const std::size_t i = plan->present[a], j = plan->present[b];
        if (plan->group[i] == plan->group[j] || !meet(i, j)) continue;
        const std::uint8_t from = plan->group[j] > plan->group[i] ? plan->group[j] : plan->group[i];
        const std::uint8_t to = plan->group[j] > plan->group[i] ? plan->group[i] : plan->group[j];
        for (std::size_t c = 0; c < plan->num_present; ++c)
          if (plan->group[plan->present[c]] == from) plan->group[plan->present[c]] = to;
        joined = true;
      }
  }
  // Group numbers 0 .. num_groups - 1, in the order of their first views.
  std::uint8_t number[OverlapViews::kAll];
  bool has_output[OverlapViews::kAll] = {};
  plan->num_groups = 0;
  for (std::size_t k = 0; k < plan->num_present; ++k) {
    const std::size_t i = plan->present[k];
    if (plan->group[i] == i) number[i] = plan->num_groups++;
  }
  for (std::size_t k = 0; k < plan->num_present; ++k) {
    const std::size_t i = plan->present[k];
    plan->group[i] = number[plan->group[i]];
    if (i < OverlapViews::kOutputs) has_output[plan->group[i]] = true;
  }
  plan->num_group_pairs = 0;
  for (std::size_t g = 0; g < plan->num_groups; ++g)
    for (std::size_t h = g + 1; h < plan->num_groups; ++h)
      if (has_output[g] || has_output[h]) {
        plan->group_pair[plan->num_group_pairs][0] = std::uint8_t(g);
        plan->group_pair[plan->num_group_pairs][1] = std::uint8_t(h);
        ++plan->num_group_pairs;
      }
  // Where the unions cost about as much as the pairs they stand for (a
  // union per view, a test per pair of groups), one group: every pair inner.
  if (plan->num_present + plan->num_group_pairs >= plan->num_pairs) {
    for (std::size_t k = 0; k < plan->num_present; ++k) plan->group[plan->present[k]] = 0;
    plan->num_groups = 1;
    plan->num_group_pairs = 0;
  }
  plan->num_inner = 0;
  plan->num_interleaved = 0;
  for (std::size_t k = 0; k < plan->num_pairs; ++k) {
    const std::uint8_t i = plan->pair[k][0], j = plan->pair[k][1];
    if (plan->group[i] != plan->group[j]) continue;
    if (!meet(i, j) ||
        plan->num_interleaved == sizeof(plan->interleaved) / sizeof(plan->interleaved[0])) {
      plan->inner[plan->num_inner][0] = i;
      plan->inner[plan->num_inner][1] = j;
      ++plan->num_inner;
      continue;
    }
    StepPlan::Interleaved& e = plan->interleaved[plan->num_interleaved++];
    e.i = i;
    e.j = j;
    e.distance = reinterpret_cast<std::uintptr_t>(v.view[j]->data) -
                 reinterpret_cast<std::uintptr_t>(v.view[i]->data);
    e.n_i = v.view[i]->extent[0];
    e.n_j = v.view[j]->extent[0];
  }
}

// Step (ropekv.hpp) holds each view's data and each scalar's pointer in
// kViews' order, one pointer-sized word each, then its sizes.
#define ROPEKV_STEP_AT(field, id)                                         \
  static_assert(offsetof(Step, field) == std::size_t(id) * sizeof(void*), \
                "Step: " #field " out of kViews' order")
ROPEKV_STEP_AT(q_rope, kQRope);
ROPEKV_STEP_AT(q_nope, kQNope);
ROPEKV_STEP_AT(k_rope, kKRope);
ROPEKV_STEP_AT(k_nope, kKNope);
ROPEKV_STEP_AT(v, kV);
ROPEKV_STEP_AT(q_rope_out, kQRopeOut);
ROPEKV_STEP_AT(q_nope_out, kQNopeOut);
ROPEKV_STEP_AT(k_cache_rope, kKCacheRope);
ROPEKV_STEP_AT(k_cache_nope, kKCacheNope);
ROPEKV_STEP_AT(v_cache, kVCache);
ROPEKV_STEP_AT(cos_sin_cache, kCosSin);
ROPEKV_STEP_AT(positions, kPositions);
ROPEKV_STEP_AT(q_scale, kQScale);
ROPEKV_STEP_AT(k_scale, kKScale);
ROPEKV_STEP_AT(v_scale, kVScale);
ROPEKV_STEP_AT(skipped_tokens, kSkipped);
ROPEKV_STEP_AT(slot_mapping, kSlotMapping);
ROPEKV_STEP_AT(kv_indices, kKvIndices);
ROPEKV_STEP_AT(kv_indptr, kKvIndptr);
ROPEKV_STEP_AT(batch_indices, kBatchIndices);
ROPEKV_STEP_AT(kv_positions, kKvPositions);
#undef ROPEKV_STEP_AT
static_assert(offsetof(Step, nnz) == kNumViews * sizeof(void*) &&
                  kStepStreamWord == kNumViews + 3 &&
                  std::has_unique_object_representations_v<Step>,
              "Step: the pointers, then the sizes, no padding (steps are compared as bytes)");
static_assert(offsetof(TensorView, data) == 0,
              "step_of_arguments reads a view's data pointer at its field's start");

namespace {
// Step's field for size z (a size a step may change: size_spec(z).per_step).
template <class S>
auto step_size(S& s, Size z) -> decltype(&s.nnz) {
  switch (z) {
    case Size::kEntries: return &s.num_kv_indices;
    case Size::kIndptr: return &s.kv_indptr_size;
    default: return &s.nnz;
  }
}
constexpr bool step_sizes_named() {
  for (std::size_t z = 0; z < std::size_t(Size::kCount); ++z)
    if (size_spec(Size(z)).per_step && Size(z) != Size::kNnz && Size(z) != Size::kEntries &&
        Size(z) != Size::kIndptr)
      return false;
  return true;
}
static_assert(step_sizes_named(), "a size a step may change without a field in Step");
}  // namespace

void apply_step(const Step& step, Arguments* a) noexcept {
  walk<kNumViews>([&](auto i) {
    constexpr const ViewSpec& s = kViews[decltype(i)::value];
    char* field = reinterpret_cast<char*>(a) + s.offset;
    const std::uintptr_t word = step_word(step, s.id);
    if constexpr (is_scalar(s.role)) {
      std::memcpy(field, &word, sizeof word);
    } else {
      TensorView& t = *reinterpret_cast<TensorView*>(field);
      std::memcpy(&t.data, &word, sizeof word);
      if constexpr (size_spec(s.dim[0].size).per_step) {
        if (t.rank > 0) t.extent[0] = *step_size(step, s.dim[0].size);
      }
    }
    return true;
  });
  a->stream = step.stream;
}

Step step_of_arguments(const Arguments& a) noexcept {
  Step step;
  walk<kNumViews>([&](auto i) {
    constexpr const ViewSpec& s = kViews[decltype(i)::value];
    const char* field = reinterpret_cast<const char*>(&a) + s.offset;
    std::uintptr_t word;  // a scalar's field is its pointer, a view's starts with it
    std::memcpy(&word, field, sizeof word);
    set_step_word(&step, s.id, word);
    if constexpr (!is_scalar(s.role)) {
      const TensorView& t = *reinterpret_cast<const TensorView*>(field);
      // Each size from the view that defines it (q_rope, kv_indices, kv_indptr).
      constexpr Size z = s.dim[0].size;
      if constexpr (size_spec(z).per_step && s.dim[0].check == Check::kDefines) {
        *step_size(step, z) = t.rank > 0 ? t.extent[0] : 0;
      }
    }
    return true;
  });
  step.stream = a.stream;
  return step;
}

bool recheck_step(const StepPlan& plan, const Arguments& args) noexcept {
  return run_step(plan, args);
}

bool plan_moving(StepPlan* plan) noexcept {
  const Arguments& a = plan->last_step;
  const OverlapViews v(a, Active(a));
  for (std::size_t k = 0; k < plan->num_present; ++k) {
    const std::size_t i = plan->present[k];
    const TensorView& t = *v.view[i];
    const StepPlan::View& pv = plan->view[i];
    StepPlan::MovingView& m = plan->moving[k];
    m.view = std::uint8_t(i);
    m.word = kOverlapOrder.view[i];
    m.align_mask = std::uint8_t(pv.es - 1);
    m.bytes = 0;
    std::int64_t elems = 0;
    if (t.extent[0] > 0 && pv.others_nonzero &&
        !(pv.rest_fits && span_bytes(pv, t.extent[0], t.stride[0], &elems, &m.bytes)))
      return false;
  }
  plan->interleaved_sized = 0;
  for (std::size_t k = 0; k < plan->num_interleaved; ++k) {
    const StepPlan::Interleaved& e = plan->interleaved[k];
    if (v.view[e.i]->extent[0] == e.n_i && v.view[e.j]->extent[0] == e.n_j)
      plan->interleaved_sized |= std::uint8_t(1u << k);
  }
  return true;
}

namespace {
// A moving step's full test of views i and j, rare (spans that meet where
// the plan's did not): last_step's views (its shapes) at the step's data.
// Out of line (cold): the moving step's own code stays short.
__attribute__((noinline, cold)) bool moved_disjoint(const StepPlan& plan, const Step& step,
                                                    const Span* spans, std::size_t i,
                                                    std::size_t j) {
  const OverlapViews v(plan.last_step, Active(plan.last_step));
  TensorView a = *v.view[i], b = *v.view[j];
  a.data = reinterpret_cast<void*>(step_word(step, kOverlapOrder.view[i]));
  b.data = reinterpret_cast<void*>(step_word(step, kOverlapOrder.view[j]));
  return provably_disjoint(a, spans[i], b, spans[j]);
}
}  // namespace

// run_step's verdict for last_step with the step's words: the sizes, and
// so each span's length, each view's self-overlap verdict and the size
// rules, are those last_step passed with; a present scalar's rules (device
// scales 4-byte, the counter 8-byte aligned, within the address space) are
// its one-element view's data rules.
bool moving_step_holds(const StepPlan& plan, const Step& step) noexcept {
  Span spans[OverlapViews::kAll];
  for (std::size_t k = 0; k < plan.num_present; ++k) {
    const StepPlan::MovingView& m = plan.moving[k];
    if (m.bytes == 0) {
      spans[m.view] = {0, 0};
      continue;
    }
    const std::uintptr_t lo = step_word(step, m.word);
    if (lo == 0 || (lo & m.align_mask) != 0 ||
        lo > std::numeric_limits<std::uintptr_t>::max() - std::uintptr_t(m.bytes))
      return false;
    spans[m.view].lo = lo;
    spans[m.view].hi = lo + std::uintptr_t(m.bytes);
  }
  return spans_hold(
      plan, spans,
      [&](const StepPlan::Interleaved& e) {
        const std::size_t k = std::size_t(&e - plan.interleaved);
        return step_word(step, kOverlapOrder.view[e.j]) -
                       step_word(step, kOverlapOrder.view[e.i]) ==
                   e.distance &&
               ((plan.interleaved_sized >> k) & 1u) != 0;
      },
      [&](std::size_t i, std::size_t j) { return moved_disjoint(plan, step, spans, i, j); });
}

bool step_of_prepared(const StepPlan& plan, const Arguments& args, Step* step) noexcept {
  if (!same_except_step(args, plan.last_step)) return false;
  *step = step_of_arguments(args);
  // Each size is taken from the view that defines it: every other view
  // apply_step sets must already have it.
  return walk<kNumViews>([&](auto i) {
    constexpr const ViewSpec& s = kViews[decltype(i)::value];
    if constexpr (is_scalar(s.role) || !size_spec(s.dim[0].size).per_step) {
      return true;
    } else {
      const TensorView& t = view_in(args, s);
      return t.rank <= 0 || t.extent[0] == *step_size(*step, s.dim[0].size);
    }
  });
}

}  // namespace detail
}  // namespace ropekv
