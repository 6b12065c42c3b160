// GPU timing of the perf suite: device buffers of (shape, nnz), a CUDA graph
// of back-to-back calls rotating over enough buffer sets to leave the L2,
// replayed and timed with events (median per call). See cuda_perf.hpp.
#include <cuda_runtime.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "cuda/launcher.hpp"
#include "cuda_perf.hpp"
#include "detail/lower.hpp"
#include "unfused.hpp"

namespace ropekv_perf {

namespace {

constexpr double kTargetWorkingSet = 240e6;  // bytes: 4x the H200's 60 MB L2
constexpr int kMinCalls = 100;               // calls per graph
constexpr int kMaxSets = 1000;               // buffer sets (= calls when above kMinCalls)
constexpr int kWarmupReplays = 2;
constexpr int kTimedReplays = 9;

std::string cuda_error(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}
#define PERF_CUDA_TRY(expr)           \
  do {                                \
    const cudaError_t e_ = (expr);    \
    if (e_ != cudaSuccess) {          \
      *error = cuda_error(#expr, e_); \
      return false;                   \
    }                                 \
  } while (0)

// Random bf16 values, never zero: the recipe of fill_random_bf16 (host).
__global__ void fill_bf16_kernel(std::uint16_t* data, std::int64_t n, std::uint64_t seed) {
  const std::int64_t chunks = (n + 3) / 4;
  for (std::int64_t c = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; c < chunks;
       c += std::int64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t h = fill_hash(seed, std::uint64_t(c));
    for (int k = 0; k < 4 && 4 * c + k < n; ++k) data[4 * c + k] = random_bf16(h >> (16 * k));
  }
}

std::size_t align_up(std::size_t n) { return (n + 255) & ~std::size_t(255); }

// A device allocation freed on destruction.
struct DeviceBuffer {
  void* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

// The device side of one (shape, nnz): `sets` copies of the input and output
// buffers (and the unfused scratch), one copy of the tables and indices.
struct DeviceProblem {
  std::string key;
  const Shape* shape = nullptr;
  Batch batch;
  Sizes sizes;
  int sets = 0;
  double set_bytes = 0;  // byte-model bytes of one call
  DeviceBuffer pool, shared;
  DeviceBuffer copy_src, copy_dst;  // kCopy: `sets` slices of copy_bytes each
  std::size_t copy_bytes = 0;
  std::vector<Buffers> bufs;
  std::vector<void*> q_rot, k_rot;
  std::vector<ropekv::Arguments> args[2];  // [0] slot mapping, [1] page table
  bool checked[2] = {false, false};        // fused output compared with the host backend

  ~DeviceProblem() { cudaDeviceSynchronize(); }
};

std::unique_ptr<DeviceProblem>& current() {
  static std::unique_ptr<DeviceProblem> p;
  return p;
}

bool build_problem(const Shape& s, std::int64_t nnz, DeviceProblem* dp, std::string* error) {
  dp->shape = &s;
  const std::uint64_t seed = std::hash<std::string>{}(dp->key);
  dp->batch = make_batch(s, nnz, seed);
  const Batch& bt = dp->batch;
  dp->sizes = sizes_of(s, bt);
  dp->set_bytes = model_bytes(s, nnz);
  dp->sets =
      int(std::min<double>(kMaxSets, std::max(1.0, std::ceil(kTargetWorkingSet / dp->set_bytes))));
  const Sizes& z = dp->sizes;
  const std::size_t in_b = align_up(std::size_t(z.in_elems) * 2);
  const std::size_t q_b = align_up(std::size_t(z.q_out_bytes));
  const std::size_t k_b = align_up(std::size_t(z.k_cache_bytes));
  const std::size_t v_b = align_up(std::size_t(z.v_cache_bytes));
  const std::size_t qr_b = align_up(std::size_t(z.q_rot_elems) * 2);
  const std::size_t kr_b = align_up(std::size_t(z.k_rot_elems) * 2);
  const std::size_t per_set = in_b + q_b + k_b + v_b + qr_b + kr_b;
  PERF_CUDA_TRY(cudaMalloc(&dp->pool.ptr, per_set * std::size_t(dp->sets)));
  PERF_CUDA_TRY(cudaMemset(dp->pool.ptr, 0, per_set * std::size_t(dp->sets)));
  // Shared by every set: the cos/sin table and both forms of the indices.
  const std::vector<float>& table = cos_sin_table(s.rotary, bt.max_pos);
  struct Part {
    const void* host;
    std::size_t bytes;
    std::size_t offset;
  };
  Part parts[] = {{table.data(), table.size() * sizeof(float), 0},
                  {bt.positions.data(), bt.positions.size() * 8, 0},
                  {bt.slots.data(), bt.slots.size() * 8, 0},
                  {bt.batch_indices.data(), bt.batch_indices.size() * 4, 0},
                  {bt.kv_positions.data(), bt.kv_positions.size() * 4, 0},
                  {bt.kv_indptr.data(), bt.kv_indptr.size() * 4, 0},
                  {bt.kv_indices.data(), bt.kv_indices.size() * 4, 0}};
  std::size_t shared_bytes = 0;
  for (Part& part : parts) {
    part.offset = shared_bytes;
    shared_bytes += align_up(part.bytes);
  }
  PERF_CUDA_TRY(cudaMalloc(&dp->shared.ptr, shared_bytes));
  char* sh = static_cast<char*>(dp->shared.ptr);
  for (const Part& part : parts)
    PERF_CUDA_TRY(cudaMemcpy(sh + part.offset, part.host, part.bytes, cudaMemcpyHostToDevice));
  char* base = static_cast<char*>(dp->pool.ptr);
  for (int i = 0; i < dp->sets; ++i) {
    char* b = base + per_set * std::size_t(i);
    Buffers buf;
    buf.in = b;
    buf.q_out = b + in_b;
    buf.k_cache = b + in_b + q_b;
    buf.v_cache = z.v_cache_bytes > 0 ? b + in_b + q_b + k_b : nullptr;
    buf.cos_sin = sh + parts[0].offset;
    buf.positions = sh + parts[1].offset;
    buf.slots = sh + parts[2].offset;
    buf.batch_indices = sh + parts[3].offset;
    buf.kv_positions = sh + parts[4].offset;
    buf.kv_indptr = sh + parts[5].offset;
    buf.kv_indices = sh + parts[6].offset;
    dp->bufs.push_back(buf);
    dp->q_rot.push_back(b + in_b + q_b + k_b + v_b);
    dp->k_rot.push_back(b + in_b + q_b + k_b + v_b + qr_b);
    dp->args[0].push_back(make_arguments(s, bt, buf, false));
    dp->args[1].push_back(make_arguments(s, bt, buf, true));
    fill_bf16_kernel<<<1024, 256>>>(static_cast<std::uint16_t*>(buf.in), z.in_elems,
                                    seed + std::uint64_t(i));
    PERF_CUDA_TRY(cudaGetLastError());
  }
  PERF_CUDA_TRY(cudaDeviceSynchronize());
  return true;
}

DeviceProblem* device_problem(const Shape& s, std::int64_t nnz, std::string* error) {
  const std::string key = s.name + "/" + std::to_string(nnz);
  std::unique_ptr<DeviceProblem>& cur = current();
  if (cur && cur->key == key) return cur.get();
  cur.reset();
  auto dp = std::make_unique<DeviceProblem>();
  dp->key = key;
  if (!build_problem(s, nnz, dp.get(), error)) return nullptr;
  cur = std::move(dp);
  return cur.get();
}

// Source and destination buffers of the same-size copy, made on first use.
bool ensure_copy_buffers(DeviceProblem& dp, std::string* error) {
  if (dp.copy_src.ptr != nullptr) return true;
  dp.copy_bytes = align_up(std::size_t(dp.set_bytes / 2));
  const std::size_t n = dp.copy_bytes * std::size_t(dp.sets);
  PERF_CUDA_TRY(cudaMalloc(&dp.copy_src.ptr, n));
  PERF_CUDA_TRY(cudaMalloc(&dp.copy_dst.ptr, n));
  PERF_CUDA_TRY(cudaMemset(dp.copy_src.ptr, 1, n));
  PERF_CUDA_TRY(cudaMemset(dp.copy_dst.ptr, 2, n));
  return true;
}

// ------------------------------------------------------------------ floor
// The floor of the op's dependent-load chain: block t, thread r takes output
// row r of token t (q heads, then k heads, then v heads) and does only what
// no version of the op can skip: load the token's index entries, then (not
// padding) its cos/sin value at the position and, for page tables,
// kv_indptr[b] then the page entry, then store one byte of the row.
struct FloorParams {
  const std::int64_t* slots;
  const std::int64_t* positions;
  const std::int32_t* batch_indices;
  const std::int32_t* kv_positions;
  const std::int32_t* kv_indptr;
  const std::int32_t* kv_indices;
  const float* cos_sin;
  std::uint8_t *q_out, *k_cache, *v_cache;
  std::int64_t q_token, q_head;  // bytes
  std::int64_t k_stride[3], v_stride[3];
  int rotary, page_shift, hq, hk, v_rows;
  bool page_table;
};

// The cache page and entry of a token (slot or batch index `key`, position `pos`).
__device__ __forceinline__ void floor_page(const FloorParams& f, std::int64_t key, std::int64_t pos,
                                           std::int64_t* page, std::int64_t* entry) {
  const std::int64_t mask = (std::int64_t(1) << f.page_shift) - 1;
  if (f.page_table) {
    *page = f.kv_indices[f.kv_indptr[key] + (pos >> f.page_shift)];
    *entry = pos & mask;
  } else {
    *page = key >> f.page_shift;
    *entry = key & mask;
  }
}

__global__ void floor_kernel(const FloorParams f) {
  const int row = int(threadIdx.x);
  const std::int64_t t = blockIdx.x;
  if (row >= f.hq + f.hk + f.v_rows) return;
  const std::int64_t key = f.page_table ? std::int64_t(f.batch_indices[t]) : f.slots[t];
  const std::int64_t pos = f.page_table ? std::int64_t(f.kv_positions[t]) : f.positions[t];
  if (key < 0) return;
  const float c = __ldg(f.cos_sin + pos * f.rotary + row % f.rotary);
  std::uint8_t* dst;
  if (row < f.hq) {
    dst = f.q_out + t * f.q_token + row * f.q_head;
  } else {
    std::int64_t page, entry;
    floor_page(f, key, pos, &page, &entry);
    const bool k = row < f.hq + f.hk;
    const int h = k ? row - f.hq : row - f.hq - f.hk;
    dst = k ? f.k_cache + page * f.k_stride[0] + entry * f.k_stride[1] + h * f.k_stride[2]
            : f.v_cache + page * f.v_stride[0] + entry * f.v_stride[1] + h * f.v_stride[2];
  }
  *dst = std::uint8_t(__float_as_uint(c));
}

// The data floor: the floor's chain with every byte of the op moved at the
// decode kernel's grain, and no arithmetic. Block (x, t), thread i takes
// 16-element unit u = x * blockDim.x + i of token t's rows (q heads, k heads:
// D elements each, then v heads: Dv): it loads the index entries, then (not
// padding) the unit's 32 input bytes and, for rotary units, its 8 cos and 8
// sin values (four 16-byte loads), and for cache rows the page entry; it XORs
// them together instead of rotating and quantizing, and stores 16 bytes (two
// 8-byte halves, as the op writes a unit) into q_out or the cache row.
struct DataFloorParams {
  const uint4* in;        // token t's units: in + t * in_units, 2 vectors a unit
  std::int64_t in_units;  // 16-element units per input row (its stride)
  std::uint8_t* k_row;    // a key's cache row (its first byte)
  int units, head_units, rot_units, q_units, kv_units;  // per token / head row
};

// (Both by value: a reference into a kernel parameter makes a local copy of it.)
__global__ void data_floor_kernel(const FloorParams f, const DataFloorParams d) {
  const int u = int(blockIdx.x * blockDim.x + threadIdx.x);
  const std::int64_t t = blockIdx.y;
  if (u >= d.units) return;
  const std::int64_t key = f.page_table ? std::int64_t(f.batch_indices[t]) : f.slots[t];
  const std::int64_t pos = f.page_table ? std::int64_t(f.kv_positions[t]) : f.positions[t];
  if (key < 0) return;
  const uint4* x = d.in + (t * d.in_units + u) * 2;
  const uint4 a = __ldg(x), b = __ldg(x + 1);
  const bool v_row = u >= d.q_units + d.kv_units;
  const int vu = u - d.q_units - d.kv_units;
  const int row = v_row ? vu / d.head_units : u / d.head_units;
  const int sub = v_row ? vu - row * d.head_units : u - row * d.head_units;
  uint4 c = make_uint4(0, 0, 0, 0), s = c;
  if (!v_row && sub < d.rot_units) {
    const uint4* cs = reinterpret_cast<const uint4*>(f.cos_sin + pos * f.rotary) + 2 * sub;
    const uint4 c0 = __ldg(cs), c1 = __ldg(cs + 1);
    const uint4 s0 = __ldg(cs + f.rotary / 8), s1 = __ldg(cs + f.rotary / 8 + 1);
    c = make_uint4(c0.x ^ c1.x, c0.y ^ c1.y, c0.z ^ c1.z, c0.w ^ c1.w);
    s = make_uint4(s0.x ^ s1.x, s0.y ^ s1.y, s0.z ^ s1.z, s0.w ^ s1.w);
  }
  std::uint8_t* dst;
  if (u < d.q_units) {
    dst = f.q_out + t * f.q_token + row * f.q_head;
  } else {
    std::int64_t page, entry;
    floor_page(f, key, pos, &page, &entry);
    const int h = v_row ? row : row - f.hq;
    dst = v_row ? f.v_cache + page * f.v_stride[0] + entry * f.v_stride[1] + h * f.v_stride[2]
                : d.k_row + page * f.k_stride[0] + entry * f.k_stride[1] + h * f.k_stride[2];
  }
  uint2* out = reinterpret_cast<uint2*>(dst) + 2 * sub;
  out[0] = make_uint2(a.x ^ a.z ^ c.x ^ s.x, a.y ^ a.w ^ c.y ^ s.y);
  out[1] = make_uint2(b.x ^ b.z ^ c.z ^ s.z, b.y ^ b.w ^ c.w ^ s.w);
}

// The move floor: what moving the op's q, k and v bytes alone costs in a
// kernel. Thread u takes 16-element unit u of the input buffer (the nnz
// tokens' rows: two 16-byte loads) and stores 16 bytes (the unit's sixteen
// one-byte codes' worth) at unit u of a contiguous output; no index, no
// cos/sin, no arithmetic but an XOR. With PDL it lets the next launch start at
// once and waits for the previous grid before its loads, which is all a call
// whose inputs the previous kernel writes can do before its data.
__global__ void move_kernel(const uint4* in, uint4* out, std::int64_t units) {
  namespace gpu = ropekv::detail::gpu;
  gpu::dependents_launch();
  gpu::dependency_wait();
  const std::int64_t u = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (u >= units) return;
  const uint4 a = __ldg(in + 2 * u), b = __ldg(in + 2 * u + 1);
  __stcs(out + u, make_uint4(a.x ^ b.x, a.y ^ b.y, a.z ^ b.z, a.w ^ b.w));
}

FloorParams floor_params(const ropekv::Arguments& a, const Shape& s) {
  FloorParams f = {};
  const ropekv::CacheIndex& ci = a.cache_index;
  f.page_table = ci.form == ropekv::Addressing::kPageTable;
  f.slots = static_cast<const std::int64_t*>(ci.slot_mapping.data);
  f.positions = static_cast<const std::int64_t*>(a.positions.data);
  f.batch_indices = static_cast<const std::int32_t*>(ci.batch_indices.data);
  f.kv_positions = static_cast<const std::int32_t*>(ci.kv_positions.data);
  f.kv_indptr = static_cast<const std::int32_t*>(ci.kv_indptr.data);
  f.kv_indices = static_cast<const std::int32_t*>(ci.kv_indices.data);
  f.cos_sin = static_cast<const float*>(a.cos_sin_cache.data);
  f.q_out = static_cast<std::uint8_t*>(a.q_rope_out.data);
  f.k_cache = static_cast<std::uint8_t*>(a.k_cache_rope.data);
  f.v_cache = static_cast<std::uint8_t*>(a.v_cache.data);
  f.q_token = a.q_rope_out.stride[0];
  f.q_head = a.q_rope_out.stride[1];
  for (int i = 0; i < 3; ++i) {
    f.k_stride[i] = a.k_cache_rope.stride[i];
    f.v_stride[i] = a.v_cache.present() ? a.v_cache.stride[i] : 0;
  }
  f.rotary = int(s.rotary);
  f.page_shift = 0;
  while ((std::int64_t(1) << f.page_shift) < s.page_size) ++f.page_shift;
  f.hq = int(s.hq);
  f.hk = int(s.hk);
  f.v_rows = a.v_cache.present() ? int(s.hk) : 0;
  return f;
}

// A failed launch's Result for error e (success: none).
ropekv::Result error_result(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return ropekv::Result{};
  ropekv::Result r;
  r.status = ropekv::Status::kErrorLaunchFailed;
  std::snprintf(r.message, sizeof r.message, "%s: %s", what, cudaGetErrorString(e));
  return r;
}
ropekv::Result launch_result(const char* what) { return error_result(what, cudaGetLastError()); }

ropekv::Result launch_data_floor(const ropekv::Arguments& a, const Shape& s, const Sizes& z,
                                 cudaStream_t stream) {
  const FloorParams f = floor_params(a, s);
  DataFloorParams d = {};
  d.in = static_cast<const uint4*>(a.q_rope.data);
  d.in_units = z.in_row / 16;
  d.k_row = f.k_cache;
  if (a.k_cache_nope.present())
    d.k_row = std::min(d.k_row, static_cast<std::uint8_t*>(a.k_cache_nope.data));
  d.head_units = int(s.head_dim() / 16);
  d.rot_units = int(s.rotary / 16);
  d.q_units = int(s.hq) * d.head_units;
  d.kv_units = int(s.hk) * d.head_units;
  d.units = d.q_units + d.kv_units + f.v_rows * int(s.v_dim / 16);
  const unsigned block = unsigned(std::min(128, (d.units + 31) / 32 * 32));
  const dim3 grid((unsigned(d.units) + block - 1) / block, unsigned(a.q_rope.extent[0]));
  data_floor_kernel<<<grid, block, 0, stream>>>(f, d);
  return launch_result("data floor kernel");
}

ropekv::Result launch_floor(const ropekv::Arguments& a, const Shape& s, cudaStream_t stream) {
  const FloorParams f = floor_params(a, s);
  const int rows = f.hq + f.hk + f.v_rows;
  floor_kernel<<<unsigned(a.q_rope.extent[0]), unsigned((rows + 31) / 32 * 32), 0, stream>>>(f);
  return launch_result("floor kernel");
}

ropekv::Result launch_move(DeviceProblem& dp, int set, bool pdl, cudaStream_t stream) {
  const uint4* in = static_cast<const uint4*>(dp.bufs[std::size_t(set)].in);
  uint4* out = reinterpret_cast<uint4*>(static_cast<char*>(dp.copy_dst.ptr) +
                                        dp.copy_bytes * std::size_t(set));
  std::int64_t units = dp.sizes.in_elems / 16;
  constexpr unsigned kBlock = 128;
  void* args[] = {&in, &out, &units};
  const cudaError_t e = ropekv::detail::gpu::launch(reinterpret_cast<const void*>(&move_kernel),
                                                    dim3(unsigned((units + kBlock - 1) / kBlock)),
                                                    dim3(kBlock), 0, stream, pdl, args);
  const cudaError_t last = cudaGetLastError();  // (cleared either way)
  return error_result("move kernel", e != cudaSuccess ? e : last);
}

// ------------------------------------------------------------------ calls
ropekv::Arguments case_arguments(const DeviceProblem& dp, int set, const GpuCase& c,
                                 cudaStream_t stream) {
  ropekv::Arguments a = dp.args[c.page_table ? 1 : 0][std::size_t(set)];
  a.stream = stream;
  a.programmatic_dependent_launch = c.pdl;
  a.indices_ready_before_previous_kernel = c.early;
  return a;
}

ropekv::Result call(DeviceProblem& dp, int set, const GpuCase& c, cudaStream_t stream) {
  if (c.kind == GpuKind::kCopy) {
    const std::size_t off = dp.copy_bytes * std::size_t(set);
    return error_result("cudaMemcpyAsync",
                        cudaMemcpyAsync(static_cast<char*>(dp.copy_dst.ptr) + off,
                                        static_cast<char*>(dp.copy_src.ptr) + off, dp.copy_bytes,
                                        cudaMemcpyDeviceToDevice, stream));
  }
  if (c.kind == GpuKind::kMove) return launch_move(dp, set, c.pdl, stream);
  const ropekv::Arguments a = case_arguments(dp, set, c, stream);
  if (c.kind == GpuKind::kFloor) return launch_floor(a, *dp.shape, stream);
  if (c.kind == GpuKind::kDataFloor) return launch_data_floor(a, *dp.shape, dp.sizes, stream);
  if (c.kind == GpuKind::kUnfused)
    return unfused_cuda(a, dp.q_rot[std::size_t(set)], dp.k_rot[std::size_t(set)]);
  return ropekv::run(a, ropekv::Backend::kCuda);
}

std::string message(const ropekv::Result& r) {
  return std::string(ropekv::to_string(r.status)) + ": " + r.message;
}

// The kernel path the launcher takes for a fused case.
std::string launch_path(const DeviceProblem& dp, const GpuCase& c) {
  namespace gpu = ropekv::detail::gpu;
  ropekv::detail::LaunchParams p;
  if (!ropekv::detail::lower(case_arguments(dp, 0, c, nullptr), &p).ok()) return "?";
  gpu::PreparedLaunch l;
  if (!gpu::prepare_launch(p, &l).ok()) return "?";
  return gpu::to_string(l.path);
}

// Runs set 0 once on zeroed outputs and, when the host backend is compiled
// and nnz is small, compares q_out and both caches byte for byte with the
// host backend on the same input (once per addressing form). The copy only
// gets its buffers.
bool check_output(DeviceProblem& dp, const GpuCase& c, cudaStream_t stream, std::string* label,
                  std::string* error) {
  if (c.kind == GpuKind::kCopy || c.kind == GpuKind::kMove) {
    *label = c.kind == GpuKind::kCopy ? "plain copy" : "moves the q, k, v bytes";
    if (!ensure_copy_buffers(dp, error)) return false;
    if (c.kind == GpuKind::kMove && dp.copy_bytes < std::size_t(dp.sizes.in_elems)) {
      *error = "move floor: the copy buffers are smaller than the input's element count";
      return false;
    }
    return true;
  }
  const Sizes& z = dp.sizes;
  const Buffers& b = dp.bufs[0];
  PERF_CUDA_TRY(cudaMemsetAsync(b.q_out, 0, std::size_t(z.q_out_bytes), stream));
  PERF_CUDA_TRY(cudaMemsetAsync(b.k_cache, 0, std::size_t(z.k_cache_bytes), stream));
  if (b.v_cache != nullptr)
    PERF_CUDA_TRY(cudaMemsetAsync(b.v_cache, 0, std::size_t(z.v_cache_bytes), stream));
  const ropekv::Result r = call(dp, 0, c, stream);
  if (!r.ok()) {
    *error = "first call failed: " + message(r);
    return false;
  }
  PERF_CUDA_TRY(cudaStreamSynchronize(stream));
  PERF_CUDA_TRY(cudaGetLastError());
  *label = "first call succeeded";
  if (c.kind != GpuKind::kFused && c.kind != GpuKind::kCpuRun) return true;
  bool& checked = dp.checked[c.page_table ? 1 : 0];
  if (checked) {
    *label = "bit-identical to host";
    return true;
  }
#if ROPEKV_ENABLE_KOKKOS && !defined(ROPEKV_EXPERIMENT_NO_MATH)
  if (dp.batch.nnz <= 1024) {
    std::vector<std::uint16_t> in(std::size_t(z.in_elems));
    std::vector<std::uint8_t> q(std::size_t(z.q_out_bytes)), kc(std::size_t(z.k_cache_bytes)),
        vc(std::size_t(z.v_cache_bytes));
    std::vector<std::uint8_t> q_ref(q.size(), 0), kc_ref(kc.size(), 0), vc_ref(vc.size(), 0);
    PERF_CUDA_TRY(cudaMemcpy(in.data(), b.in, in.size() * 2, cudaMemcpyDeviceToHost));
    PERF_CUDA_TRY(cudaMemcpy(q.data(), b.q_out, q.size(), cudaMemcpyDeviceToHost));
    PERF_CUDA_TRY(cudaMemcpy(kc.data(), b.k_cache, kc.size(), cudaMemcpyDeviceToHost));
    if (!vc.empty())
      PERF_CUDA_TRY(cudaMemcpy(vc.data(), b.v_cache, vc.size(), cudaMemcpyDeviceToHost));
    Batch& bt = dp.batch;
    Buffers hb;
    hb.in = in.data();
    hb.q_out = q_ref.data();
    hb.k_cache = kc_ref.data();
    hb.v_cache = vc_ref.empty() ? nullptr : vc_ref.data();
    hb.cos_sin = const_cast<float*>(cos_sin_table(dp.shape->rotary, bt.max_pos).data());
    hb.positions = bt.positions.data();
    hb.slots = bt.slots.data();
    hb.batch_indices = bt.batch_indices.data();
    hb.kv_positions = bt.kv_positions.data();
    hb.kv_indptr = bt.kv_indptr.data();
    hb.kv_indices = bt.kv_indices.data();
    const ropekv::Result hr =
        ropekv::run(make_arguments(*dp.shape, bt, hb, c.page_table), ropekv::Backend::kHost);
    if (!hr.ok()) {
      *error = "host reference failed: " + message(hr);
      return false;
    }
    std::size_t diff = 0;
    for (std::size_t i = 0; i < q.size(); ++i) diff += q[i] != q_ref[i];
    for (std::size_t i = 0; i < kc.size(); ++i) diff += kc[i] != kc_ref[i];
    for (std::size_t i = 0; i < vc.size(); ++i) diff += vc[i] != vc_ref[i];
    if (diff != 0) {
      *error = "output differs from the host backend in " + std::to_string(diff) + " of " +
               std::to_string(q.size() + kc.size() + vc.size()) + " bytes";
      return false;
    }
    *label = "bit-identical to host";
    checked = true;
    return true;
  }
#endif
  *label = "first call succeeded (output not compared)";
  return true;
}

// CPU work of a fixed length (a dependent chain the compiler cannot fold),
// about 0.1 µs: the control for launches spaced by a short host step.
void spin() {
  static volatile std::uint32_t seed = 1;
  std::uint32_t x = seed;
  for (int i = 0; i < 64; ++i) x = x * 1664525u + 1013904223u;
  seed = x;
}

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// A stream destroyed with its owner.
struct OwnedStream {
  cudaStream_t s = nullptr;
  ~OwnedStream() {
    if (s != nullptr) cudaStreamDestroy(s);
  }
};

// CPU time per call, no graph: the median over batches of calls (the stream
// drained between batches, so that no call waits for room in the launch
// queue). kCpuBareLaunch: a bare launch of the kernel run() launches.
// kCpuRun: run(), with, in the same rounds of batches (one batch of each in
// turn, the first variant of a round rotating, so that a drift of the shared
// host CPU and the place in a round hit all alike), the bare
// launch, the steps between and PreparedCall::run(): its counters are
// medians of the per-round differences. "moving": the calls alternate
// between two buffer sets of the same shape (every data pointer changes, as
// in an engine whose activations move between steps).
bool time_cpu(DeviceProblem& dp, const GpuCase& c, GpuTiming* out, std::string* error) {
  namespace gpu = ropekv::detail::gpu;
  namespace detail = ropekv::detail;
  constexpr int kRounds = 21, kPerBatch = 200;
  OwnedStream owned;
  PERF_CUDA_TRY(cudaStreamCreateWithFlags(&owned.s, cudaStreamNonBlocking));
  cudaStream_t stream = owned.s;
  GpuCase fused = c;
  fused.kind = GpuKind::kFused;
  if (!check_output(dp, fused, stream, &out->check, error)) return false;
  const ropekv::Arguments a = case_arguments(dp, 0, c, stream);
  const ropekv::Arguments a1 = case_arguments(dp, dp.sets > 1 ? 1 : 0, c, stream);
  const ropekv::Arguments* moving[2] = {&a, &a1};
  gpu::PreparedLaunch l, l1;
  detail::LaunchParams p, p1;
  ropekv::PreparedCall prepared(ropekv::Backend::kCuda), prepared_moving(ropekv::Backend::kCuda);
  std::unique_ptr<detail::StepPlan, void (*)(detail::StepPlan*)> plan(detail::new_step_plan(),
                                                                      &detail::delete_step_plan);
  if (!detail::lower(a, &p).ok() || !gpu::prepare_launch(p, &l).ok() ||
      !detail::lower(a1, &p1).ok() || !gpu::prepare_launch(p1, &l1).ok() ||
      !prepared.prepare(a).ok() || !prepared_moving.prepare(a).ok() || plan == nullptr) {
    *error = "lowering or preparing the launch failed";
    return false;
  }
  detail::fill_step_plan(plan.get(), a);
  const detail::BackendOps* gpu_ops = detail::find_backend(ropekv::Backend::kCuda);
  const gpu::PreparedLaunch* bare_moving[2] = {&l, &l1};
  out->path = gpu::to_string(l.path);
  enum Variant {
    kBare,
    kDecide,
    kLower,
    kRun,
    kStepCheck,
    kStepLower,
    kStateLaunch,
    kPrepared,
    kPreparedMoving,
    kBareMoving,  // the bare launches a moving prepared call makes: the two sets in turn
    kSpin,        // the control's CPU work alone: about as long as a repeated step's check
    kSpinLaunch,  // that work, then the bare launch: a launch spaced as in kStepLower
    kVariants
  };
  const int variants = c.kind == GpuKind::kCpuRun ? kVariants : 1;
  std::vector<double> us[kVariants];
  for (int round = 0; round < kRounds + 1; ++round) {
    for (int k = 0; k < variants; ++k) {
      const int v = (k + round) % variants;  // each variant in each place of a round alike
      bool ok = true;
      const double t0 = thread_cpu_seconds();
      for (int i = 0; i < kPerBatch && ok; ++i) {
        switch (v) {
          case kBare: ok = gpu::launch_prepared(l) == cudaSuccess; break;
          case kDecide: {
            gpu::PreparedLaunch l2;
            ok = gpu::prepare_launch(p, &l2).ok() && gpu::launch_prepared(l2) == cudaSuccess;
            break;
          }
          case kLower: {
            detail::LaunchParams p2;
            gpu::PreparedLaunch l2;
            ok = detail::lower(a, &p2).ok() && gpu::prepare_launch(p2, &l2).ok() &&
                 gpu::launch_prepared(l2) == cudaSuccess;
            break;
          }
          case kRun: ok = ropekv::run(a, ropekv::Backend::kCuda).ok(); break;
          case kStepCheck:
            ok = detail::validate_step(*plan, a) && gpu::launch_prepared(l) == cudaSuccess;
            break;
          case kStepLower:
            ok = detail::lower_step(*plan, a) && gpu::launch_prepared(l) == cudaSuccess;
            break;
          case kStateLaunch: ok = gpu_ops->launch(plan->lowered, &plan->launch_state).ok(); break;
          case kPrepared: ok = prepared.run(a).ok() && prepared.last_run_was_step(); break;
          case kPreparedMoving:
            ok = prepared_moving.run(*moving[i & 1]).ok() && prepared_moving.last_run_was_step();
            break;
          case kBareMoving: ok = gpu::launch_prepared(*bare_moving[i & 1]) == cudaSuccess; break;
          case kSpin: spin(); break;
          case kSpinLaunch:
            spin();
            ok = gpu::launch_prepared(l) == cudaSuccess;
            break;
        }
      }
      const double t1 = thread_cpu_seconds();
      if (!ok) {
        *error = "a timed call failed (or a prepared call did not take the step path)";
        return false;
      }
      PERF_CUDA_TRY(cudaStreamSynchronize(stream));
      PERF_CUDA_TRY(cudaGetLastError());
      if (round > 0) us[v].push_back((t1 - t0) / kPerBatch * 1e6);  // round 0 warms up
    }
  }
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  // Median over rounds of (variant hi - variant lo).
  auto step = [&](int hi, int lo) {
    std::vector<double> d;
    for (std::size_t r = 0; r < us[hi].size(); ++r) d.push_back(us[hi][r] - us[lo][r]);
    return median(d);
  };
  const int main_variant = c.kind == GpuKind::kCpuRun ? kRun : kBare;
  const std::vector<double>& m = us[main_variant];
  out->us_per_call = median(m);
  out->spread_pct =
      100.0 * (*std::max_element(m.begin(), m.end()) - *std::min_element(m.begin(), m.end())) /
      out->us_per_call;
  if (c.kind == GpuKind::kCpuRun) {
    out->counters = {
        {"launch_us", median(us[kBare])},
        {"decide_us", step(kDecide, kBare)},
        {"lower_us", step(kLower, kDecide)},
        {"api_us", step(kRun, kLower)},
        {"cpu_over_launch_us", step(kRun, kBare)},
        {"step_check_us", step(kStepCheck, kBare)},
        {"step_lower_us", step(kStepLower, kStepCheck)},
        {"state_decide_us", step(kStateLaunch, kBare)},
        {"prepared_us", median(us[kPrepared])},
        {"prepared_over_launch_us", step(kPrepared, kBare)},
        {"prepared_moving_over_launch_us", step(kPreparedMoving, kBare)},
        {"moving_launch_over_launch_us", step(kBareMoving, kBare)},
        {"prepared_moving_over_moving_launch_us", step(kPreparedMoving, kBareMoving)},
        {"moving_sets", dp.sets > 1 ? 2.0 : 1.0},
        {"spin_us", median(us[kSpin])},
        {"spaced_launch_over_launch_us", step(kSpinLaunch, kBare) - median(us[kSpin])}};
  }
  out->working_set_mb = dp.set_bytes / 1e6;
  out->sets = 1;
  out->calls = kPerBatch;
  out->replays = kRounds;
  out->check = "CPU time per call, no graph; " + out->check;
  return true;
}

bool time_graph(DeviceProblem& dp, const GpuCase& c, GpuTiming* out, std::string* error) {
  if (c.kind == GpuKind::kCpuRun || c.kind == GpuKind::kCpuBareLaunch)
    return time_cpu(dp, c, out, error);
  OwnedStream owned;
  PERF_CUDA_TRY(cudaStreamCreateWithFlags(&owned.s, cudaStreamNonBlocking));
  cudaStream_t stream = owned.s;
  std::string label;
  if (!check_output(dp, c, stream, &label, error)) return false;
  if (c.kind == GpuKind::kFused) out->path = launch_path(dp, c);

  const int sets = c.hot ? 1 : dp.sets;
  const int calls = std::max(kMinCalls, sets);
  cudaGraph_t graph = nullptr;
  PERF_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  ropekv::Result failed;
  for (int i = 0; i < calls && failed.ok(); ++i) failed = call(dp, i % sets, c, stream);
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  struct GraphGuard {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t e = nullptr;
    ~GraphGuard() {
      if (e != nullptr) cudaGraphExecDestroy(e);
      if (g != nullptr) cudaGraphDestroy(g);
    }
  } graph_guard{graph, nullptr};
  if (!failed.ok()) {
    cudaGetLastError();
    *error = "call during capture failed: " + message(failed);
    return false;
  }
  if (end != cudaSuccess) {
    *error = cuda_error("cudaStreamEndCapture", end);
    return false;
  }
  PERF_CUDA_TRY(cudaGetLastError());
  PERF_CUDA_TRY(cudaGraphInstantiate(&graph_guard.e, graph, 0));

  cudaEvent_t start = nullptr, stop = nullptr;
  PERF_CUDA_TRY(cudaEventCreate(&start));
  PERF_CUDA_TRY(cudaEventCreate(&stop));
  struct EventGuard {
    cudaEvent_t a, b;
    ~EventGuard() {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  } event_guard{start, stop};
  for (int i = 0; i < kWarmupReplays; ++i) PERF_CUDA_TRY(cudaGraphLaunch(graph_guard.e, stream));
  PERF_CUDA_TRY(cudaStreamSynchronize(stream));
  PERF_CUDA_TRY(cudaGetLastError());
  std::vector<double> ms;
  for (int i = 0; i < kTimedReplays; ++i) {
    PERF_CUDA_TRY(cudaEventRecord(start, stream));
    PERF_CUDA_TRY(cudaGraphLaunch(graph_guard.e, stream));
    PERF_CUDA_TRY(cudaEventRecord(stop, stream));
    PERF_CUDA_TRY(cudaEventSynchronize(stop));
    float t = 0;
    PERF_CUDA_TRY(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(double(t));
  }
  PERF_CUDA_TRY(cudaGetLastError());
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  out->us_per_call = median * 1e3 / calls;
  out->spread_pct = median > 0 ? 100.0 * (sorted.back() - sorted.front()) / median : 0.0;
  out->working_set_mb = dp.set_bytes * sets / 1e6;
  out->sets = sets;
  out->calls = calls;
  out->replays = kTimedReplays;
  out->check = label;
  return true;
}

}  // namespace

bool cuda_present(std::string* description) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    *description = e != cudaSuccess ? cuda_error("cudaGetDeviceCount", e) : "no CUDA device";
    cudaGetLastError();
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    *description = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                   std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) +
                   " SMs, " + std::to_string(prop.l2CacheSize >> 20) + " MiB L2)";
  }
  if (!ropekv::backend_available(ropekv::Backend::kCuda)) {
    *description += ": ropekv's CUDA backend reports no device";
    return false;
  }
  return true;
}

double cuda_copy_gbps(std::string* error) {
  const std::size_t n = std::size_t(1) << 30;
  DeviceBuffer a, b;
  cudaError_t e = cudaMalloc(&a.ptr, n);
  if (e == cudaSuccess) e = cudaMalloc(&b.ptr, n);
  if (e == cudaSuccess) e = cudaMemset(a.ptr, 1, n);
  if (e == cudaSuccess) e = cudaMemset(b.ptr, 2, n);
  cudaStream_t s = nullptr;
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  if (e == cudaSuccess) e = cudaEventCreate(&t0);
  if (e == cudaSuccess) e = cudaEventCreate(&t1);
  std::vector<double> ms;
  for (int i = 0; i < 10 && e == cudaSuccess; ++i) {
    e = cudaEventRecord(t0, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(b.ptr, a.ptr, n, cudaMemcpyDeviceToDevice, s);
    if (e == cudaSuccess) e = cudaEventRecord(t1, s);
    if (e == cudaSuccess) e = cudaEventSynchronize(t1);
    float t = 0;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&t, t0, t1);
    if (i > 0) ms.push_back(double(t));  // the first is a warm-up
  }
  if (t0 != nullptr) cudaEventDestroy(t0);
  if (t1 != nullptr) cudaEventDestroy(t1);
  if (s != nullptr) cudaStreamDestroy(s);
  if (e != cudaSuccess) {
    *error = cuda_error("device-to-device copy", e);
    return -1;
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * double(n) / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

std::string case_name(const GpuCase& c) {
  std::string n = "cuda";
  switch (c.kind) {
    case GpuKind::kFused: break;
    case GpuKind::kUnfused: n += "-unfused"; break;
    case GpuKind::kFloor: n += "-floor"; break;
    case GpuKind::kDataFloor: n += "-datafloor"; break;
    case GpuKind::kCopy: n += "-copy"; break;
    case GpuKind::kMove: n += "-move"; break;
    case GpuKind::kCpuRun: n += "-cpu-run"; break;
    case GpuKind::kCpuBareLaunch: n += "-cpu-launch"; break;
  }
  if (c.hot) n += "-hot";
  if (c.pdl) n += c.early ? "-pdl-early" : "-pdl";
  if (c.page_table) n += "-pt";
  return n;
}

GpuTiming cuda_time(const Shape& s, std::int64_t nnz, const GpuCase& c) {
  GpuTiming t;
  DeviceProblem* dp = device_problem(s, nnz, &t.error);
  if (dp == nullptr) {
    current().reset();
    return t;
  }
  t.ok = time_graph(*dp, c, &t, &t.error);
  if (!t.ok) cudaGetLastError();
  return t;
}

void cuda_release() { current().reset(); }

bool set_cuda_tuning(const std::string& spec) {
  ropekv::detail::gpu::Tuning t;
  std::size_t i = 0;
  while (i < spec.size()) {
    const std::size_t comma = std::min(spec.find(',', i), spec.size());
    const std::string item = spec.substr(i, comma - i);
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = item.substr(0, eq);
    const int value = std::atoi(item.c_str() + eq + 1);
    if (key == "decode")
      t.decode = value;
    else if (key == "pdl_trigger")
      t.pdl_trigger = value;
    else if (key == "rows")
      t.rows = value;
    else if (key == "bulk")
      t.bulk = value;
    else if (key == "decode_warps")
      t.decode_warps = value;
    else
      return false;
    i = comma + 1;
  }
  ropekv::detail::gpu::set_tuning(t);
  return true;
}

}  // namespace ropekv_perf
