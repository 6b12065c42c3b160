// One description of every view of Arguments that validation looks at: the
// name messages print, where it is, its role, when it takes part, its rank,
// its dtype rule and what each dim is (a size it defines or must equal).
// Validation's phases and a prepared call's step walk it (validate.cpp,
// step_plan.cpp), each in the order derived for it below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "detail/validate.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv {
namespace detail {

// ------------------------------------------------------------- sizes
// The sizes that extents define or are compared to.
enum class Size : std::uint8_t {
  kNone,  // a free dim
  kNnz,
  kHq,
  kHk,
  kR,
  kN,
  kDv,
  kPages,
  kPageSize,
  kMaxPos,
  kEntries,  // page-table entries (kv_indices)
  kIndptr,   // batch + 1 (kv_indptr)
  kCount
};

// Where a size's own rule (>= 1; R also even) is checked.
enum class Own : std::uint8_t {
  kNone,    // it has none
  kFirst,   // with the sizes, before any extent is compared to them
  kEarly,   // in the views phase, before its view's own rules
  kInWalk,  // at its dim, in the extents walk
};

struct SizeSpec {
  const char* what;   // as "x.extent[k] must equal WHAT (n)" names it
  bool named_source;  // ... "must equal WHAT = v.extent[d] (n)"
  bool per_step;      // a prepared call's step may change it
  Own own;
  Status status;     // of its own rule
  const char* rule;  // its own rule's message, of (view name, dim, value)
  bool even;
};

// Indexed by Size. Columns: what, named_source, per_step, own, status, rule, even.
// clang-format off
constexpr SizeSpec kSizes[] = {
    /* kNone */   {"",         false, false, Own::kNone,   Status::kSuccess, nullptr, false},
    /* kNnz */    {"nnz",      false, true,  Own::kNone,   Status::kSuccess, nullptr, false},
    /* kHq */     {"Hq",       false, false, Own::kFirst,  Status::kErrorShapeMismatch,
                  "%s.extent[%d] (Hq) must be > 0, got %lld", false},
    /* kHk */     {"Hk",       false, false, Own::kFirst,  Status::kErrorShapeMismatch,
                  "%s.extent[%d] (Hk) must be > 0, got %lld", false},
    /* kR */      {"R",        false, false, Own::kFirst,  Status::kErrorInvalidRotaryDim,
                  "rotary dim R (%s.extent[%d]) must be even and > 0, got %lld", true},
    /* kN */      {"N",        true,  false, Own::kNone,   Status::kSuccess, nullptr, false},
    /* kDv */     {"Dv",       true,  false, Own::kInWalk, Status::kErrorShapeMismatch,
                  "%s.extent[%d] (Dv) must be > 0, got %lld", false},
    /* kPages */  {"num_pages", false, false, Own::kInWalk, Status::kErrorShapeMismatch,
                  "num_pages (%s.extent[%d]) must be > 0, got %lld", false},
    /* kPageSize */ {"page_size", false, false, Own::kEarly, Status::kErrorInvalidPageSize,
                  "page_size (%s.extent[%d]) must be > 0, got %lld", false},
    /* kMaxPos */ {"max_pos",  false, false, Own::kFirst,  Status::kErrorCosSinMismatch,
                  "%s.extent[%d] (max_pos) must be > 0, got %lld", false},
    /* kEntries */ {"",        false, true,  Own::kNone,   Status::kSuccess, nullptr, false},
    /* kIndptr */ {"",         false, true,  Own::kInWalk, Status::kErrorShapeMismatch,
                  "%s.extent[%d] must be batch + 1 >= 1, got %lld", false},
};
// clang-format on
static_assert(sizeof(kSizes) / sizeof(kSizes[0]) == std::size_t(Size::kCount), "one per Size");
constexpr const SizeSpec& size_spec(Size s) { return kSizes[std::size_t(s)]; }

// One dim of a view: the size it defines or must equal (kNone: free).
enum class Check : std::uint8_t {
  kDefines,
  kEquals,       // checked in the extents walk
  kEqualsFirst,  // checked with the sizes, with its own status (check_sizes)
};
struct Dim {
  Size size = Size::kNone;
  Check check = Check::kDefines;
};
constexpr Dim is(Size s) { return {s, Check::kDefines}; }
constexpr Dim eq(Size s) { return {s, Check::kEquals}; }
constexpr Dim eq_first(Size s) { return {s, Check::kEqualsFirst}; }

// ------------------------------------------------------------- views
enum ViewId : std::uint8_t {
  kQRope,
  kQNope,
  kKRope,
  kKNope,
  kV,
  kQRopeOut,
  kQNopeOut,
  kKCacheRope,
  kKCacheNope,
  kVCache,
  kCosSin,
  kPositions,
  kQScale,
  kKScale,
  kVScale,
  kSkipped,
  kSlotMapping,
  kKvIndices,
  kKvIndptr,
  kBatchIndices,
  kKvPositions,
  kNumViews
};

// Scalars are the device scale pointers and the checked-mode counter, seen
// as one-element views by the overlap rule only.
enum class Role : std::uint8_t { kInput, kOutput, kIndex, kScale, kCounter };
constexpr bool is_scalar(Role r) { return r == Role::kScale || r == Role::kCounter; }
constexpr bool is_written(Role r) { return r == Role::kOutput || r == Role::kCounter; }

// When a view takes part in a call (else it is ignored).
enum class When : std::uint8_t {
  kAlways,
  kNope,       // any non-rotary view present (has_nope): N is given
  kGqa,        // kind kGqa: the value
  kSlots,      // addressing kSlotMapping
  kPageTable,  // addressing kPageTable
  kCount
};

// A view's dtype: of a class of the dtype table, equal to another view's,
// fp32 or another view's (the cos/sin table); a scalar's fixed dtype.
enum class DTypeRule : std::uint8_t {
  kInput,
  kOutput,
  kIndex,
  kSame,
  kFp32OrSame,
  kFloat32,
  kInt64
};

struct ViewSpec {
  ViewId id;
  const char* name;    // as messages print it
  std::size_t offset;  // of the TensorView (a scalar: of its pointer) in Arguments
  Role role;
  When when;
  int rank;  // scalars: 0
  DTypeRule dtype;
  ViewId same;  // kSame, kFp32OrSame: whose dtype
  Dim dim[4];
};

#define ROPEKV_AT(field) offsetof(Arguments, field)
// In Arguments' order, scalars after positions (the overlap rule's order).
// Columns: id, name, offset, role, when, rank, dtype rule, whose dtype, dims.
// clang-format off
constexpr ViewSpec kViews[] = {
    {kQRope, "q_rope", ROPEKV_AT(q_rope), Role::kInput, When::kAlways, 3, DTypeRule::kInput, kQRope,
     {is(Size::kNnz), is(Size::kHq), is(Size::kR)}},
    {kQNope, "q_nope", ROPEKV_AT(q_nope), Role::kInput, When::kNope, 3, DTypeRule::kSame, kQRope,
     {eq(Size::kNnz), eq(Size::kHq), is(Size::kN)}},
    {kKRope, "k_rope", ROPEKV_AT(k_rope), Role::kInput, When::kAlways, 3, DTypeRule::kSame, kQRope,
     {eq(Size::kNnz), is(Size::kHk), eq(Size::kR)}},
    {kKNope, "k_nope", ROPEKV_AT(k_nope), Role::kInput, When::kNope, 3, DTypeRule::kSame, kQRope,
     {eq(Size::kNnz), eq(Size::kHk), eq(Size::kN)}},
    {kV, "v", ROPEKV_AT(v), Role::kInput, When::kGqa, 3, DTypeRule::kSame, kQRope,
     {eq(Size::kNnz), eq(Size::kHk), is(Size::kDv)}},
    {kQRopeOut, "q_rope_out", ROPEKV_AT(q_rope_out), Role::kOutput, When::kAlways, 3,
     DTypeRule::kOutput, kQRopeOut, {eq(Size::kNnz), eq(Size::kHq), eq(Size::kR)}},
    {kQNopeOut, "q_nope_out", ROPEKV_AT(q_nope_out), Role::kOutput, When::kNope, 3,
     DTypeRule::kSame, kQRopeOut, {eq(Size::kNnz), eq(Size::kHq), eq(Size::kN)}},
    {kKCacheRope, "k_cache_rope", ROPEKV_AT(k_cache_rope), Role::kOutput, When::kAlways, 4,
     DTypeRule::kOutput, kKCacheRope,
     {is(Size::kPages), is(Size::kPageSize), eq(Size::kHk), eq(Size::kR)}},
    {kKCacheNope, "k_cache_nope", ROPEKV_AT(k_cache_nope), Role::kOutput, When::kNope, 4,
     DTypeRule::kSame, kKCacheRope,
     {eq(Size::kPages), eq(Size::kPageSize), eq(Size::kHk), eq(Size::kN)}},
    {kVCache, "v_cache", ROPEKV_AT(v_cache), Role::kOutput, When::kGqa, 4, DTypeRule::kSame,
     kKCacheRope, {eq(Size::kPages), eq(Size::kPageSize), eq(Size::kHk), eq(Size::kDv)}},
    {kCosSin, "cos_sin_cache", ROPEKV_AT(cos_sin_cache), Role::kInput, When::kAlways, 2,
     DTypeRule::kFp32OrSame, kQRope, {is(Size::kMaxPos), eq_first(Size::kR)}},
    {kPositions, "positions", ROPEKV_AT(positions), Role::kIndex, When::kAlways, 1,
     DTypeRule::kIndex, kPositions, {eq(Size::kNnz)}},
    {kQScale, "q_scale.device", ROPEKV_AT(q_scale.device), Role::kScale, When::kAlways, 0,
     DTypeRule::kFloat32, kQScale, {}},
    {kKScale, "k_scale.device", ROPEKV_AT(k_scale.device), Role::kScale, When::kAlways, 0,
     DTypeRule::kFloat32, kKScale, {}},
    {kVScale, "v_scale.device", ROPEKV_AT(v_scale.device), Role::kScale, When::kGqa, 0,
     DTypeRule::kFloat32, kVScale, {}},
    {kSkipped, "checked.skipped_tokens", ROPEKV_AT(checked.skipped_tokens), Role::kCounter,
     When::kAlways, 0, DTypeRule::kInt64, kSkipped, {}},
    {kSlotMapping, "cache_index.slot_mapping", ROPEKV_AT(cache_index.slot_mapping), Role::kIndex,
     When::kSlots, 1, DTypeRule::kIndex, kSlotMapping, {eq(Size::kNnz)}},
    {kKvIndices, "cache_index.kv_indices", ROPEKV_AT(cache_index.kv_indices), Role::kIndex,
     When::kPageTable, 1, DTypeRule::kIndex, kKvIndices, {is(Size::kEntries)}},
    {kKvIndptr, "cache_index.kv_indptr", ROPEKV_AT(cache_index.kv_indptr), Role::kIndex,
     When::kPageTable, 1, DTypeRule::kIndex, kKvIndptr, {is(Size::kIndptr)}},
    {kBatchIndices, "cache_index.batch_indices", ROPEKV_AT(cache_index.batch_indices),
     Role::kIndex, When::kPageTable, 1, DTypeRule::kIndex, kBatchIndices, {eq(Size::kNnz)}},
    {kKvPositions, "cache_index.kv_positions", ROPEKV_AT(cache_index.kv_positions),
     Role::kIndex, When::kPageTable, 1, DTypeRule::kIndex, kKvPositions, {eq(Size::kNnz)}},
};
// clang-format on
#undef ROPEKV_AT

// ------------------------------------------------------------- derived orders
// A list of views (or of rules on their dims), in a phase's order.
struct Order {
  std::uint8_t view[kNumViews] = {};
  std::int8_t dim[kNumViews] = {};  // views phase: the dim of an early size rule, or -1
  std::size_t size = 0;
};
struct RuleList {
  struct Rule {
    std::uint8_t view, dim;
  };
  Rule rule[4 * kNumViews] = {};
  std::size_t size = 0;
};

constexpr std::size_t position(const Order& o, std::size_t view) {
  for (std::size_t i = 0; i < o.size; ++i)
    if (o.view[i] == view) return i;
  return kNumViews;
}
// Views of `keep`, ordered by key(view) (0 .. keys - 1), then by the table's order.
template <class Keep, class Key>
constexpr Order order_by(Keep keep, Key key, int keys) {
  Order o;
  for (int k = 0; k < keys; ++k)
    for (std::size_t i = 0; i < kNumViews; ++i)
      if (keep(kViews[i]) && key(kViews[i]) == k) {
        o.dim[o.size] = -1;
        o.view[o.size++] = std::uint8_t(i);
      }
  return o;
}
constexpr bool is_view(const ViewSpec& s) { return !is_scalar(s.role); }
constexpr bool per_token(const ViewSpec& s) { return s.dim[0].size == Size::kNnz; }

constexpr std::size_t count(bool (*pred)(Role)) {
  std::size_t n = 0;
  for (const ViewSpec& s : kViews) n += pred(s.role) ? 1 : 0;
  return n;
}
constexpr std::size_t kNumWritten = count(is_written), kNumScalars = count(is_scalar);

// Views phase: by when.
constexpr Order views_order() {
  Order o = order_by(
      is_view, [](const ViewSpec& s) { return int(s.when); }, int(When::kCount));
  for (std::size_t i = 0; i < o.size; ++i)
    for (int d = 0; d < 4; ++d) {
      const Dim& dm = kViews[o.view[i]].dim[d];
      if (dm.check == Check::kDefines && size_spec(dm.size).own == Own::kEarly) o.dim[i] = d;
    }
  return o;
}
constexpr Order kViewsOrder = views_order();
// Dtypes phase: each rule followed by the views that must equal its dtype,
// both in the views phase's order.
constexpr Order kDTypesOrder = order_by(
    is_view,
    [](const ViewSpec& s) {
      const std::size_t rule = position(kViewsOrder, s.dtype == DTypeRule::kSame ? s.same : s.id);
      return int(rule * kNumViews + position(kViewsOrder, s.id));
    },
    int(kNumViews) * int(kNumViews));
// Extents phase: by when, per-token views first.
constexpr Order kExtentsOrder = order_by(
    is_view, [](const ViewSpec& s) { return 2 * int(s.when) + (per_token(s) ? 0 : 1); },
    2 * int(When::kCount));
// Overlap rule: written views first.
constexpr Order kOverlapOrder =
    order_by([](const ViewSpec&) { return true; },
             [](const ViewSpec& s) { return is_written(s.role) ? 0 : 1; }, 2);

// The scalars, in the overlap rule's order.
constexpr Order scalar_order() {
  Order o;
  for (std::size_t i = 0; i < kOverlapOrder.size; ++i)
    if (is_scalar(kViews[kOverlapOrder.view[i]].role)) o.view[o.size++] = kOverlapOrder.view[i];
  return o;
}
constexpr Order kScalarOrder = scalar_order();

// The extents walk's rules in order: dims that must equal a size, and sizes
// whose own rule is checked in the walk; `step`: only those on sizes a step
// may change.
constexpr RuleList extent_rules(bool step) {
  RuleList r;
  for (std::size_t i = 0; i < kExtentsOrder.size; ++i) {
    const ViewSpec& s = kViews[kExtentsOrder.view[i]];
    for (int d = 0; d < s.rank; ++d) {
      const Dim& dm = s.dim[d];
      const SizeSpec& z = size_spec(dm.size);
      const bool walked =
          dm.size != Size::kNone &&
          (dm.check == Check::kEquals || (dm.check == Check::kDefines && z.own == Own::kInWalk));
      if (walked && (!step || z.per_step)) r.rule[r.size++] = {std::uint8_t(s.id), std::uint8_t(d)};
    }
  }
  return r;
}
constexpr RuleList kExtentRules = extent_rules(false);
constexpr RuleList kStepRules = extent_rules(true);

// Where each size is defined: {view, dim}.
struct Source {
  std::uint8_t view = kNumViews, dim = 0;
};
struct Sources {
  Source of[std::size_t(Size::kCount)];
};
constexpr Sources size_sources() {
  Sources s;
  for (std::size_t i = 0; i < kNumViews; ++i)
    for (int d = 0; d < 4; ++d)
      if (kViews[i].dim[d].size != Size::kNone && kViews[i].dim[d].check == Check::kDefines)
        s.of[std::size_t(kViews[i].dim[d].size)] = {std::uint8_t(i), std::uint8_t(d)};
  return s;
}
constexpr Sources kSources = size_sources();

// ------------------------------------------------------------- walks
// f(std::integral_constant<std::size_t, i>{}) for i = 0 .. N - 1 while it
// returns true; false when one returned false. Unrolled at compile time, so
// each entry's fields are constants: a walk costs what code naming each
// view does.
template <class F, std::size_t... I>
bool walk_each(F& f, std::index_sequence<I...>) {
  return (f(std::integral_constant<std::size_t, I>{}) && ...);
}
template <std::size_t N, class F>
bool walk(F&& f) {
  return walk_each(f, std::make_index_sequence<N>{});
}

// ------------------------------------------------------------- checks of the table
constexpr bool table_consistent() {
  int defined[std::size_t(Size::kCount)] = {};
  for (std::size_t i = 0; i < kNumViews; ++i) {
    const ViewSpec& s = kViews[i];
    if (s.id != i || (is_scalar(s.role) != (s.rank == 0))) return false;
    if ((s.dtype == DTypeRule::kSame || s.dtype == DTypeRule::kFp32OrSame) &&
        kViews[s.same].dtype == DTypeRule::kSame)
      return false;
    for (int d = 0; d < 4; ++d) {
      if (d >= s.rank && s.dim[d].size != Size::kNone) return false;
      if (s.dim[d].size != Size::kNone && s.dim[d].check == Check::kDefines)
        ++defined[std::size_t(s.dim[d].size)];
    }
  }
  for (std::size_t z = 1; z < std::size_t(Size::kCount); ++z)
    if (defined[z] != 1) return false;
  return true;
}
static_assert(table_consistent(),
              "kViews: ids in order, scalars of rank 0, dims within the rank, every size "
              "defined once, dtype rules on a view with a rule of its own");

// ------------------------------------------------------------- one call's views
// Table entry `s`'s view in `a` (not a scalar).
inline const TensorView& view_in(const Arguments& a, const ViewSpec& s) {
  return *reinterpret_cast<const TensorView*>(reinterpret_cast<const char*>(&a) + s.offset);
}
// A scalar's pointer in `a`.
inline const void* pointer_in(const Arguments& a, const ViewSpec& s) {
  static_assert(sizeof(const float*) == sizeof(const void*) &&
                    sizeof(unsigned long long*) == sizeof(const void*),
                "scalar pointers are read as const void*");
  const void* p;
  std::memcpy(&p, reinterpret_cast<const char*>(&a) + s.offset, sizeof p);
  return p;
}

// Which views take part in a call (ViewSpec::when).
class Active {
 public:
  explicit Active(const Arguments& a) {
    const bool slots = a.cache_index.form == Addressing::kSlotMapping;
    on_[std::size_t(When::kAlways)] = true;
    on_[std::size_t(When::kNope)] = has_nope(a);
    on_[std::size_t(When::kGqa)] = a.kind != AttentionKind::kMla;
    on_[std::size_t(When::kSlots)] = slots;
    on_[std::size_t(When::kPageTable)] = !slots;
  }
  bool operator()(When w) const { return w == When::kAlways || on_[std::size_t(w)]; }

 private:
  bool on_[std::size_t(When::kCount)];
};

}  // namespace detail
}  // namespace ropekv
