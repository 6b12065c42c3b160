// A user's program: includes the one public header, links ropekv::ropekv,
// prints the backends of this build of ropekv, validates one small valid call
// (host memory) on the host backend, or on the device backend of a build
// without one (validation needs no device), checks that a broken call is
// rejected with a message, and runs the valid call on the host backend when it
// is compiled (else checks that run() on a device backend without a device
// says so), and a prepared call's step by its fields. Exit status 0 on
// success, 1 on any failure.
#include <cstdint>
#include <cstdio>
#include <ropekv/ropekv.hpp>
#include <vector>

#if defined(ROPEKV_CONSUMER_CUDA)
int consumer_cuda_runtime_version();  // cuda_part.cu: the consumer's own CUDA code
#endif

namespace {

int failures = 0;

void check(bool ok, const char* what, const ropekv::Result& r) {
  std::printf("%-48s %s: %s%s%s\n", what, ok ? "ok  " : "FAIL", ropekv::to_string(r.status),
              r.message[0] ? " - " : "", r.message);
  if (!ok) ++failures;
}

}  // namespace

int main() {
  using namespace ropekv;
  std::printf("ropekv %d.%d.%d (config.hpp: KOKKOS=%d CUDA=%d HIP=%d)\n", ROPEKV_VERSION_MAJOR,
              ROPEKV_VERSION_MINOR, ROPEKV_VERSION_PATCH, ROPEKV_ENABLE_KOKKOS, ROPEKV_ENABLE_CUDA,
              ROPEKV_ENABLE_HIP);
  std::printf("backends compiled:");
  for (Backend b : {Backend::kHost, Backend::kCuda, Backend::kHip})
    if (backend_compiled(b))
      std::printf(" %s%s", to_string(b), backend_available(b) ? "" : "(no device)");
  std::printf("\n");
#if defined(ROPEKV_CONSUMER_CUDA)
  std::printf("consumer's own CUDA code: runtime version %d\n", consumer_cuda_runtime_version());
#endif
  // The generated header and the library agree on what was built.
  if (backend_compiled(Backend::kHost) != (ROPEKV_ENABLE_KOKKOS != 0) ||
      backend_compiled(Backend::kCuda) != (ROPEKV_ENABLE_CUDA != 0) ||
      backend_compiled(Backend::kHip) != (ROPEKV_ENABLE_HIP != 0)) {
    std::printf("FAIL: config.hpp and backend_compiled() disagree\n");
    ++failures;
  }

  // GQA, fp32 in, fp32 query out, e4m3fn NHD cache, slot mapping with one
  // padding token: nnz 4, Hq 2, Hk 1, D = R = 8, 4 pages of 4 entries.
  const std::int64_t nnz = 4, hq = 2, hk = 1, d = 8, r = 8, ps = 4, pages = 4, max_pos = 16;
  std::vector<float> qkv(nnz * (hq + 2 * hk) * d);
  for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = 0.25f * float(int(i % 13) - 6);
  std::vector<float> cos_sin(max_pos * r);
  for (std::int64_t p = 0; p < max_pos; ++p)
    for (std::int64_t i = 0; i < r / 2; ++i) {
      cos_sin[p * r + i] = p == 0 ? 1.0f : 0.6f;          // cos
      cos_sin[p * r + r / 2 + i] = p == 0 ? 0.0f : 0.8f;  // sin
    }
  std::vector<std::int32_t> positions = {0, 3, 7, 15};
  std::vector<std::int64_t> slots = {5, -1, 0, 15};  // token 1 is padding
  std::vector<float> q_out(nnz * hq * d, -7.0f);
  std::vector<std::uint8_t> k_cache(pages * ps * hk * d, 0xAB), v_cache(k_cache.size(), 0xAB);

  Arguments a;
  const QkvViews in = fused_qkv_views(qkv.data(), DType::kFloat32, nnz, hq, hk, d, r);
  a.q_rope = in.q_rope;
  a.k_rope = in.k_rope;
  a.v = in.v;
  a.q_rope_out = split_heads(q_out.data(), DType::kFloat32, nnz, hq, d, r).rope;
  const KvCacheViews c =
      nhd_kv_cache(k_cache.data(), v_cache.data(), DType::kFloat8E4M3FN, pages, ps, hk, d, r);
  a.k_cache_rope = c.k_rope;
  a.v_cache = c.v;
  const std::int64_t cs_ext[2] = {max_pos, r};
  a.cos_sin_cache = make_contiguous(cos_sin.data(), DType::kFloat32, 2, cs_ext);
  a.positions = make_vector(positions.data(), DType::kInt32, nnz);
  a.cache_index.slot_mapping = make_vector(slots.data(), DType::kInt64, nnz);
  a.k_scale = Scale::host(0.5f);
  a.v_scale = Scale::host(0.25f);

  const bool host = backend_compiled(Backend::kHost);
  const Backend target = host ? Backend::kHost : resolve_backend(Backend::kAuto);
  Result res = validate(a, target);
  check(res.ok(), "validate(valid call)", res);

  Arguments bad = a;
  bad.k_scale = Scale::host(-1.0f);
  res = validate(bad, target);
  check(res.status == Status::kErrorInvalidScale && res.message[0] != '\0',
        "validate(k_scale = -1) is rejected", res);

  // A prepared call's step by its fields (PreparedCall::run(const Step&)):
  // before anything is prepared, an error and nothing run (no device needed).
  PreparedCall call(target);
  const Step step = step_of(a);
  res = call.run(step);
  check(res.status == Status::kErrorInvalidArgument && !call.prepared(),
        "PreparedCall::run(step) unprepared is rejected", res);

  if (!host && !backend_available(target)) {
    res = run(a, target);
    check(res.status == Status::kErrorNoDevice, "run(valid call) without a device: no device", res);
  }

  if (host) {
    res = run(a, Backend::kHost);
    check(res.ok(), "run(valid call, host)", res);
    // Position 0 rotates by cos 1, sin 0: token 0's query comes out unchanged.
    bool same = true;
    for (std::int64_t i = 0; i < hq * d; ++i) same = same && q_out[i] == qkv[i];
    check(same, "host: token 0 query unchanged at position 0", res);
    // The padding token's query output is not written (guard value kept) ...
    bool guard = true;
    for (std::int64_t i = 0; i < hq * d; ++i) guard = guard && q_out[hq * d + i] == -7.0f;
    // ... and no cache slot that no token names is written.
    for (std::int64_t s = 0; s < pages * ps; ++s) {
      if (s == 5 || s == 0 || s == 15) continue;
      for (std::int64_t i = 0; i < hk * d; ++i)
        guard = guard && k_cache[s * hk * d + i] == 0xAB && v_cache[s * hk * d + i] == 0xAB;
    }
    check(guard, "host: guard values kept", res);
    // The same call prepared, then a step by its fields: the step path, the same bytes.
    const std::vector<float> q_once = q_out;
    res = call.prepare(a);
    check(res.ok(), "host: PreparedCall::prepare(valid call)", res);
    res = call.run(step);
    check(res.ok() && call.last_run_was_step() && q_out == q_once,
          "host: PreparedCall::run(step_of(a)) takes the step path", res);
  }

  std::printf("consumer: %s\n", failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}
