// The grid suite's case data, its values: Builder's token roles, slots or page tables
// and positions, cos/sin table, scales and input values; build_case.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "grid_case.hpp"
#include "oracle.hpp"
#include "ropekv/ropekv.hpp"

namespace ropekv_test {
namespace {

void store(unsigned char* p, std::size_t bytes, std::uint64_t v) {
  switch (bytes) {
    case 1: *p = static_cast<unsigned char>(v); break;
    case 2: {
      const std::uint16_t h = static_cast<std::uint16_t>(v);
      std::memcpy(p, &h, 2);
      break;
    }
    case 4: {
      const std::uint32_t w = static_cast<std::uint32_t>(v);
      std::memcpy(p, &w, 4);
      break;
    }
    default: std::memcpy(p, &v, 8); break;
  }
}

unsigned char* at(const TensorView& v, std::int64_t i0, std::int64_t i1 = 0, std::int64_t i2 = 0) {
  const std::int64_t off =
      i0 * v.stride[0] + (v.rank > 1 ? i1 * v.stride[1] : 0) + (v.rank > 2 ? i2 * v.stride[2] : 0);
  return static_cast<unsigned char*>(v.data) + off * std::int64_t(ropekv::size_of(v.dtype));
}

}  // namespace

// Token roles, slots / page tables, positions.
void Builder::build_indices() {
  Arguments& a = d_.args;
  const std::int64_t n = s_.nnz, ps = s_.page_size;
  enum Kind { kValid, kPadding, kBad };
  std::vector<int> role(static_cast<std::size_t>(n), kValid);
  {
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    for (std::int64_t t = 0; t < n; ++t) order[std::size_t(t)] = t;
    for (std::int64_t t = n - 1; t > 0; --t)
      std::swap(order[std::size_t(t)], order[std::size_t(r_.range(0, t))]);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t t = order[std::size_t(i)];
      if (i < s_.num_bad)
        role[std::size_t(t)] = kBad;
      else if (r_.coin(s_.pad_fraction))
        role[std::size_t(t)] = kPadding;
    }
  }
  d_.expected_bad = s_.num_bad;
  // Checked mode's exact boundaries, put in deterministically rather than left to chance
  // draws: the case's j-th bad token (in token order), for j below the number of
  // boundaries of its addressing form, gets boundary (index + j) % that number, its other
  // indices valid, so that the boundary alone makes it bad. GridCoverage counts them in
  // the built cases. The random draws are made as before and then overridden.
  std::vector<int> boundary(static_cast<std::size_t>(n), -1);
  {
    const int kinds = s_.addressing == Addressing::kSlotMapping ? 2 : 4;
    int j = 0;
    for (std::int64_t t = 0; t < n && j < kinds; ++t)
      if (role[std::size_t(t)] == kBad) boundary[std::size_t(t)] = (s_.index + j++) % kinds;
  }
  auto negative = [&](DType dt) -> std::int64_t {  // a padding marker
    const std::int64_t k = r_.range(0, 3);
    if (k == 0) return -1;
    if (k == 1) return -r_.range(2, 1000);
    return dt == DType::kInt64 ? -(std::int64_t(1) << 40) - r_.range(0, 9) : INT32_MIN;
  };
  auto garbage = [&]() { return r_.range(-1000000, 1000000); };
  auto write_vector = [&](const char* name, DType dt, const std::vector<std::int64_t>& vals) {
    const std::size_t es = ropekv::size_of(dt);
    void* p = add(name, Role::kInput, std::int64_t(vals.size()), es);
    for (std::size_t i = 0; i < vals.size(); ++i)
      store(static_cast<unsigned char*>(p) + i * es, es, std::uint64_t(vals[i]));
    return ropekv::make_vector(p, dt, std::int64_t(vals.size()));
  };

  std::vector<std::int64_t> pos(static_cast<std::size_t>(n));
  std::int64_t max_pos = s_.max_pos;
  if (s_.addressing == Addressing::kSlotMapping) {
    std::int64_t valid = 0;
    for (int k : role) valid += k == kValid ? 1 : 0;
    num_pages_ = std::max<std::int64_t>(
        1, (valid + std::int64_t(double(valid) * r_.uniform()) + ps - 1) / ps + r_.range(0, 2));
    const std::int64_t slots_total = num_pages_ * ps;
    std::vector<std::int64_t> free_slots(static_cast<std::size_t>(slots_total));
    for (std::int64_t i = 0; i < slots_total; ++i) free_slots[std::size_t(i)] = i;
    std::int64_t used = 0;
    std::vector<std::int64_t> slot(static_cast<std::size_t>(n));
    for (std::int64_t t = 0; t < n; ++t) {
      const std::size_t ut = std::size_t(t);
      if (role[ut] == kValid) {  // a distinct slot: partial Fisher-Yates
        std::swap(free_slots[std::size_t(used)],
                  free_slots[std::size_t(r_.range(used, slots_total - 1))]);
        slot[ut] = free_slots[std::size_t(used++)];
        pos[ut] = r_.range(0, max_pos - 1);
      } else if (role[ut] == kPadding) {
        slot[ut] = negative(s_.slot_dtype);
        pos[ut] = garbage();
      } else {
        switch (r_.range(0, 2)) {
          case 0:  // page >= P
            slot[ut] = slots_total + r_.range(0, 3 * ps);
            pos[ut] = r_.range(0, max_pos - 1);
            break;
          case 1:  // position >= max_pos
            slot[ut] = r_.range(0, slots_total - 1);
            pos[ut] = max_pos + r_.range(0, 100);
            break;
          default:  // negative position
            slot[ut] = r_.range(0, slots_total - 1);
            pos[ut] = -r_.range(1, 100);
            break;
        }
        if (boundary[ut] == 0) {  // page == P: the first slot past the cache
          slot[ut] = slots_total;
          pos[ut] = max_pos - 1;
        } else if (boundary[ut] == 1) {  // position == max_pos, in the last slot
          slot[ut] = slots_total - 1;
          pos[ut] = max_pos;
        }
      }
    }
    a.cache_index.form = Addressing::kSlotMapping;
    a.cache_index.slot_mapping = write_vector("slot_mapping", s_.slot_dtype, slot);
    a.positions = write_vector("positions", s_.pos_dtype, pos);
  } else {
    // Sequences: a prefix already in the cache, then this call's tokens.
    const std::int64_t B = s_.num_seqs;
    std::vector<std::int64_t> seq_of(static_cast<std::size_t>(n), -1),
        count(static_cast<std::size_t>(B), 0), prefix(static_cast<std::size_t>(B)),
        pages(static_cast<std::size_t>(B));
    for (std::int64_t b = 0; b < B; ++b)
      prefix[std::size_t(b)] = r_.coin(0.3) ? 0 : r_.range(0, 80);
    std::vector<std::int64_t> kv_pos(static_cast<std::size_t>(n));
    for (std::int64_t t = 0; t < n; ++t) {
      if (role[std::size_t(t)] != kValid) continue;
      const std::int64_t b = r_.range(0, B - 1);
      seq_of[std::size_t(t)] = b;
      kv_pos[std::size_t(t)] = prefix[std::size_t(b)] + count[std::size_t(b)]++;
    }
    std::int64_t total = 0, max_len = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t len = prefix[std::size_t(b)] + count[std::size_t(b)];
      pages[std::size_t(b)] = (len + ps - 1) / ps;
      total += pages[std::size_t(b)];
      max_len = std::max(max_len, len);
    }
    // A poisoned sequence (page ids out of range) for some bad tokens; always when a
    // token has the page == P boundary (its first page id is P).
    bool poisoned = false, page_boundary = false;
    for (int k : role) poisoned = poisoned || k == kBad;
    for (int k : boundary) page_boundary = page_boundary || k == 2;
    poisoned = poisoned && (r_.coin(0.5) || page_boundary);
    num_pages_ = std::max<std::int64_t>(1, total + r_.range(0, 3));
    std::vector<std::int64_t> ids(static_cast<std::size_t>(num_pages_));
    for (std::int64_t i = 0; i < num_pages_; ++i) ids[std::size_t(i)] = i;
    for (std::int64_t i = num_pages_ - 1; i > 0; --i)
      std::swap(ids[std::size_t(i)], ids[std::size_t(r_.range(0, i))]);
    std::vector<std::int64_t> indices, indptr{0};
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t j = 0; j < pages[std::size_t(b)]; ++j)
        indices.push_back(ids[std::size_t(indptr.back() + j)]);
      indptr.push_back(indptr.back() + pages[std::size_t(b)]);
    }
    const std::int64_t poisoned_pages = poisoned ? r_.range(1, 2) : 0;
    for (std::int64_t j = 0; j < poisoned_pages; ++j) {
      const std::int64_t id = r_.coin(0.5) ? num_pages_ + r_.range(0, 5) : -1 - r_.range(0, 5);
      indices.push_back(j == 0 && page_boundary ? num_pages_ : id);
    }
    if (poisoned) indptr.push_back(indptr.back() + poisoned_pages);
    const std::int64_t batch = std::int64_t(indptr.size()) - 1;
    // For the boundary "kv position just past the sequence's pages": a sequence whose
    // next kv_indices entry is a valid page of a later sequence (so only kv_indptr[b + 1]
    // tells it is past the end), if there is one; and the longest sequence.
    std::int64_t past_b = B - 1, longest = 0;
    for (std::int64_t b = B - 1; b >= 0; --b)
      if (indptr[std::size_t(b + 1)] < total) past_b = b;
    for (std::int64_t b = 0; b < B; ++b)
      if (pages[std::size_t(b)] > pages[std::size_t(longest)]) longest = b;

    if (s_.kvpos_is_positions) max_pos = max_len + 1 + r_.range(0, 100);
    std::vector<std::int64_t> bidx(static_cast<std::size_t>(n));
    for (std::int64_t t = 0; t < n; ++t) {
      const std::size_t ut = std::size_t(t);
      if (role[ut] == kValid) {
        bidx[ut] = seq_of[ut];
        pos[ut] = s_.kvpos_is_positions ? kv_pos[ut] : r_.range(0, max_pos - 1);
      } else if (role[ut] == kPadding) {
        bidx[ut] = negative(s_.batch_dtype);
        kv_pos[ut] = garbage();
        pos[ut] = s_.kvpos_is_positions ? kv_pos[ut] : garbage();
      } else {
        const std::int64_t b = r_.range(0, B - 1);
        const std::int64_t kind = poisoned ? r_.range(0, 4) : r_.range(0, 3);
        const bool bad_rope_pos = kind == 3 && !s_.kvpos_is_positions;
        bidx[ut] = b;
        kv_pos[ut] = r_.range(0, std::max<std::int64_t>(pages[std::size_t(b)] * ps, 1) - 1);
        if (kind == 0 || (kind == 3 && !bad_rope_pos)) {
          bidx[ut] = batch + r_.range(0, 3);  // no such sequence
        } else if (kind == 1) {
          kv_pos[ut] = -r_.range(1, 50);  // negative position in the sequence
        } else if (kind == 2) {
          kv_pos[ut] = pages[std::size_t(b)] * ps + r_.range(0, 2 * ps);  // beyond its pages
        } else if (kind == 4) {
          bidx[ut] = batch - 1;  // the poisoned sequence
          kv_pos[ut] = r_.range(0, poisoned_pages * ps - 1);
        }
        if (s_.kvpos_is_positions) {
          pos[ut] = kv_pos[ut];
        } else {
          pos[ut] = bad_rope_pos ? (r_.coin(0.5) ? max_pos + r_.range(0, 100) : -r_.range(1, 100))
                                 : r_.range(0, max_pos - 1);
        }
        const std::int64_t valid_pos = s_.kvpos_is_positions ? 0 : max_pos - 1;
        switch (boundary[ut]) {
          case 0:  // batch index == batch: the first sequence past kv_indptr's end
            bidx[ut] = batch;
            kv_pos[ut] = 0;
            pos[ut] = valid_pos;
            break;
          case 1:  // the first kv position past the sequence's last page
            bidx[ut] = past_b;
            kv_pos[ut] = pages[std::size_t(past_b)] * ps;
            pos[ut] = s_.kvpos_is_positions ? kv_pos[ut] : valid_pos;
            break;
          case 2:  // page id == P (the poisoned sequence's first page)
            bidx[ut] = batch - 1;
            kv_pos[ut] = 0;
            pos[ut] = valid_pos;
            break;
          case 3:  // position == max_pos, at a valid page (where the table allows it)
            if (!s_.kvpos_is_positions && pages[std::size_t(longest)] > 0) {
              bidx[ut] = longest;
              kv_pos[ut] = 0;
              pos[ut] = max_pos;
            } else if (s_.kvpos_is_positions && pages[std::size_t(longest)] * ps > max_pos) {
              bidx[ut] = longest;
              kv_pos[ut] = pos[ut] = max_pos;
            }
            break;
          default: break;
        }
      }
    }
    a.cache_index.form = Addressing::kPageTable;
    a.cache_index.kv_indices = write_vector("kv_indices", s_.indices_dtype, indices);
    a.cache_index.kv_indptr = write_vector("kv_indptr", s_.indptr_dtype, indptr);
    a.cache_index.batch_indices = write_vector("batch_indices", s_.batch_dtype, bidx);
    if (s_.kvpos_is_positions) {
      a.positions = write_vector("positions", s_.pos_dtype, pos);
      a.cache_index.kv_positions = a.positions;
    } else {
      a.cache_index.kv_positions = write_vector("kv_positions", s_.kvpos_dtype, kv_pos);
      a.positions = write_vector("positions", s_.pos_dtype, pos);
    }
  }
  max_pos_ = max_pos;
}

void Builder::build_cos_sin() {
  Arguments& a = d_.args;
  const std::int64_t max_pos = max_pos_, R = s_.rdim, half = R / 2;
  const std::int64_t row = R + s_.cos_row_pad;
  const DType dt = s_.cos;
  const std::size_t es = ropekv::size_of(dt);
  // Checked cases: a spare row of garbage after the table, read (wrongly) only by a
  // backend that accepts position == max_pos.
  void* p = add("cos_sin_cache", Role::kInput, (max_pos + (s_.checked ? 1 : 0)) * row, es);
  for (std::int64_t pos = 0; pos < max_pos; ++pos) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double f = std::pow(s_.rope_base, -2.0 * double(i) / double(R));
      const double angle = double(pos) * f;
      unsigned char* rp = static_cast<unsigned char*>(p) + std::size_t(pos * row) * es;
      store(rp + std::size_t(i) * es, es, orc::encode(dt, std::cos(angle)));
      store(rp + std::size_t(half + i) * es, es, orc::encode(dt, std::sin(angle)));
    }
  }
  const std::int64_t e[2] = {max_pos, R};
  const std::int64_t st[2] = {row, 1};
  a.cos_sin_cache = ropekv::make_strided(p, dt, 2, e, st);
}

void Builder::build_scales() {
  Arguments& a = d_.args;
  float* dev = nullptr;
  if (s_.scale_on_device[0] || s_.scale_on_device[1] || s_.scale_on_device[2]) {
    dev = static_cast<float*>(add("scales", Role::kInput, 4, 4));
    for (int i = 0; i < 3; ++i) dev[i] = s_.scale[i];
  }
  Scale* out[3] = {&a.q_scale, &a.k_scale, &a.v_scale};
  for (int i = 0; i < 3; ++i) {
    if (s_.scale_multiplies[i])
      *out[i] = s_.scale_on_device[i] ? Scale::on_device_multiplier(dev + i)
                                      : Scale::host_multiplier(s_.scale[i]);
    else
      *out[i] = s_.scale_on_device[i] ? Scale::on_device(dev + i) : Scale::host(s_.scale[i]);
  }
}

std::uint32_t Builder::value_code(int which) {
  const double e = double(s_.lo_exp) + double(s_.hi_exp - s_.lo_exp) * r_.uniform();
  // |value| = 2^e before quantization: value * scale, or value / multiplier.
  const double scale = double(s_.scale[which]);
  double mag = s_.scale_multiplies[which] ? std::exp2(e) / scale : std::exp2(e) * scale;
  mag = std::min(mag, std::min(orc::max_finite(s_.in) * 0.5, 1e30));
  return orc::encode(s_.in, r_.coin(0.5) ? -mag : mag);
}

std::uint32_t Builder::special_code() {
  const int bits = orc::bits_of(s_.in);
  const int man = s_.in == DType::kFloat32 ? 23 : (s_.in == DType::kBFloat16 ? 7 : 10);
  const std::uint32_t sign = r_.coin(0.5) ? (1u << (bits - 1)) : 0u;
  const std::uint32_t exp_all = ((1u << (bits - 1)) - 1u) & ~((1u << man) - 1u);
  if (r_.coin(0.5)) return sign | exp_all;  // +-inf
  const std::uint32_t payload = std::uint32_t(r_.range(1, (std::int64_t(1) << man) - 1));
  return sign | exp_all | payload;  // NaN, quiet or signalling
}

void Builder::fill_inputs() {
  Arguments& a = d_.args;
  const std::size_t es = ropekv::size_of(s_.in);
  struct In {
    const TensorView* v;
    int which;
  };
  const In ins[] = {{&a.q_rope, 0}, {&a.q_nope, 0}, {&a.k_rope, 1}, {&a.k_nope, 1}, {&a.v, 2}};
  std::vector<const TensorView*> nonempty;
  for (const In& in : ins) {
    const TensorView& v = *in.v;
    if (!v.present() || v.numel() == 0) continue;
    nonempty.push_back(in.v);
    for (std::int64_t t = 0; t < v.extent[0]; ++t)
      for (std::int64_t h = 0; h < v.extent[1]; ++h)
        for (std::int64_t d = 0; d < v.extent[2]; ++d) {
          const std::uint32_t c = value_code(in.which);
          d_.nonzero_inputs += orc::decode(s_.in, c) != 0.0 ? 1 : 0;
          store(at(v, t, h, d), es, c);
        }
  }
  if (nonempty.empty()) return;
  scale_probes();
  auto random_element = [&]() {
    const TensorView& v = *nonempty[std::size_t(r_.range(0, std::int64_t(nonempty.size()) - 1))];
    return at(v, r_.range(0, v.extent[0] - 1), r_.range(0, v.extent[1] - 1),
              r_.range(0, v.extent[2] - 1));
  };
  for (int i = 0; i < s_.specials; ++i) store(random_element(), es, special_code());
  for (int i = 0; i < s_.zeros; ++i)
    store(random_element(), es, r_.coin(0.5) ? 0u : (1u << (orc::bits_of(s_.in) - 1)));
}

// Scale-step probes: with fp32 inputs (any float is an input), some pass-through
// elements (q/k non-rotary, value) whose scaled value lies within a float32 ulp or two
// of a midpoint of two adjacent codes of their FP8 output. There the output code tells
// the contract's v / s from v * RN(1 / s), which random values almost never do.
// Drawn from a stream of their own, so that every other draw of a case stays as it was.
void Builder::scale_probes() {
  if (s_.in != DType::kFloat32) return;
  Arguments& a = d_.args;
  Rng pr(s_.seed ^ 0x70726f626573ull);
  const TensorView* views[3] = {&a.q_nope, &a.k_nope, &a.v};  // scales 0 q, 1 k, 2 v
  for (int k = 0; k < 3; ++k) {
    const TensorView& v = *views[k];
    const DType out = k == 0 ? s_.q_out : s_.cache;
    if (!v.present() || v.numel() == 0 || !orc::is_fp8(out)) continue;
    for (int i = 0; i < 6; ++i) {
      // Adjacent positive codes c, c + 1 (finite in every FP8 format for c < 0x70);
      // their midpoint has at most 5 significant bits, so m * scale is exact in double.
      const std::uint32_t c = std::uint32_t(pr.range(1, 0x6f));
      const double mid = (orc::decode(out, c) + orc::decode(out, c + 1)) / 2;
      const double scale = double(s_.scale[k]);
      float x = float(s_.scale_multiplies[k] ? mid / scale : mid * scale);
      for (std::int64_t u = pr.range(-2, 2); u != 0; u += u > 0 ? -1 : 1)
        x = std::nextafter(x, u > 0 ? 1e30f : -1e30f);
      if (pr.coin(0.5)) x = -x;
      store(at(v, pr.range(0, v.extent[0] - 1), pr.range(0, v.extent[1] - 1),
               pr.range(0, v.extent[2] - 1)),
            4, orc::encode(DType::kFloat32, double(x)));
      ++d_.scale_probes;
    }
  }
}

CaseData build_case(const Spec& s) {
  CaseData d;
  Builder(s, d).build();
  return d;
}

}  // namespace ropekv_test
