// Every tensor view of an ropekv::Arguments, in one fixed order, for tests
// that walk or move them all (grid suite, regression suite, fuzz target).
#pragma once

#include "ropekv/ropekv.hpp"

namespace ropekv_test {

constexpr int kArgumentViews = 17;

inline void argument_views(ropekv::Arguments& a, ropekv::TensorView* (&v)[kArgumentViews]) {
  ropekv::TensorView* all[kArgumentViews] = {&a.q_rope,
                                             &a.q_nope,
                                             &a.k_rope,
                                             &a.k_nope,
                                             &a.v,
                                             &a.q_rope_out,
                                             &a.q_nope_out,
                                             &a.k_cache_rope,
                                             &a.k_cache_nope,
                                             &a.v_cache,
                                             &a.cos_sin_cache,
                                             &a.positions,
                                             &a.cache_index.slot_mapping,
                                             &a.cache_index.kv_indices,
                                             &a.cache_index.kv_indptr,
                                             &a.cache_index.batch_indices,
                                             &a.cache_index.kv_positions};
  for (int i = 0; i < kArgumentViews; ++i) v[i] = all[i];
}

// Calls f(pointer) for every data pointer of `a` (views, device scales, the
// checked-mode counter) and stores what it returns.
template <class F>
void rebase_pointers(ropekv::Arguments& a, F&& f) {
  ropekv::TensorView* views[kArgumentViews];
  argument_views(a, views);
  for (ropekv::TensorView* v : views) v->data = const_cast<void*>(f(v->data));
  for (ropekv::Scale* s : {&a.q_scale, &a.k_scale, &a.v_scale})
    s->device = static_cast<const float*>(f(s->device));
  a.checked.skipped_tokens =
      static_cast<unsigned long long*>(const_cast<void*>(f(a.checked.skipped_tokens)));
}

}  // namespace ropekv_test
