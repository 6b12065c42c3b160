// The test oracle: a deliberate second definition of ropekv's math, written
// plainly and independently of core/detail (it includes only the public
// header, for the Arguments it reads).
//
//  * Decoding: every output format from its bits, by its exponent/mantissa
//    fields (FP8 formats through 256-entry tables, bf16/fp16 through 65536-entry
//    tables).
//  * Encoding: the nearest representable value by search in the table of the
//    format's non-negative values (ties to the even code), the contract's saturation
//    for FP8, IEEE overflow to infinity for bf16/fp16/fp32, one canonical
//    positive NaN code per format.
//  * The op: double-precision RoPE and scaling of every named output element
//    of one call, with a proven bound on how far the library's float32 path may
//    be from the double value, so that the set of codes the library may
//    legitimately produce is known exactly.
//  * The op again, as the contract's float32 formula written out step by step
//    (std::fmaf RoPE, IEEE float32 scale step, the encoders above): the one code
//    every backend must write for each element.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ropekv/ropekv.hpp"

namespace ropekv_oracle {

using ropekv::DType;

// ------------------------------------------------------------- formats
// e4m3fn, e5m2, e4m3fnuz, bf16, fp16, fp32.
bool is_float_format(DType dtype);
bool is_fp8(DType dtype);
int bits_of(DType dtype);  // 8, 16 or 32
// The raw code of `bits` (8, 16 or 32) bits stored at p (unaligned).
std::uint32_t load_code(const unsigned char* p, int bits);
// Element i of an int32 or int64 index vector (host memory).
std::int64_t load_index(const ropekv::TensorView& v, std::int64_t i);

// The value of a code (NaN for NaN codes, +-inf where the format has them).
double decode(DType dtype, std::uint32_t code);
bool is_nan_code(DType dtype, std::uint32_t code);
// The NaN code ropekv writes for any NaN: e4m3fn 0x7F, e5m2 0x7F, e4m3fnuz
// 0x80, bf16 0x7FC0, fp16 0x7E00, fp32 0x7FC00000.
std::uint32_t canonical_nan(DType dtype);
// The largest finite value of the format.
double max_finite(DType dtype);

// The code nearest to `v`: ties to the even code; FP8 saturates (+-inf
// included) to +-max; bf16/fp16/fp32 overflow to +-inf as IEEE does; zero and
// values that round to zero keep their sign, except e4m3fnuz, which has no -0;
// NaN gives canonical_nan().
std::uint32_t encode(DType dtype, double v);

// Total order of the non-NaN codes by value, with -0 just below +0.
std::int64_t order_key(DType dtype, std::uint32_t code);
// Number of representable values between two non-NaN codes (+0 and -0 count
// as one value, so they are 0 steps apart).
std::int64_t step_distance(DType dtype, std::uint32_t a, std::uint32_t b);

// ------------------------------------------------------------- the op
enum class Target { kQRopeOut, kQNopeOut, kKCacheRope, kKCacheNope, kVCache };
const char* to_string(Target target);

// One output element the call must write.
struct ExpectedElement {
  Target target;
  std::int64_t token, head, dim;  // dim: index in the view's last extent
  std::int64_t page, entry;       // cache targets: where the token goes
  unsigned char* address;         // the element, in the Arguments' memory
  DType dtype;
  // The exact value to convert (double RoPE, divided or multiplied by the
  // scale for FP8 outputs, per its convention), and a bound on |library's
  // float32 value - value|: 0 where the float32 path is exact (pass-through
  // to bf16/fp16/fp32, non-finite inputs).
  double value;
  double error_bound;
  std::uint32_t nearest;  // encode(value)
  std::uint32_t lo, hi;   // encode(value - bound), encode(value + bound)
  // The contract's float32 formula evaluated exactly as SPEC writes it, in
  // float32: y = fmaf(x, c, -(xp * s)) / yp = fmaf(xp, c, x * s) for rotary
  // dims, x for the rest; then, for FP8 outputs only, y / scale (IEEE
  // division) or y * scale (one multiplication); then encode(). Every backend
  // must write this code (a NaN as canonical_nan()).
  float exact_value;
  std::uint32_t exact;

  // True when `code` is a code the float32 path can produce: the canonical
  // NaN when the value is NaN, else a code between lo and hi (order_key).
  bool allows(std::uint32_t code) const;
  // What a backend must write: an allowed code that is also `exact`.
  bool matches(std::uint32_t code) const { return allows(code) && code == exact; }
  std::string describe() const;
};

struct Reference {
  std::vector<ExpectedElement> elements;
  std::int64_t written_tokens = 0;
  std::int64_t padding_tokens = 0;
  std::int64_t bad_tokens = 0;  // checked mode: skipped for a bad index
  // Non-empty when the reference cannot be computed (e.g. a bad index in
  // unchecked mode, whose behaviour is undefined).
  std::string error;
};

// The expected outcome of ropekv::run(args) for Arguments whose memory
// (inputs, index arrays, device scales) is host memory. Only inputs are read.
Reference reference(const ropekv::Arguments& args);

// ------------------------------------------------------------- test inputs
// The usual RoPE cos/sin table (base 10000), fp32 [max_pos, r] row-major:
// row p holds cos(p * theta_i) for i < r / 2, then sin(p * theta_i), with
// theta_i = 10000^(-2i / r), each computed in double and rounded once.
void fill_rope_table(float* table, std::int64_t max_pos, std::int64_t r);
std::vector<float> rope_table(std::int64_t max_pos, std::int64_t r);

}  // namespace ropekv_oracle
