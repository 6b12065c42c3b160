// The kernel table (cuda/kernel_table.hpp): every kernel's instantiation, by
// path family, dtypes and shape. One source for CUDA and HIP.
#include <type_traits>

#include "cuda/kernel_table.hpp"
#include "cuda/kernels/decode.cuh"
#include "cuda/kernels/generic.cuh"
#include "cuda/kernels/vec.cuh"
#include "cuda/kernels/vec_bulk.cuh"
#include "cuda/kernels/vec_rows.cuh"
#include "cuda/kernels/vec_staged.cuh"
#include "detail/dispatch.hpp"

namespace ropekv {
namespace detail {
namespace gpu {

#ifdef ROPEKV_ROWS_TRACE
void rows_trace_copy(unsigned long long* out) {
  cudaMemcpyFromSymbol(out, rows_trace, sizeof rows_trace);
}
#endif

namespace {

// The index form for p of the kernels specialised on it (decode, rows): one
// of the two common forms where p is one, else kIndexAny.
int index_form(const LaunchParams& p) {
  if (p.checked || p.page_shift < 0) return kIndexAny;
  if (p.addressing == Addressing::kSlotMapping)
    return p.slot_mapping.i64 && p.positions.i64 ? kIndexSlot64 : kIndexAny;
  const bool all32 = !p.batch_indices.i64 && !p.kv_positions.i64 && !p.kv_indptr.i64 &&
                     !p.kv_indices.i64 && !p.positions.i64;
  return all32 ? kIndexTable32 : kIndexAny;
}
// f(std::integral_constant<int, form>{}) for p's index form.
template <class F>
const void* by_index_form(const LaunchParams& p, F&& f) {
  switch (index_form(p)) {
    case kIndexSlot64: return f(std::integral_constant<int, kIndexSlot64>{});
    case kIndexTable32: return f(std::integral_constant<int, kIndexTable32>{});
    default: return f(std::integral_constant<int, kIndexAny>{});
  }
}

// Family F's kernel for a (dtypes, shape).
template <VecFamily F, DType In, DType Out, DType Cos, int kR, int kN, int kDv>
const void* vec_kernel(const LaunchParams& p, bool* by_part) {
  if constexpr (F == VecFamily::kStaged) {
    // Only where the vendor layer has asynchronous copies (HIP never takes it).
    if constexpr (kAsyncCopy)
      return reinterpret_cast<const void*>(&fused_vec_staged_kernel<In, Out, Cos, kR, kN, kDv>);
    return nullptr;
  }
  if constexpr (F == VecFamily::kRows || F == VecFamily::kRowsOneRound ||
                F == VecFamily::kRowsDynamic || F == VecFamily::kRowsOneRoundDynamic) {
    constexpr bool kOne = F == VecFamily::kRowsOneRound || F == VecFamily::kRowsOneRoundDynamic;
    constexpr bool kDynamic = F == VecFamily::kRowsDynamic || F == VecFamily::kRowsOneRoundDynamic;
    if constexpr (kRowsKernel && kR > 0 && !(kOne && (kN > 0 || kDv == 0))) {
      return by_index_form(p, [](auto form) -> const void* {
        constexpr int kForm = decltype(form)::value;
        if constexpr (kDynamic && kForm == kIndexAny) {
          return nullptr;  // the dynamic order in the fixed forms only
        } else {
          return reinterpret_cast<const void*>(
              &fused_vec_rows_kernel<In, Out, Cos, kR, kN, kDv, kOne, kForm, kDynamic>);
        }
      });
    }
    return nullptr;
  }
  if constexpr (F == VecFamily::kBulk) {
    if constexpr (kBulkCopy)
      return reinterpret_cast<const void*>(&fused_vec_bulk_kernel<In, Out, Cos, kR, kN, kDv>);
    return nullptr;
  }
  if constexpr (F == VecFamily::kDecodeFlat || F == VecFamily::kDecodeFlatStream ||
                F == VecFamily::kDecodeFlatPair || F == VecFamily::kDecodeFlatPairStream) {
    constexpr bool kStream =
        F == VecFamily::kDecodeFlatStream || F == VecFamily::kDecodeFlatPairStream;
    constexpr bool kPair = F == VecFamily::kDecodeFlatPair || F == VecFamily::kDecodeFlatPairStream;
    if constexpr (kR > 0) {
      return by_index_form(p, [&](auto form) -> const void* {
        constexpr int kForm = decltype(form)::value;
        if constexpr (kForm == kIndexAny) {
          return nullptr;
        } else {
          *by_part = kDecodeFlatByRole<kForm>;
          if constexpr (kPair)
            return reinterpret_cast<const void*>(
                &fused_decode_flat_pair_kernel<In, Out, Cos, kR, kN, kDv, kForm, kStream>);
          return reinterpret_cast<const void*>(
              &fused_decode_flat_kernel<In, Out, Cos, kR, kN, kDv, kForm, kStream>);
        }
      });
    }
    return nullptr;
  }
  if constexpr (F == VecFamily::kDecodeFew && !kDecodeFewBlocks<kR, kN>) {
    return nullptr;
  } else if constexpr (F == VecFamily::kDecode || F == VecFamily::kDecodeFew) {
    constexpr int kB = F == VecFamily::kDecodeFew ? kDecodeFewMinBlocks : kDecodeMinBlocks<kR, kN>;
    if constexpr (kR > 0) {
      return by_index_form(p, [&](auto form) {
        constexpr int kForm = decltype(form)::value;
        *by_part = kDecodeByPart<kForm, kN>;
        return reinterpret_cast<const void*>(
            &fused_decode_kernel<In, Out, Cos, kR, kN, kDv, kForm, kB>);
      });
    }
    return reinterpret_cast<const void*>(
        &fused_decode_kernel<In, Out, Cos, kR, kN, kDv, kIndexAny, kB>);
  }
  (void)p;
  (void)by_part;
  return reinterpret_cast<const void*>(&fused_vec_kernel<In, Out, Cos, kR, kN, kDv>);
}

// The perf suite's canonical shapes get their own specialisation (bf16/fp16 in,
// e4m3fn out, fp32 cos/sin); every other eligible case the run-time shape
// kernel.
template <VecFamily F, DType In, DType Out, DType Cos>
const void* pick_shape(const LaunchParams& p, bool* by_part) {
  if constexpr (Out == DType::kFloat8E4M3FN && Cos == DType::kFloat32) {
    const std::int64_t r = p.rotary_dim, n = p.nope_dim, dv = p.v_dim;
    if (r == 64 && n == 0 && dv == 64) return vec_kernel<F, In, Out, Cos, 64, 0, 64>(p, by_part);
    if (r == 128 && n == 0 && dv == 128)
      return vec_kernel<F, In, Out, Cos, 128, 0, 128>(p, by_part);
    if (r == 64 && n == 64 && dv == 128)
      return vec_kernel<F, In, Out, Cos, 64, 64, 128>(p, by_part);
    if (r == 64 && n == 512 && dv == 0) return vec_kernel<F, In, Out, Cos, 64, 512, 0>(p, by_part);
  }
  return vec_kernel<F, In, Out, Cos, 0, 0, 0>(p, by_part);
}

// The vector path's inputs (its 16-byte loads hold 8 elements of 2 bytes),
// each ending with its fallback (dispatch.hpp).
using VecInputs = DTypeList<DType::kFloat16, DType::kBFloat16>;
template <VecFamily F>
const void* pick_family(const LaunchParams& p, bool* by_part) {
  return dispatch<VecInputs>(p.in.dtype, [&](auto in) {
    constexpr DType kIn = decltype(in)::value;
    return dispatch<Fp8DTypes>(p.q_out.dtype, [&](auto out) {
      constexpr DType kOut = decltype(out)::value;
      return p.cos.dtype == DType::kFloat32 ? pick_shape<F, kIn, kOut, DType::kFloat32>(p, by_part)
                                            : pick_shape<F, kIn, kOut, kIn>(p, by_part);
    });
  });
}

using GenericOutputs =
    DTypeList<DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E4M3FNUZ, DType::kInvalid>;

}  // namespace

bool fixed_index_form(const LaunchParams& p) { return index_form(p) != kIndexAny; }

const void* pick_vec(VecFamily f, const LaunchParams& p, bool* by_part) {
  bool unused = false;
  if (by_part == nullptr) by_part = &unused;
  switch (f) {
    case VecFamily::kDirect: return pick_family<VecFamily::kDirect>(p, by_part);
    case VecFamily::kStaged: return pick_family<VecFamily::kStaged>(p, by_part);
    case VecFamily::kBulk: return pick_family<VecFamily::kBulk>(p, by_part);
    case VecFamily::kRows: return pick_family<VecFamily::kRows>(p, by_part);
    case VecFamily::kRowsOneRound: return pick_family<VecFamily::kRowsOneRound>(p, by_part);
    case VecFamily::kRowsDynamic: return pick_family<VecFamily::kRowsDynamic>(p, by_part);
    case VecFamily::kRowsOneRoundDynamic:
      return pick_family<VecFamily::kRowsOneRoundDynamic>(p, by_part);
    case VecFamily::kDecode: return pick_family<VecFamily::kDecode>(p, by_part);
    case VecFamily::kDecodeFew: return pick_family<VecFamily::kDecodeFew>(p, by_part);
    case VecFamily::kDecodeFlat: return pick_family<VecFamily::kDecodeFlat>(p, by_part);
    case VecFamily::kDecodeFlatStream: return pick_family<VecFamily::kDecodeFlatStream>(p, by_part);
    case VecFamily::kDecodeFlatPair: return pick_family<VecFamily::kDecodeFlatPair>(p, by_part);
    case VecFamily::kDecodeFlatPairStream:
      return pick_family<VecFamily::kDecodeFlatPairStream>(p, by_part);
  }
  return nullptr;
}

GenericKernel pick_generic(const LaunchParams& p) {
  const DType out = p.q_out.dtype == p.cache.dtype ? p.cache.dtype : DType::kInvalid;
  return dispatch<InputDTypes>(p.in.dtype, [&](auto in) {
    return dispatch<GenericOutputs>(out, [&](auto o) -> GenericKernel {
      constexpr DType kIn = decltype(in)::value, kOut = decltype(o)::value;
      return p.cos.dtype == DType::kFloat32 ? &fused_generic_kernel<kIn, kOut, true>
                                            : &fused_generic_kernel<kIn, kOut, false>;
    });
  });
}

}  // namespace gpu
}  // namespace detail
}  // namespace ropekv
