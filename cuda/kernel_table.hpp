// The kernels the launcher picks from: for a call's path family, dtypes and
// shape, the kernel to launch. cuda/kernel_table.cu is the one translation
// unit that instantiates them. One source for CUDA and HIP.
#pragma once

#include "detail/params.hpp"

namespace ropekv {
namespace detail {
namespace gpu {

// The vector paths' kernel families (cuda/kernels/). kRowsOneRound: the rows
// kernel with every part of a token in one round (shapes without non-rotary
// parts only); kRowsDynamic, kRowsOneRoundDynamic: the same in the dynamic
// token order (a measurement; the fixed index forms only). kDecodeFew: a decode kernel's
// 64-register twin (kDecodeFewBlocks). kDecodeFlat: the decode kernel's packed layout over a 1D
// grid (where the rows kernel's teams would take one token each; the specialised shapes in the
// fixed index forms). kDecodeFlatStream: the same with evict-first input loads.
enum class VecFamily {
  kDirect,
  kStaged,
  kBulk,
  kRows,
  kRowsOneRound,
  kRowsDynamic,
  kRowsOneRoundDynamic,
  kDecode,
  kDecodeFew,
  kDecodeFlat,
  kDecodeFlatStream,
  kDecodeFlatPair,  // two units a thread (a measurement: Tuning::flat_pair)
  kDecodeFlatPairStream
};

// Family f's kernel for p's dtypes and shape: the canonical shapes' own
// specialisation (bf16/fp16 in, e4m3fn out, fp32 cos/sin; the decode kernels
// also in the two fixed index forms), else the run-time shape's; null where
// the family has none (a kernel the vendor layer does not build, a decode
// kernel without a twin). *by_part (may be null): the decode kernel takes
// the by-part layout (kDecodeByPart).
const void* pick_vec(VecFamily f, const LaunchParams& p, bool* by_part = nullptr);

// Whether p's index arrays have one of the forms the decode and rows kernels
// are specialised on (their run-time form's kernels lack some orders).
bool fixed_index_form(const LaunchParams& p);

// The generic kernel for p's dtypes: the output dtype fixed when the query
// output and the cache share an FP8 dtype, else dispatched per element; the
// cos/sin table fp32 or the input dtype (validated).
using GenericKernel = void (*)(const LaunchParams);
GenericKernel pick_generic(const LaunchParams& p);

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
