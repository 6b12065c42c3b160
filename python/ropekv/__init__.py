"""ropekv for PyTorch: fused RoPE + FP8 quantization + paged KV-cache append.

One op, ``torch.ops.ropekv.rope_quantize_append``, with kernels for CPU (the
host backend), CUDA (the CUDA backend on the current stream) and Meta (checks
only, so ``torch.compile(fullgraph=True)`` traces it). It writes its query
outputs and the caches in place and returns nothing; it allocates nothing, so
it can be captured in a ``torch.cuda.CUDAGraph``.

    import ropekv
    q = ropekv.fused_qkv_views(qkv, num_q_heads, num_kv_heads, head_dim)
    k_rope, k_nope, v_view = ropekv.nhd_kv_cache(k_cache, v_cache, head_dim)
    ropekv.rope_quantize_append(
        q_rope=q.q_rope, k_rope=q.k_rope, v=q.v, cos_sin_cache=cos_sin,
        positions=positions, slot_mapping=slots, q_rope_out=q_out,
        k_cache_rope=k_rope, v_cache=v_view, q_scale=0.05, k_scale=k_scale,
        v_scale=v_scale)

``ropekv.flashinfer.rope_quantize_fp8_append_paged_kv_cache`` takes FlashInfer's
arguments and conventions, so a call site can switch by changing its import.
"""

import glob
import inspect
import os
from typing import NamedTuple, Optional, Union

import torch

__all__ = [
    "rope_quantize_append",
    "op_arguments",
    "fused_qkv_views",
    "split_heads",
    "nhd_kv_cache",
    "hnd_kv_cache",
    "mla_query_views",
    "mla_cache_single",
    "library_path",
]


def _find_library() -> str:
    """The extension: $ROPEKV_TORCH_LIBRARY, else _ropekv_torch*.so beside this file."""
    path = os.environ.get("ROPEKV_TORCH_LIBRARY")
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "_ropekv_torch*.so")))
    if not found:
        raise ImportError(
            "ropekv: the extension _ropekv_torch.so is not beside "
            + here
            + " (build ropekv with -DROPEKV_BUILD_TORCH=ON and put <build>/python on PYTHONPATH,"
            " or set ROPEKV_TORCH_LIBRARY)"
        )
    return found[0]


library_path = _find_library()
torch.ops.load_library(library_path)

Scale = Union[float, torch.Tensor]


def _scale(s: Scale):
    """(tensor, value) of a scale: a one-element float32 tensor, or a float."""
    if isinstance(s, torch.Tensor):
        return s, 1.0
    return None, float(s)


def op_arguments(
    *,
    q_rope: torch.Tensor,
    k_rope: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    q_rope_out: torch.Tensor,
    k_cache_rope: torch.Tensor,
    q_nope: Optional[torch.Tensor] = None,
    k_nope: Optional[torch.Tensor] = None,
    v: Optional[torch.Tensor] = None,
    q_nope_out: Optional[torch.Tensor] = None,
    k_cache_nope: Optional[torch.Tensor] = None,
    v_cache: Optional[torch.Tensor] = None,
    slot_mapping: Optional[torch.Tensor] = None,
    kv_indices: Optional[torch.Tensor] = None,
    kv_indptr: Optional[torch.Tensor] = None,
    batch_indices: Optional[torch.Tensor] = None,
    kv_positions: Optional[torch.Tensor] = None,
    q_scale: Scale = 1.0,
    k_scale: Scale = 1.0,
    v_scale: Scale = 1.0,
    scale_convention: str = "divide",
    kind: str = "gqa",
    rope_style: str = "neox",
    cache_dtype: str = "auto",
    q_out_dtype: str = "auto",
    checked: bool = False,
    skipped_tokens: Optional[torch.Tensor] = None,
    pdl: bool = False,
    indices_ready_before_previous_kernel: bool = False,
) -> tuple:
    """Rotates q and k, converts q, k and v, and writes k and v into a paged cache.

    Every tensor is a strided view on one device (CPU or CUDA); the last dim of
    each is contiguous. Shapes (nnz tokens, Hq query heads, Hk key/value heads,
    R rotary dim, N non-rotary dim, Dv value dim, P pages of ps entries):

    - ``q_rope`` [nnz, Hq, R], ``q_nope`` [nnz, Hq, N]; ``k_rope`` [nnz, Hk, R],
      ``k_nope`` [nnz, Hk, N]; ``v`` [nnz, Hk, Dv] (GQA; None for MLA).
      bf16, fp16 or fp32, all one dtype.
    - ``q_rope_out`` / ``q_nope_out``: the query output, as q_rope / q_nope.
    - ``k_cache_rope`` [P, ps, Hk, R], ``k_cache_nope`` [P, ps, Hk, N],
      ``v_cache`` [P, ps, Hk, Dv]: views of the caches (``nhd_kv_cache``,
      ``hnd_kv_cache``, ``mla_cache_single`` build them). FP8 caches and
      outputs are float8 tensors, or uint8 tensors with ``cache_dtype`` /
      ``q_out_dtype`` naming the format ('fp8' = 'fp8_e4m3', 'fp8_e5m2',
      'fp8_e4m3fnuz'), as vLLM stores them.
    - ``cos_sin_cache`` [max_pos, R]: row p is cos(p f_0..) then sin(p f_0..);
      fp32 or the input dtype. ``positions`` [nnz] int32/int64.
    - Addressing: ``slot_mapping`` [nnz] (vLLM; slot < 0 is padding), or the
      page table ``kv_indices``, ``kv_indptr`` [batch + 1], ``batch_indices``
      [nnz] (< 0 is padding), ``kv_positions`` [nnz] (FlashInfer, SGLang).
      A padding token writes nothing.
    - Scales: a float or a one-element float32 tensor on the device (read when
      the kernel runs, so a captured graph sees updates), applied to FP8
      outputs: ``scale_convention='divide'`` stores convert(value / scale)
      (vLLM's dequantization scales), ``'multiply'`` convert(value * scale)
      (FlashInfer's and TensorRT-LLM's quantization scales). Both exact.
    - ``kind``: 'gqa' or 'mla' (DeepSeek: Hk = 1, no v, no v_cache).
      ``rope_style``: 'neox' (pairs i, i + R/2) or 'interleaved' (2i, 2i + 1).
    - ``checked``: the kernel checks each token's indices and skips a bad one,
      adding to ``skipped_tokens`` (a one-element int64 tensor) if given.
    - ``pdl``: CUDA programmatic dependent launch. With it,
      ``indices_ready_before_previous_kernel`` promises that the indices,
      positions, cos/sin table and device scales are final before the previous
      kernel in the stream starts (see the C++ header).

    A bad argument raises ValueError with the library's message (the argument
    and the rule), and nothing is written.
    """
    qs, qv = _scale(q_scale)
    ks, kv = _scale(k_scale)
    vs, vv = _scale(v_scale)
    return (
        q_rope, q_nope, k_rope, k_nope, v, cos_sin_cache, positions,
        q_rope_out, q_nope_out, k_cache_rope, k_cache_nope, v_cache,
        slot_mapping, kv_indices, kv_indptr, batch_indices, kv_positions,
        qs, ks, vs, qv, kv, vv, scale_convention, kind, rope_style,
        cache_dtype, q_out_dtype, checked, skipped_tokens, pdl,
        indices_ready_before_previous_kernel,
    )


def rope_quantize_append(**kwargs) -> None:
    torch.ops.ropekv.rope_quantize_append(*op_arguments(**kwargs))


rope_quantize_append.__doc__ = op_arguments.__doc__
rope_quantize_append.__signature__ = inspect.signature(op_arguments).replace(
    return_annotation=None)
op_arguments.__doc__ = (
    "The positional arguments of torch.ops.ropekv.rope_quantize_append for\n"
    "rope_quantize_append's keywords (for callers that dispatch the op themselves,\n"
    "e.g. torch.library.opcheck).\n")


class QkvViews(NamedTuple):
    q_rope: torch.Tensor
    q_nope: Optional[torch.Tensor]
    k_rope: torch.Tensor
    k_nope: Optional[torch.Tensor]
    v: torch.Tensor


def _split(t: torch.Tensor, rotary_dim: int):
    """(rotary, non-rotary or None) views of the last dim of `t`."""
    nope = t[..., rotary_dim:] if t.shape[-1] > rotary_dim else None
    return t[..., :rotary_dim], nope


def fused_qkv_views(qkv: torch.Tensor, num_q_heads: int, num_kv_heads: int, head_dim: int,
                    rotary_dim: Optional[int] = None) -> QkvViews:
    """Views into one fused QKV projection output [nnz, (Hq + 2 Hk) * D]."""
    r = head_dim if rotary_dim is None else rotary_dim
    heads = qkv.unflatten(-1, (num_q_heads + 2 * num_kv_heads, head_dim))
    q = heads[:, :num_q_heads]
    k = heads[:, num_q_heads:num_q_heads + num_kv_heads]
    v = heads[:, num_q_heads + num_kv_heads:]
    q_rope, q_nope = _split(q, r)
    k_rope, k_nope = _split(k, r)
    return QkvViews(q_rope, q_nope, k_rope, k_nope, v)


def split_heads(t: torch.Tensor, rotary_dim: int):
    """(rotary, non-rotary or None) views of a [nnz, H, D] tensor (e.g. the query output)."""
    return _split(t, rotary_dim)


def nhd_kv_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, rotary_dim: int):
    """(k_cache_rope, k_cache_nope or None, v_cache) of NHD caches [P, ps, Hk, D]."""
    k_rope, k_nope = _split(k_cache, rotary_dim)
    return k_rope, k_nope, v_cache


def hnd_kv_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, rotary_dim: int):
    """The same for HND caches [P, Hk, ps, D] (strided [P, ps, Hk, D] views)."""
    return nhd_kv_cache(k_cache.transpose(1, 2), v_cache.transpose(1, 2), rotary_dim)


def mla_query_views(q: torch.Tensor, nope_dim: int):
    """(rope, nope) views of an MLA query [nnz, H, nope + rope], nope part first."""
    return q[..., nope_dim:], q[..., :nope_dim]


def mla_cache_single(cache: torch.Tensor, latent_dim: int):
    """(k_cache_rope, k_cache_nope) of vLLM's MLA cache [P, ps, latent + rope]."""
    c = cache.unsqueeze(2)
    return c[..., latent_dim:], c[..., :latent_dim]


from . import flashinfer  # noqa: E402  (needs rope_quantize_append)
