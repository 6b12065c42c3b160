// The grid suite's case data, its buffers and views: Builder's buffers with guard
// margins, inputs, query output and paged caches (each layout's helper checked).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "grid_case.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv_test {

// ------------------------------------------------------------------ case data
std::shared_ptr<unsigned char> aligned_bytes(std::size_t n) {
  const std::size_t size = (n + 255) / 256 * 256 + 256;
  void* p = std::aligned_alloc(256, size);
  if (p == nullptr) std::abort();
  return std::shared_ptr<unsigned char>(static_cast<unsigned char*>(p),
                                        [](unsigned char* q) { std::free(q); });
}

namespace {

void* offset(void* base, DType dtype, std::int64_t elems) {
  return static_cast<unsigned char*>(base) + elems * std::int64_t(ropekv::size_of(dtype));
}

// Views written out from their definitions (for padded variants and for
// checking the layout helpers).
TensorView view3(void* base, DType dt, std::int64_t off, std::int64_t n, std::int64_t h,
                 std::int64_t len, std::int64_t ts, std::int64_t hs) {
  if (len == 0) return TensorView{};
  const std::int64_t e[3] = {n, h, len};
  const std::int64_t st[3] = {ts, hs, 1};
  return ropekv::make_strided(offset(base, dt, off), dt, 3, e, st);
}
TensorView view4(void* base, DType dt, std::int64_t off, std::int64_t pages, std::int64_t ps,
                 std::int64_t h, std::int64_t len, std::int64_t sp, std::int64_t se,
                 std::int64_t sh) {
  if (len == 0) return TensorView{};
  const std::int64_t e[4] = {pages, ps, h, len};
  const std::int64_t st[4] = {sp, se, sh, 1};
  return ropekv::make_strided(offset(base, dt, off), dt, 4, e, st);
}

std::string view_string(const TensorView& v) {
  if (!v.present()) return "(absent)";
  std::string s = "{data " + std::to_string(reinterpret_cast<std::uintptr_t>(v.data)) + ", " +
                  ropekv::to_string(v.dtype) + ", extents";
  for (int k = 0; k < v.rank; ++k) s += " " + std::to_string(v.extent[k]);
  s += ", strides";
  for (int k = 0; k < v.rank; ++k) s += " " + std::to_string(v.stride[k]);
  return s + "}";
}

bool same_view(const TensorView& a, const TensorView& b) {
  if (a.present() != b.present()) return false;
  if (!a.present()) return true;
  if (a.rank != b.rank || a.data != b.data || a.dtype != b.dtype) return false;
  for (int k = 0; k < a.rank; ++k)
    if (a.extent[k] != b.extent[k] || a.stride[k] != b.stride[k]) return false;
  return true;
}

}  // namespace

void* Builder::add(const char* name, Role role, std::int64_t elems, std::size_t elem) {
  const std::size_t front = 64 + (s_.misaligned ? elem * std::size_t(r_.range(1, 3)) : 0);
  const std::size_t back = 32 + elem * std::size_t(r_.range(0, 3));
  HostBuffer b;
  b.name = name;
  b.role = role;
  b.bytes = front + std::size_t(std::max<std::int64_t>(elems, 0)) * elem + back;
  b.data = aligned_bytes(b.bytes);
  // Outputs: guard bytes. Inputs: garbage that must never be read.
  for (std::size_t i = 0; i < b.bytes; i += 8) {
    const std::uint64_t g = r_.bits();
    std::memcpy(b.ptr() + i, &g, std::min<std::size_t>(8, b.bytes - i));
  }
  d_.buffers.push_back(b);
  return b.ptr() + front;
}

void Builder::check_helper(const char* what, const TensorView& got, const TensorView& want) {
  if (!same_view(got, want))
    d_.layout_errors += std::string("\n  layout helper ") + what + " returned " + view_string(got) +
                        ", its layout defines " + view_string(want);
}

void Builder::build() {
  build_inputs();
  build_query_output();
  build_indices();  // decides the number of pages
  build_cache();
  build_cos_sin();
  build_scales();
  fill_inputs();
  Arguments& a = d_.args;
  a.kind = s_.kind;
  a.rope_style = s_.style;
  a.checked.enabled = s_.checked;
  if (s_.counter) {
    unsigned long long* c =
        static_cast<unsigned long long*>(add("skipped_tokens", Role::kCounter, 1, 8));
    d_.counter_init = static_cast<unsigned long long>(r_.range(0, 1000));
    std::memcpy(c, &d_.counter_init, 8);
    a.checked.skipped_tokens = c;
    d_.counter_buffer = int(d_.buffers.size()) - 1;
  }
}

void Builder::build_inputs() {
  Arguments& a = d_.args;
  const DType dt = s_.in;
  const std::size_t es = ropekv::size_of(dt);
  const std::int64_t n = s_.nnz, rows = std::max<std::int64_t>(n, 1), R = s_.rdim, N = s_.ndim,
                     D = s_.head_dim();
  const std::int64_t pad = s_.in_token_pad;
  if (!s_.mla()) {
    const std::int64_t hq = s_.hq, hk = s_.hk, dv = s_.vdim;
    if (s_.fused_inputs) {
      const std::int64_t ts = (hq + 2 * hk) * D + pad;
      void* base = add("qkv", Role::kInput, rows * ts, es);
      const ropekv::QkvViews v =
          ropekv::fused_qkv_views(base, dt, n, hq, hk, D, R, pad > 0 ? ts : 0);
      a.q_rope = view3(base, dt, 0, n, hq, R, ts, D);
      a.q_nope = view3(base, dt, R, n, hq, N, ts, D);
      a.k_rope = view3(base, dt, hq * D, n, hk, R, ts, D);
      a.k_nope = view3(base, dt, hq * D + R, n, hk, N, ts, D);
      a.v = view3(base, dt, (hq + hk) * D, n, hk, D, ts, D);
      check_helper("fused_qkv_views.q_rope", v.q_rope, a.q_rope);
      check_helper("fused_qkv_views.q_nope", v.q_nope, a.q_nope);
      check_helper("fused_qkv_views.k_rope", v.k_rope, a.k_rope);
      check_helper("fused_qkv_views.k_nope", v.k_nope, a.k_nope);
      check_helper("fused_qkv_views.v", v.v, a.v);
    } else {
      void* q = add("q", Role::kInput, rows * (hq * D + pad), es);
      void* k = add("k", Role::kInput, rows * (hk * D + pad), es);
      void* v = add("v", Role::kInput, rows * (hk * dv + pad), es);
      a.q_rope = view3(q, dt, 0, n, hq, R, hq * D + pad, D);
      a.q_nope = view3(q, dt, R, n, hq, N, hq * D + pad, D);
      a.k_rope = view3(k, dt, 0, n, hk, R, hk * D + pad, D);
      a.k_nope = view3(k, dt, R, n, hk, N, hk * D + pad, D);
      a.v = view3(v, dt, 0, n, hk, dv, hk * dv + pad, dv);
      if (pad == 0) {
        const ropekv::HeadViews qh = ropekv::split_heads(q, dt, n, hq, D, R);
        const ropekv::HeadViews kh = ropekv::split_heads(k, dt, n, hk, D, R);
        check_helper("split_heads(q).rope", qh.rope, a.q_rope);
        check_helper("split_heads(q).nope", qh.nope, a.q_nope);
        check_helper("split_heads(k).rope", kh.rope, a.k_rope);
        check_helper("split_heads(k).nope", kh.nope, a.k_nope);
      }
    }
    return;
  }
  // MLA: query rows [nope | rope] or [rope | nope]; key: latent (ckv) and rope (kpe).
  const std::int64_t hq = s_.hq;
  const std::int64_t qts = hq * D + pad;
  void* q = add("q", Role::kInput, rows * qts, es);
  const std::int64_t rope_off = s_.mla_q_nope_first ? N : 0;
  const std::int64_t nope_off = s_.mla_q_nope_first ? 0 : R;
  a.q_rope = view3(q, dt, rope_off, n, hq, R, qts, D);
  a.q_nope = view3(q, dt, nope_off, n, hq, N, qts, D);
  if (!s_.mla_q_nope_first && pad == 0) {
    const ropekv::HeadViews qh = ropekv::split_heads(q, dt, n, hq, D, R);
    check_helper("split_heads(q).rope", qh.rope, a.q_rope);
    check_helper("split_heads(q).nope", qh.nope, a.q_nope);
  }
  if (s_.fused_inputs) {  // DeepSeek's kv_a projection output [ckv | kpe]
    const std::int64_t ts = D + pad;
    void* kv = add("kv_a", Role::kInput, rows * ts, es);
    a.k_nope = view3(kv, dt, 0, n, 1, N, ts, D);
    a.k_rope = view3(kv, dt, N, n, 1, R, ts, D);
  } else {
    void* ckv = add("ckv", Role::kInput, rows * (N + pad), es);
    void* kpe = add("kpe", Role::kInput, rows * (R + pad), es);
    a.k_nope = view3(ckv, dt, 0, n, 1, N, N + pad, N);
    a.k_rope = view3(kpe, dt, 0, n, 1, R, R + pad, R);
  }
}

void Builder::build_query_output() {
  Arguments& a = d_.args;
  const DType dt = s_.q_out;
  const std::int64_t n = s_.nnz, rows = std::max<std::int64_t>(n, 1), hq = s_.hq, R = s_.rdim,
                     N = s_.ndim, D = s_.head_dim();
  const std::int64_t ts = hq * D + s_.q_out_token_pad;
  void* q = add("q_out", Role::kOutput, rows * ts, ropekv::size_of(dt));
  const bool nope_first = s_.mla() && s_.q_out_nope_first;
  a.q_rope_out = view3(q, dt, nope_first ? N : 0, n, hq, R, ts, D);
  a.q_nope_out = view3(q, dt, nope_first ? 0 : R, n, hq, N, ts, D);
  if (!nope_first && s_.q_out_token_pad == 0) {
    const ropekv::HeadViews h = ropekv::split_heads(q, dt, n, hq, D, R);
    check_helper("split_heads(q_out).rope", h.rope, a.q_rope_out);
    check_helper("split_heads(q_out).nope", h.nope, a.q_nope_out);
  }
}

// Paged caches: the helpers' views of the packed layout are checked against the
// layout's definition; padded variants add `page_pad` elements to the page
// stride (and `head_pad` between heads for kNhdPadded).
void Builder::build_cache() {
  Arguments& a = d_.args;
  const DType dt = s_.cache;
  const std::size_t es = ropekv::size_of(dt);
  const std::int64_t P = num_pages_, ps = s_.page_size, hk = s_.hk, R = s_.rdim, N = s_.ndim;
  const std::int64_t D = s_.head_dim(), dv = s_.vdim, pp = s_.page_pad;
  // Checked cases allocate a spare page of guard bytes after the views: a backend that
  // wrongly accepts page == P (the generator puts that boundary in) writes there.
  const std::int64_t Pa = P + (s_.checked ? 1 : 0);
  switch (s_.layout) {
    case Layout::kNhd:
    case Layout::kHnd: {
      const bool nhd = s_.layout == Layout::kNhd;
      void* k = add("k_cache", Role::kOutput, Pa * (ps * hk * D + pp), es);
      void* v = add("v_cache", Role::kOutput, Pa * (ps * hk * dv + pp), es);
      // [P, ps, Hk, D] or [P, Hk, ps, D]
      const std::int64_t ke = nhd ? hk * D : D, kh = nhd ? D : ps * D;
      const std::int64_t ve = nhd ? hk * dv : dv, vh = nhd ? dv : ps * dv;
      const ropekv::KvCacheViews c = nhd ? ropekv::nhd_kv_cache(k, v, dt, P, ps, hk, D, R)
                                         : ropekv::hnd_kv_cache(k, v, dt, P, ps, hk, D, R);
      const char* name = nhd ? "nhd_kv_cache" : "hnd_kv_cache";
      check_helper((std::string(name) + ".k_rope").c_str(), c.k_rope,
                   view4(k, dt, 0, P, ps, hk, R, ps * hk * D, ke, kh));
      check_helper((std::string(name) + ".k_nope").c_str(), c.k_nope,
                   view4(k, dt, R, P, ps, hk, N, ps * hk * D, ke, kh));
      if (dv == D) {
        check_helper((std::string(name) + ".v").c_str(), c.v,
                     view4(v, dt, 0, P, ps, hk, D, ps * hk * D, ke, kh));
      } else {  // a V cache of another head dim: the helper's V view for head_dim = Dv
        const ropekv::KvCacheViews cv = nhd ? ropekv::nhd_kv_cache(v, v, dt, P, ps, hk, dv, dv)
                                            : ropekv::hnd_kv_cache(v, v, dt, P, ps, hk, dv, dv);
        check_helper((std::string(name) + "(head_dim Dv).v").c_str(), cv.v,
                     view4(v, dt, 0, P, ps, hk, dv, ps * hk * dv, ve, vh));
      }
      a.k_cache_rope = view4(k, dt, 0, P, ps, hk, R, ps * hk * D + pp, ke, kh);
      a.k_cache_nope = view4(k, dt, R, P, ps, hk, N, ps * hk * D + pp, ke, kh);
      a.v_cache = view4(v, dt, 0, P, ps, hk, dv, ps * hk * dv + pp, ve, vh);
      break;
    }
    case Layout::kNhdPadded: {
      const std::int64_t hp = s_.head_pad;
      const std::int64_t kpage = ps * hk * (D + hp) + pp, vpage = ps * hk * (dv + hp) + pp;
      void* k = add("k_cache", Role::kOutput, Pa * kpage, es);
      void* v = add("v_cache", Role::kOutput, Pa * vpage, es);
      a.k_cache_rope = view4(k, dt, 0, P, ps, hk, R, kpage, hk * (D + hp), D + hp);
      a.k_cache_nope = view4(k, dt, R, P, ps, hk, N, kpage, hk * (D + hp), D + hp);
      a.v_cache = view4(v, dt, 0, P, ps, hk, dv, vpage, hk * (dv + hp), dv + hp);
      break;
    }
    case Layout::kStackedPageMajor:
    case Layout::kStackedKvMajor: {
      const bool pm = s_.layout == Layout::kStackedPageMajor;
      const std::int64_t block = ps * hk * D;  // one page of K (or V)
      void* kv =
          add("kv_cache", Role::kOutput, pm ? Pa * (2 * block + pp) : 2 * Pa * (block + pp), es);
      const ropekv::KvCacheViews c = ropekv::stacked_kv_cache(
          kv, pm ? ropekv::StackOrder::kPageMajor : ropekv::StackOrder::kKvMajor, dt, P, ps, hk, D,
          R);
      // [P, 2, ps, Hk, D] or [2, P, ps, Hk, D]
      const std::int64_t sp = pm ? 2 * block : block, v_off = pm ? block : P * block;
      const char* name = pm ? "stacked_kv_cache(page-major)" : "stacked_kv_cache(kv-major)";
      check_helper((std::string(name) + ".k_rope").c_str(), c.k_rope,
                   view4(kv, dt, 0, P, ps, hk, R, sp, hk * D, D));
      check_helper((std::string(name) + ".k_nope").c_str(), c.k_nope,
                   view4(kv, dt, R, P, ps, hk, N, sp, hk * D, D));
      check_helper((std::string(name) + ".v").c_str(), c.v,
                   view4(kv, dt, v_off, P, ps, hk, D, sp, hk * D, D));
      const std::int64_t psp = sp + pp, pv_off = pm ? block : P * (block + pp);
      a.k_cache_rope = view4(kv, dt, 0, P, ps, hk, R, psp, hk * D, D);
      a.k_cache_nope = view4(kv, dt, R, P, ps, hk, N, psp, hk * D, D);
      a.v_cache = view4(kv, dt, pv_off, P, ps, hk, D, psp, hk * D, D);
      break;
    }
    case Layout::kMlaSingle: {  // [P, ps, latent | rope]
      void* c = add("kv_cache", Role::kOutput, Pa * (ps * D + pp), es);
      const ropekv::KvCacheViews v = ropekv::mla_cache_single(c, dt, P, ps, N, R);
      check_helper("mla_cache_single.k_nope", v.k_nope, view4(c, dt, 0, P, ps, 1, N, ps * D, D, D));
      check_helper("mla_cache_single.k_rope", v.k_rope, view4(c, dt, N, P, ps, 1, R, ps * D, D, D));
      check_helper("mla_cache_single.v", v.v, TensorView{});
      a.k_cache_nope = view4(c, dt, 0, P, ps, 1, N, ps * D + pp, D, D);
      a.k_cache_rope = view4(c, dt, N, P, ps, 1, R, ps * D + pp, D, D);
      break;
    }
    case Layout::kMlaSplit: {  // ckv [P, ps, latent], kpe [P, ps, rope]
      void* ckv = add("ckv_cache", Role::kOutput, Pa * (ps * N + pp), es);
      void* kpe = add("kpe_cache", Role::kOutput, Pa * (ps * R + pp), es);
      const ropekv::KvCacheViews v = ropekv::mla_cache_split(ckv, kpe, dt, P, ps, N, R);
      check_helper("mla_cache_split.k_nope", v.k_nope,
                   view4(ckv, dt, 0, P, ps, 1, N, ps * N, N, N));
      check_helper("mla_cache_split.k_rope", v.k_rope,
                   view4(kpe, dt, 0, P, ps, 1, R, ps * R, R, R));
      a.k_cache_nope = view4(ckv, dt, 0, P, ps, 1, N, ps * N + pp, N, N);
      a.k_cache_rope = view4(kpe, dt, 0, P, ps, 1, R, ps * R + pp, R, R);
      break;
    }
  }
}

}  // namespace ropekv_test
