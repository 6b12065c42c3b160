// The GPU backend's launcher: picks the decode, vector (direct, staged,
// rows, bulk) or generic path (the kernels from cuda/kernel_table.hpp, the
// arithmetic from cuda/launch_geometry.hpp), sizes the grid from the
// device's multiprocessor count (read once per device), launches on the
// caller's stream and reports launch errors. One source for CUDA and HIP
// (hip/ compiles cuda/'s sources as HIP).
//
// Safe inside graph capture: no allocation, no synchronisation and no host
// read of device data happen during a call.
//
// Per-device state: every call reads the calling thread's current device
// (current_device) and never changes it; the caller's stream must belong to
// that device. Keyed by that device index:
//  * sm_count: the multiprocessor count, one atomic slot per device;
//  * resident_per_sm: blocks per multiprocessor per (kernel, block, device),
//    shared under a mutex, plus each thread's last answer (same key); its
//    miss also makes the dynamic shared-memory opt-in (cudaFuncSetAttribute
//    applies to the current device), which per (kernel, device) only rises;
//  * each thread's last launch decision, keyed by the device among all else
//    the decision reads (prepare_launch).
// The tuning overrides are process-wide (measurements only). Tested by
// tests/test_cuda_multidevice.cu.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

#include "backends/backend.hpp"
#include "cuda/kernel_table.hpp"
#include "cuda/launch_geometry.hpp"
#include "cuda/launcher.hpp"
#include "detail/result.hpp"

namespace ropekv {
namespace detail {
namespace gpu {
namespace {

constexpr int kMaxDevices = 64;
constexpr std::size_t kDefaultShared = 48 * 1024;  // dynamic shared memory without opt-in

std::atomic<int> g_tune_decode{0}, g_tune_trigger{0}, g_tune_bulk{0}, g_tune_rows{0},
    g_tune_decode_warps{0}, g_tune_flat_tables{0}, g_tune_flat_slots{0}, g_tune_rows_blocks{0},
    g_tune_rows_dynamic{0}, g_tune_rows_guided{0}, g_tune_flat_pair{0};

// A device attribute of `dev` (Query's), read from the device once;
// `fallback` where the query fails.
template <Error (*Query)(int, int*)>
int device_attribute(int dev, int fallback) {
  static std::atomic<int> cache[kMaxDevices] = {};
  if (dev < 0 || dev >= kMaxDevices) return fallback;
  int n = cache[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (Query(dev, &n) != kSuccess || n <= 0) {
      (void)last_error();  // not left for the caller's next query
      n = fallback;
    }
    cache[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}
int sm_count(int dev) { return device_attribute<multiprocessor_count>(dev, 132); }
int l2_bytes(int dev) { return device_attribute<l2_cache_bytes>(dev, 50 << 20); }
// The device memory's peak bytes a second per multiprocessor (double data
// rate); 0 where the device does not say.
double dram_bytes_per_sm(int dev) {
  const int khz = device_attribute<memory_clock_khz>(dev, -1);
  const int bits = device_attribute<memory_bus_bits>(dev, -1);
  if (khz <= 0 || bits <= 0) return 0;
  return 2e3 * double(khz) * double(bits / 8) / double(sm_count(dev));
}

// The occupancy cache of resident_per_sm: one entry per (kernel, block,
// device), in the order they were made; `shared` is the dynamic shared
// memory `kernel` may use on `dev` when the entry was made.
struct ResidentEntry {
  const void* kernel;
  unsigned block;
  int dev, blocks;
  std::size_t shared;
};
struct ResidentCache {
  std::mutex mu;
  std::vector<ResidentEntry> entries;
};
ResidentCache& resident_cache() {
  static ResidentCache c;
  return c;
}

// Blocks of `block` threads of `kernel` (each with `smem` bytes of dynamic
// shared memory, allowed first where that is above the default) resident
// per multiprocessor, asked of the runtime once per (kernel, block, device)
// and cached; 0 if the kernel cannot run so. Host-side calls only (no
// device work, nothing on a stream), so it is safe during graph capture.
int resident_per_sm(const void* kernel, unsigned block, std::size_t smem, int dev) {
  // The calling thread's last answer first (an engine repeats its launches),
  // then the shared cache.
  thread_local ResidentEntry last = {nullptr, 0, -1, 0, 0};
  if (last.kernel == kernel && last.block == block && last.dev == dev) return last.blocks;
  ResidentCache& c = resident_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  // The opt-in is an attribute of (kernel, device), set for the device in
  // use: only ever raised, so that a smaller block's opt-in never takes
  // away what a cached larger block's launch needs.
  std::size_t shared = kDefaultShared;
  for (const ResidentEntry& e : c.entries) {
    if (e.kernel != kernel || e.dev != dev) continue;
    if (e.block == block) {
      last = e;
      return e.blocks;
    }
    if (e.shared > shared) shared = e.shared;
  }
  int n = 0;
  if (smem > shared) {
    if (allow_shared(kernel, smem) == kSuccess) shared = smem;
  }
  if (smem > shared || resident_blocks(kernel, int(block), smem, &n) != kSuccess || n < 0) {
    (void)last_error();
    n = 0;
  }
  c.entries.push_back(ResidentEntry{kernel, block, dev, n, shared});
  last = c.entries.back();
  return n;
}

unsigned grid_for(std::uint64_t work, unsigned block, int sms, unsigned per_sm) {
  const std::uint64_t want = (work + block - 1) / block;
  const std::uint64_t cap = std::uint64_t(sms) * per_sm;
  return unsigned(want < cap ? (want > 0 ? want : 1) : cap);
}

// [[maybe_unused]]: HIP's device passes see these but not their one user.
[[maybe_unused]] bool gpu_available() noexcept {
  int n = 0;
  const bool ok = device_count(&n) == kSuccess && n > 0;
  (void)last_error();  // clear the sticky "no device" error of a failed query
  return ok;
}

const PreparedLaunch* prepare_in_thread(const LaunchParams& p) noexcept;
const PreparedLaunch* prepare_in_state(const LaunchParams& p, LaunchState& state) noexcept;
Result no_current_device() {
  return make_result(Status::kErrorNoDevice, "%s backend: no current device", kVendorName);
}

[[maybe_unused]] Result gpu_launch(const LaunchParams& p, LaunchState* state) noexcept {
  const PreparedLaunch* l = state != nullptr ? prepare_in_state(p, *state) : prepare_in_thread(p);
  if (l == nullptr) return no_current_device();
  // The vendor launch reports this launch's errors itself (cuda/vendor.hpp,
  // hip/vendor.hpp): no second query on success.
  const Error err = launch_prepared(*l);
  if (err != kSuccess) {
    (void)last_error();  // the error is reported here, not left for the caller's next query
    return make_result(Status::kErrorLaunchFailed, "%s backend: kernel launch failed: %s",
                       kVendorName, error_string(err));
  }
  return Result{};
}

}  // namespace

const char* to_string(Path path) noexcept {
  switch (path) {
    case Path::kDecode: return "decode";
    case Path::kVector: return "vector";
    case Path::kStaged: return "staged";
    case Path::kBulk: return "bulk";
    case Path::kRows: return "rows";
    case Path::kGeneric: return "generic";
  }
  return "unknown";
}

const char* path_name(const PreparedLaunch& l) noexcept {
  if (l.path == Path::kRows && l.rows_dynamic) return "rows-dynamic";
  if (l.path == Path::kDecode && l.decode_flat)
    return l.decode_pair ? "decode-flat-pair" : "decode-flat";
  return to_string(l.path);
}

void set_tuning(const Tuning& t) noexcept {
  g_tune_decode.store(t.decode, std::memory_order_relaxed);
  g_tune_trigger.store(t.pdl_trigger, std::memory_order_relaxed);
  g_tune_bulk.store(t.bulk, std::memory_order_relaxed);
  g_tune_rows.store(t.rows, std::memory_order_relaxed);
  g_tune_decode_warps.store(t.decode_warps, std::memory_order_relaxed);
  g_tune_flat_tables.store(t.flat_tables, std::memory_order_relaxed);
  g_tune_flat_slots.store(t.flat_slots, std::memory_order_relaxed);
  g_tune_rows_blocks.store(t.rows_blocks, std::memory_order_relaxed);
  g_tune_rows_dynamic.store(t.rows_dynamic, std::memory_order_relaxed);
  g_tune_flat_pair.store(t.flat_pair, std::memory_order_relaxed);
  g_tune_rows_guided.store(t.rows_guided, std::memory_order_relaxed);
}
Tuning tuning() noexcept {
  Tuning t;
  t.decode = g_tune_decode.load(std::memory_order_relaxed);
  t.pdl_trigger = g_tune_trigger.load(std::memory_order_relaxed);
  t.bulk = g_tune_bulk.load(std::memory_order_relaxed);
  t.rows = g_tune_rows.load(std::memory_order_relaxed);
  t.decode_warps = g_tune_decode_warps.load(std::memory_order_relaxed);
  t.flat_tables = g_tune_flat_tables.load(std::memory_order_relaxed);
  t.flat_slots = g_tune_flat_slots.load(std::memory_order_relaxed);
  t.rows_blocks = g_tune_rows_blocks.load(std::memory_order_relaxed);
  t.rows_dynamic = g_tune_rows_dynamic.load(std::memory_order_relaxed);
  t.flat_pair = g_tune_flat_pair.load(std::memory_order_relaxed);
  t.rows_guided = g_tune_rows_guided.load(std::memory_order_relaxed);
  return t;
}

ResidentCacheProbe probe_resident_cache(const void* kernel, unsigned block, int dev) noexcept {
  ResidentCache& c = resident_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  ResidentCacheProbe probe;
  probe.entries = int(c.entries.size());
  for (std::size_t i = 0; i < c.entries.size(); ++i) {
    const ResidentEntry& e = c.entries[i];
    if (e.kernel == kernel && e.block == block && e.dev == dev) {
      probe.position = int(i);
      probe.shared = e.shared;
    }
  }
  return probe;
}

namespace {

// Beyond one wave of resident blocks the decode kernel (each block one token,
// its chain of loads not overlapped with another token's) still beats the
// vector kernels (whose teams pipeline tokens only where they have several)
// up to 24 tokens a multiprocessor, and up to 32 where that is at most four
// waves of its blocks (the TP8 shapes, whose tokens have few units)
// (perf/RESULTS.md; HIP takes the same rule, unmeasured).
constexpr std::uint64_t kDecodeTokensPerSm = 24, kDecodeFewWaves = 4,
                        kDecodeFewWavesTokensPerSm = 32;
// With PDL and early indices, page tables from this many tokens take the
// flat layout by role where the 2D grid fits at once (below).
constexpr std::int64_t kDecodeFlatEarlyTokens = 64;
constexpr int kFlatTablesL2s = 4;
// Slot mapping takes the page tables' flat rule too on devices whose peak
// DRAM bandwidth a multiprocessor is below this: the H100 SXM (25 GB/s a
// multiprocessor) 0.90-0.98 of the rows kernel's time at 4096-32768 tokens,
// the H200 (37 GB/s) up to 10% slower (perf/RESULTS.md; HIP takes the same
// rule, unmeasured).
constexpr double kFlatSlotsDramPerSm = 30e9;
bool low_dram_per_sm(int dev) {
  const double per_sm = dram_bytes_per_sm(dev);
  return per_sm > 0 && per_sm < kFlatSlotsDramPerSm;
}
// L2s of bytes up to which a launch takes the flat layout (0: none).
int flat_l2s(bool by_role, int dev, const Tuning& tune) {
  if (by_role) return tune.flat_tables != 0 ? tune.flat_tables : kFlatTablesL2s;
  if (tune.flat_slots != 0) return tune.flat_slots;
  return low_dram_per_sm(dev) ? kFlatTablesL2s : 0;
}
// The rows kernel's guided order on those devices: one wave of blocks takes
// all tokens but this share (%), which blocks of one token a team take as the
// wave's blocks finish, so that the multiprocessors that stream faster take
// more of them (a wave's teams finish up to 20% apart: perf/RESULTS.md). One
// wave alone elsewhere (the H200, not yet measured with it).
constexpr unsigned kRowsGuidedLowDram = 10;

// The launch decision for p on `dev`: path, kernel, grid, block, dynamic
// shared memory and geometry (not the call's own fields: stream, params,
// decode parameters).
void decide(const LaunchParams& p, int dev, const Tuning& tune, PreparedLaunch& l) {
  const int sms = sm_count(dev);
  l.smem = 0;
  l.geometry = VecGeometry{};
  l.decode_by_part = false;
  l.decode_flat = false;
  l.decode_stream = false;
  l.decode_pair = false;
  l.rows_dynamic = false;
  if (!vector_eligible(p)) {
    l.path = Path::kGeneric;
    l.kernel = reinterpret_cast<const void*>(pick_generic(p));
    l.grid = dim3(grid_for(std::uint64_t(p.nnz) * kGenericBlock, kGenericBlock, sms, 8));
    l.block = dim3(kGenericBlock);
    return;
  }
  bool staged = false;
  VecGeometry g = geometry(p, sms, &staged);
  // Decode: the one-unit-per-thread grid, where it is resident at once and
  // beyond, while it beats the vector kernels (kDecodeTokensPerSm,
  // kDecodeFewWaves).
  // The flat decode layout: the packed layout's units over a 1D grid of
  // blocks of 128 threads, or of decode_warps warps up to kVecBlock threads
  // (x = token * units + unit < 2^31, nnz < 2^24). Forced by tune.decode >= 2;
  // by the rules beyond one wave of the 2D grid and where the rows kernel's
  // teams would take one token each (below).
  const bool fits = decode_fits(p, g);
  bool flat_by_role = false;
  const void* flat_kernel =
      tune.decode >= 0 && p.nnz < (std::int64_t(1) << 24) &&
              flat_grid_fits(std::uint64_t(p.nnz) * g.units, unsigned(kVecBlock)) && fits
          ? pick_vec(VecFamily::kDecodeFlat, p, &flat_by_role)
          : nullptr;
  const bool forced_flat = tune.decode >= 2 && flat_kernel != nullptr;
  // flat_kernel, or with stream its twin whose inputs load evict-first; with
  // tune.flat_pair the kernel of two units a thread (where its grid's
  // indices fit).
  auto take_flat = [&](bool stream) {
    l.path = Path::kDecode;
    const unsigned block = tune.decode_warps > 0 ? 32u * std::min(unsigned(tune.decode_warps),
                                                                  unsigned(kVecBlock) / 32)
                                                 : 128u;
    const std::uint64_t units = std::uint64_t(p.nnz) * g.units;
    l.decode_pair = tune.flat_pair > 0 && flat_grid_fits(units, 2 * block);
    const unsigned per_block = l.decode_pair ? 2 * block : block;
    l.kernel =
        l.decode_pair
            ? pick_vec(stream ? VecFamily::kDecodeFlatPairStream : VecFamily::kDecodeFlatPair, p)
        : stream ? pick_vec(VecFamily::kDecodeFlatStream, p)
                 : flat_kernel;
    l.decode_flat = true;
    l.decode_stream = stream;
    l.decode_by_part = flat_by_role;  // packed or by role
    l.block = dim3(block);
    l.grid = dim3(unsigned((units + per_block - 1) / per_block));
    l.geometry = g;
  };
  if (tune.decode >= 0 && (p.nnz <= 65535 || forced_flat) && fits) {
    bool by_part = false;
    const void* kernel = pick_vec(VecFamily::kDecode, p, &by_part);
    const void* few = pick_vec(VecFamily::kDecodeFew, p);  // a 48-register kernel's twin
    const std::uint32_t hq = std::uint32_t(p.num_q_heads);
    DecodeLayout d = tune.decode_warps > 0
                         ? decode_layout(g, hq, by_part, unsigned(tune.decode_warps), true)
                         : decode_layout(g, hq, by_part);
    std::uint64_t blocks = std::uint64_t(d.chunks) * std::uint64_t(p.nnz);
    // Without PDL, at 4 or more blocks a multiprocessor: blocks of up to 8
    // warps, a token's warps spread evenly over them (fewer blocks, no idle
    // warps), where that grid fits at once too; for the 64-register kernels
    // (MLA's 48-register kernels, which have a twin, keep 4: not measured).
    // Not with PDL: there larger blocks hold back the next launch's blocks
    // (perf/RESULTS.md).
    if (tune.decode_warps == 0 && !p.pdl && blocks >= 4 * std::uint64_t(sms) && few == nullptr) {
      const DecodeLayout wide = decode_layout(g, hq, by_part, 8, true);
      const std::uint64_t wide_blocks = std::uint64_t(wide.chunks) * std::uint64_t(p.nnz);
      const int wide_per_sm = resident_per_sm(kernel, wide.block, 0, dev);
      if (wide_per_sm > 0 && wide_blocks <= std::uint64_t(wide_per_sm) * std::uint64_t(sms)) {
        d = wide;
        blocks = wide_blocks;
      }
    }
    // Packed or by role, with PDL and early indices: blocks of 2 warps while
    // those of 4 are fewer than 4 a multiprocessor, the only case where they
    // measured faster (perf/RESULTS.md).
    if ((!by_part || decode_by_role(g, by_part)) && p.pdl && p.early_indices &&
        blocks < 4 * std::uint64_t(sms)) {
      d = decode_layout(g, hq, by_part, 2);
      blocks = std::uint64_t(d.chunks) * std::uint64_t(p.nnz);
    }
    const int per_sm = resident_per_sm(kernel, d.block, 0, dev);
    const std::uint64_t wave = std::uint64_t(per_sm) * std::uint64_t(sms);
    const std::uint64_t nnz = std::uint64_t(p.nnz), sm = std::uint64_t(sms);
    const bool decode_wins =
        blocks <= wave || nnz <= kDecodeTokensPerSm * sm ||
        (nnz <= kDecodeFewWavesTokensPerSm * sm && blocks <= kDecodeFewWaves * wave);
    if (per_sm > 0 && ((tune.decode > 0 && tune.decode != 3) || decode_wins)) {
      // A 48-register kernel's 64-register twin where its grid fits at once
      // too: slightly faster there (perf/RESULTS.md).
      if (few != nullptr) {
        const int few_per_sm = resident_per_sm(few, d.block, 0, dev);
        if (few_per_sm > 0 && blocks <= std::uint64_t(few_per_sm) * std::uint64_t(sms))
          kernel = few;
      }
      l.path = Path::kDecode;
      l.kernel = kernel;
      l.decode_by_part = by_part;
      l.grid = dim3(d.chunks, unsigned(p.nnz));
      l.block = dim3(d.block);
      l.geometry = g;
      // Beyond one wave of this grid, the flat layout (no idle lanes, no
      // block per token) where it adds no page look-ups (slot mapping) or
      // where an eighth or more of a token's lanes here are idle (the TP8
      // shapes' page tables): 2048-4096 tokens 0.64-0.93 of the time
      // (perf/RESULTS.md); the wide shapes' page tables keep this grid
      // (flat by role 0.90-1.08 of its time by size and shape: no rule).
      const std::uint64_t lanes =
          32u * std::uint64_t(by_part ? d.warp_begin[kParts] : (g.units + 31) / 32);
      const bool idle_lanes = 8 * (lanes - g.units) >= lanes;  // (a block's unused warps exit)
      // With PDL and early indices, page tables (the flat kernel by role: their
      // fixed form) from kDecodeFlatEarlyTokens tokens flat within one wave
      // too (only the cache role's warps look pages up, no idle lanes): on the
      // H200 0.84-1.03 of this grid's time at 64 and 256 tokens, median 0.995;
      // at 8 tokens no gain (perf/RESULTS.md).
      const bool early_flat =
          p.pdl && p.early_indices && flat_by_role && p.nnz >= kDecodeFlatEarlyTokens;
      const bool rule_flat =
          tune.decode == 0 && flat_kernel != nullptr &&
          (blocks > wave ? p.addressing == Addressing::kSlotMapping || idle_lanes : early_flat);
      if (forced_flat || rule_flat) take_flat(tune.decode == 4);
      return;
    }
  }
  // Page tables past the decode kernel's 2D grid: the flat layout by role up
  // to kFlatTablesL2s L2s of bytes a launch (tune.flat_tables: N, or -1 never),
  // its inputs evict-first past one L2 (so that it keeps the index arrays,
  // cos/sin rows and cache lines): faster than the rows kernel there on the
  // H200 and the H100, slower beyond (perf/RESULTS.md). Slot mapping the same
  // (its packed layout) by flat_l2s's device rule (tune.flat_slots: N, or -1
  // never). (Not where an override asks for the rows or bulk kernels.)
  const int tables = flat_l2s(flat_by_role, dev, tune);
  if (tables > 0 && tune.rows <= 0 && tune.bulk == 0 && flat_kernel != nullptr) {
    const std::uint64_t bytes =
        std::uint64_t(p.nnz) * g.units * kItem * std::uint64_t(p.in.bytes + p.q_out.bytes);
    const std::uint64_t l2 = std::uint64_t(l2_bytes(dev));
    if (bytes <= std::uint64_t(tables) * l2) {
      take_flat(bytes > l2);
      return;
    }
  }
  // Vector kernels: at most one wave of resident blocks (the rows kernel's
  // guided order adds blocks of one token a team on some devices), teams
  // loop over tokens (and prefetch the next token's indices). Large launches take the
  // staged kernel where the vendor has asynchronous copies (and it fits).
  // Under PDL their blocks let the next kernel launch when they exit.
  g.early_trigger = tune.pdl_trigger > 0 ? 1u : 0u;
  if constexpr (kBulkCopy) {
    BulkPlan b;
    const std::uint32_t slot_max = tune.bulk > 1 ? std::uint32_t(tune.bulk) * 1024 : kBulkSlotMax;
    if (tune.bulk > 0 && bulk_plan(p, g.teams, slot_max, &b)) {
      const void* kernel = pick_vec(VecFamily::kBulk, p);
      const unsigned bulk_block = g.team * b.tokens;
      const std::size_t smem = bulk_shared_bytes(b);
      const int bulk_per_sm =
          bulk_copy_built(kernel) ? resident_per_sm(kernel, bulk_block, smem, dev) : 0;
      if (bulk_per_sm > 0) {
        l.path = Path::kBulk;
        l.kernel = kernel;
        l.smem = smem;
        l.bulk = b;
        l.grid = dim3(grid_for((std::uint64_t(p.nnz) + b.tokens - 1) / b.tokens, 1, sms,
                               unsigned(bulk_per_sm)));
        l.block = dim3(bulk_block);
        l.geometry = g;
        return;
      }
    }
  }
  // The rows kernel, where the vendor layer builds it: for the specialised
  // shapes without non-rotary parts launches past the decode kernel's whose
  // grid has a block for every other multiprocessor; for the others launches
  // beyond one wave whose grid has a block for every multiprocessor (with
  // fewer blocks slower). Beyond one wave, where the query's rotary units
  // take one round, the one-round kernel (perf/RESULTS.md).
  const bool no_nope = p.nope_dim == 0;
  if (tune.rows > 0 || (tune.rows == 0 && (staged || no_nope))) {
    const std::uint32_t team = rows_team(g, std::uint32_t(p.num_q_heads));
    const bool one_round =
        staged && no_nope && std::uint64_t(p.num_q_heads) * g.rot_sub <= kRowsQueryUnits * team;
    const void* kernel =
        one_round ? pick_vec(VecFamily::kRowsOneRound, p) : pick_vec(VecFamily::kRows, p);
    const int rows_per_sm = kernel != nullptr ? resident_per_sm(kernel, kVecBlock, 0, dev) : 0;
    const std::uint64_t blocks = (std::uint64_t(p.nnz) + kVecBlock / team - 1) / (kVecBlock / team);
    const std::uint64_t min_blocks = std::uint64_t(sms) / (no_nope ? 2 : 1);
    if (rows_per_sm > 0 && (tune.rows > 0 || blocks >= min_blocks)) {
      // A grid of at most one wave gives every team one token at most, with
      // few lanes in flight for the shapes of few heads (gpt-oss TP8 at 8192
      // tokens: 8 warps a multiprocessor): there the flat decode layout's
      // unit a thread is faster (perf/RESULTS.md).
      if (tune.rows == 0 && flat_kernel != nullptr &&
          blocks <= std::uint64_t(rows_per_sm) * std::uint64_t(sms)) {
        take_flat(false);
        return;
      }
      g.team = team;
      g.teams = kVecBlock / g.team;
      l.path = Path::kRows;
      l.kernel = kernel;
      unsigned grid = grid_for(blocks, 1, sms, unsigned(rows_per_sm));
      // The guided order's share of tokens (tune.rows_guided: N%, -1 none),
      // in blocks of one token a team past one wave that keeps one at least
      // (the fixed index forms: the run-time form's kernels keep one order).
      const unsigned guided = tune.rows_guided != 0
                                  ? unsigned(std::max(tune.rows_guided, 0))
                                  : (low_dram_per_sm(dev) ? kRowsGuidedLowDram : 0u);
      const std::uint64_t tail_blocks = std::uint64_t(p.nnz) * guided / 100 / g.teams;
      if (tune.rows_blocks > 0) {
        grid = unsigned(tune.rows_blocks);
      } else if (tune.rows_blocks < 0) {
        const std::uint64_t teams = g.teams, per_round = std::uint64_t(grid) * teams;
        const std::uint64_t rounds = (std::uint64_t(p.nnz) + per_round - 1) / per_round;
        grid = unsigned(((std::uint64_t(p.nnz) + rounds - 1) / rounds + teams - 1) / teams);
      } else if (tune.rows_dynamic == 0 && tail_blocks > 0 && fixed_index_form(p) &&
                 std::uint64_t(p.nnz) - tail_blocks * g.teams >= std::uint64_t(grid) * g.teams) {
        g.guided_blocks = grid;
        grid += unsigned(tail_blocks);
      }
      l.grid = dim3(grid);
      l.block = dim3(g.team * g.teams);
      // The dynamic token order (a measurement): tokens past each team's
      // third from the counter, where a team has at least tune.rows_dynamic.
      const std::uint64_t all_teams = std::uint64_t(grid) * g.teams;
      if (tune.rows_dynamic > 0 && std::uint64_t(p.nnz) > 3 * all_teams &&
          std::uint64_t(p.nnz) >= std::uint64_t(tune.rows_dynamic) * all_teams) {
        const void* dynamic =
            pick_vec(one_round ? VecFamily::kRowsOneRoundDynamic : VecFamily::kRowsDynamic, p);
        if (dynamic != nullptr) {
          l.kernel = dynamic;
          l.rows_dynamic = true;
        }
      }
      l.geometry = g;
      return;
    }
  }
  const unsigned block = g.team * g.teams;
  unsigned per_sm = 0;
  if constexpr (kAsyncCopy) {
    if (staged) {
      l.path = Path::kStaged;
      l.kernel = pick_vec(VecFamily::kStaged, p);
      l.smem = staged_shared_bytes(block);
      per_sm = unsigned(resident_per_sm(l.kernel, block, l.smem, dev));
    }
  }
  if (per_sm == 0) {
    l.path = Path::kVector;
    l.kernel = pick_vec(VecFamily::kDirect, p);
    l.smem = 0;
    per_sm = unsigned(resident_per_sm(l.kernel, block, 0, dev));
    if (per_sm == 0) per_sm = 1;
  }
  l.grid = dim3(grid_for((std::uint64_t(p.nnz) + g.teams - 1) / g.teams, 1, sms, per_sm));
  l.block = dim3(block);
  l.geometry = g;
}

// Everything decide() reads: equal keys, equal decisions (the data
// pointers enter only through vector_eligible's alignment verdict). No
// padding: keys compare as bytes.
struct DecisionKey {
  std::int64_t nnz, num_q_heads, num_kv_heads, rotary_dim, nope_dim, v_dim;
  std::int32_t dev, page_shift;
  std::int32_t in, q_out, cache, cos, addressing;
  std::uint32_t flags;    // vector-eligible, checked, the index arrays' widths, strides beyond
                          // 32 bits, PDL with early indices, PDL
  Tuning tune;            // every override, whole (an odd number of ints:
  std::int32_t tail = 0;  // this one keeps the key free of tail padding)
};
constexpr std::uint32_t kKeyWide = 2048, kKeyEarly = 4096, kKeyPdl = 8192;
static_assert(std::has_unique_object_representations_v<DecisionKey>,
              "DecisionKey must have no padding (compared with memcmp)");

DecisionKey decision_key(const LaunchParams& p, int dev, const Tuning& tune) {
  DecisionKey k;
  k.nnz = p.nnz;
  k.num_q_heads = p.num_q_heads;
  k.num_kv_heads = p.num_kv_heads;
  k.rotary_dim = p.rotary_dim;
  k.nope_dim = p.nope_dim;
  k.v_dim = p.v_dim;
  k.dev = dev;
  k.page_shift = p.page_shift;
  k.in = std::int32_t(p.in.dtype);
  k.q_out = std::int32_t(p.q_out.dtype);
  k.cache = std::int32_t(p.cache.dtype);
  k.cos = std::int32_t(p.cos.dtype);
  k.addressing = std::int32_t(p.addressing);
  k.flags = (vector_eligible(p) ? 1u : 0u) | (p.checked ? 2u : 0u) |
            (p.slot_mapping.i64 ? 4u : 0u) | (p.positions.i64 ? 8u : 0u) |
            (p.batch_indices.i64 ? 16u : 0u) | (p.kv_positions.i64 ? 32u : 0u) |
            (p.kv_indptr.i64 ? 64u : 0u) | (p.kv_indices.i64 ? 128u : 0u) |
            (strides_fit32(p) ? 0u : kKeyWide) | (p.pdl && p.early_indices ? kKeyEarly : 0u) |
            (p.pdl ? kKeyPdl : 0u);
  k.tune = tune;
  return k;
}

}  // namespace

namespace {

// The calling thread's current device; false (its error cleared) without one.
bool calling_device(int* dev) {
  if (current_device(dev) == kSuccess) return true;
  (void)last_error();
  return false;
}

// A decided launch's per-call fields from p: stream, parameters, and the
// decode parameters' data (with `shape`, their shape part too).
void fill_call(const LaunchParams& p, PreparedLaunch& l, bool shape) {
  l.stream = static_cast<Stream>(p.stream);
  l.pdl = p.pdl;
  l.params = &p;
  if (l.path != Path::kDecode) return;
  if (shape) fill_decode_shape(p, l.geometry, l.decode_by_part, l.decode_flat, l.decode);
  fill_decode_data(p, l.decode);
}

// The calling thread's launch of p: its last decision, reused for a call
// that decides alike (an engine repeats its shapes: every layer of a step),
// with this call's own fields filled in place. Valid until the thread's
// next call; null without a current device.
const PreparedLaunch* prepare_in_thread(const LaunchParams& p) noexcept {
  int dev = 0;
  if (!calling_device(&dev)) return nullptr;
  struct Last {
    bool valid = false;
    DecisionKey key;
    PreparedLaunch launch;
  };
  thread_local Last last;
  const Tuning tune = tuning();  // read once: the key and the decision see the same overrides
  const DecisionKey key = decision_key(p, dev, tune);
  PreparedLaunch& l = last.launch;
  if (!last.valid || std::memcmp(&key, &last.key, sizeof key) != 0) {
    decide(p, dev, tune, l);
    last.key = key;
    last.valid = true;
  }
  // The bulk kernel's plan reads the inputs' relative places, which the key
  // leaves out.
  if (l.path == Path::kBulk && !bulk_holds(p, l.bulk)) decide(p, dev, tune, l);
  fill_call(p, l, true);  // the decision's key leaves strides out: shape too
  return &l;
}

// Every override equal (a field added to Tuning is compared without a change here).
static_assert(std::has_unique_object_representations_v<Tuning>,
              "Tuning must have no padding (compared with memcmp)");
bool same_tuning(const Tuning& a, const Tuning& b) {
  return std::memcmp(&a, &b, sizeof(Tuning)) == 0;
}

// A caller's launch (LaunchState: its calls differ only in lower_data's
// fields): the kept decision while the token count, the device, the tuning
// and the alignment verdict stay, with only the step's data filled in;
// else decided and filled afresh. Null without a current device.
struct StateLaunch {
  std::int64_t nnz = 0;
  int dev = -1;
  Tuning tune;
  bool eligible = false;
  PreparedLaunch launch;
};
static_assert(sizeof(StateLaunch) <= LaunchState::kBytes && alignof(StateLaunch) <= 16,
              "StateLaunch must fit in LaunchState");
const PreparedLaunch* prepare_in_state(const LaunchParams& p, LaunchState& state) noexcept {
  int dev = 0;
  if (!calling_device(&dev)) return nullptr;
  const Tuning tune = tuning();
  const bool eligible = vector_eligible(p);
  if (!state.valid) new (state.bytes) StateLaunch;
  StateLaunch& s = *std::launder(reinterpret_cast<StateLaunch*>(state.bytes));
  PreparedLaunch& l = s.launch;
  bool decided = state.valid && s.nnz == p.nnz && s.dev == dev && same_tuning(s.tune, tune) &&
                 s.eligible == eligible;
  if (decided && l.path == Path::kBulk && !bulk_holds(p, l.bulk)) decided = false;
  if (!decided) {
    decide(p, dev, tune, l);
    s.nnz = p.nnz;
    s.dev = dev;
    s.tune = tune;
    s.eligible = eligible;
    state.valid = true;
  }
  fill_call(p, l, !decided);
  return &l;
}

}  // namespace

Result prepare_launch(const LaunchParams& p, PreparedLaunch* out, LaunchState* state) noexcept {
  const PreparedLaunch* l = state != nullptr ? prepare_in_state(p, *state) : prepare_in_thread(p);
  if (l == nullptr) return no_current_device();
  *out = *l;
  return Result{};
}

Error launch_prepared(const PreparedLaunch& l) noexcept {
  void* args[3] = {nullptr, nullptr, nullptr};
  switch (l.path) {
    case Path::kDecode: args[0] = const_cast<DecodeParams*>(&l.decode); break;
    case Path::kGeneric: args[0] = const_cast<LaunchParams*>(l.params); break;
    case Path::kBulk:
      args[0] = const_cast<LaunchParams*>(l.params);
      args[1] = const_cast<VecGeometry*>(&l.geometry);
      args[2] = const_cast<BulkPlan*>(&l.bulk);
      break;
    default:
      args[0] = const_cast<LaunchParams*>(l.params);
      args[1] = const_cast<VecGeometry*>(&l.geometry);
      break;
  }
  return launch(l.kernel, l.grid, l.block, l.smem, l.stream, l.pdl, args);
}

}  // namespace gpu

#if defined(ROPEKV_GPU_HIP)
#if !defined(__HIP_DEVICE_COMPILE__)  // a host object: not part of HIP's device passes
const BackendOps kHipBackendOps = {gpu::kBackendId, &gpu::gpu_available, &gpu::gpu_launch};
#endif
#else
const BackendOps kCudaBackendOps = {gpu::kBackendId, &gpu::gpu_available, &gpu::gpu_launch};
#endif

}  // namespace detail
}  // namespace ropekv
