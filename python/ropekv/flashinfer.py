"""FlashInfer's ``rope_quantize_fp8_append_paged_kv_cache``, on ropekv.

Same argument names, defaults and return value, so a call site switches by
changing its import:

    from ropekv.flashinfer import rope_quantize_fp8_append_paged_kv_cache

FlashInfer multiplies by its scales (``quant_scale_q``, ``quant_scale_kv``):
they are passed to ropekv as multiplying scales, so the stored codes are
convert(value * scale) exactly, for every scale. Differences: the index
arrays are taken as they are (int32 or int64; FlashInfer casts them to int32
with a copy), any even rotary dim and any non-rotary dim work, and on a torch
without float8 dtypes (1.x) the caches and outputs may be uint8 tensors with
``quantize_dtype`` given as 'fp8_e4m3' or 'fp8_e5m2'.
"""

from typing import Optional, Tuple, Union

import torch

from . import rope_quantize_append

__all__ = ["rope_quantize_fp8_append_paged_kv_cache"]


def _fp8_name(quantize_dtype: Union[None, str, torch.dtype]) -> str:
    """ropekv's dtype string for a uint8 tensor; 'auto' for a float8 tensor."""
    if quantize_dtype is None:
        return "fp8_e4m3"  # FlashInfer's default, float8_e4m3fn
    if isinstance(quantize_dtype, str):
        return quantize_dtype
    e5m2 = getattr(torch, "float8_e5m2", None)
    return "fp8_e5m2" if quantize_dtype == e5m2 else "fp8_e4m3"


def _out_dtype(quantize_dtype: Union[None, str, torch.dtype]) -> torch.dtype:
    """The dtype of query outputs the wrapper allocates: the float8 dtype of the
    format, or uint8 (FP8 codes) on a torch without float8 dtypes."""
    if isinstance(quantize_dtype, torch.dtype):
        return quantize_dtype
    name = "float8_e5m2" if _fp8_name(quantize_dtype) == "fp8_e5m2" else "float8_e4m3fn"
    return getattr(torch, name, torch.uint8)


def rope_quantize_fp8_append_paged_kv_cache(
    q_rope: torch.Tensor,
    k_rope: torch.Tensor,
    q_nope: Optional[torch.Tensor],
    k_nope: Optional[torch.Tensor],
    v: Optional[torch.Tensor],
    cos_sin_cache: torch.Tensor,
    pos_ids: torch.Tensor,
    paged_kv_cache: Tuple[torch.Tensor, torch.Tensor],
    kv_indices: torch.Tensor,
    kv_indptr: torch.Tensor,
    batch_indices: torch.Tensor,
    positions: torch.Tensor,
    is_neox: bool = True,
    quantize_dtype: Union[None, str, torch.dtype] = None,
    quant_scale_q: float = 1.0,
    quant_scale_kv: float = 1.0,
    page_size: int = 16,
    kv_layout: str = "NHD",
    q_rope_out: Optional[torch.Tensor] = None,
    q_nope_out: Optional[torch.Tensor] = None,
    enable_pdl: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """RoPE, FP8 quantization and paged K/V append, with FlashInfer's arguments.

    MLA when ``k_rope`` is 2-D ([nnz, rope_dim]; ``k_nope`` [nnz, latent],
    ``v`` None, ``paged_kv_cache`` = (ckv [P, ps, latent], kpe [P, ps, rope])),
    else GQA/MHA (``paged_kv_cache`` = (k_cache, v_cache), [P, ps, Hk, D] for
    ``kv_layout='NHD'`` or [P, Hk, ps, D] for 'HND'). ``pos_ids`` are the RoPE
    positions, ``positions`` the tokens' positions in their sequences (the
    page-table positions). Returns (q_rope_out, q_nope_out), allocated when not
    given (q_nope_out is empty when q_nope is None).
    """
    is_mla = k_rope.dim() == 2
    nnz, num_heads = q_rope.shape[0], q_rope.shape[1]
    if quantize_dtype is None and q_rope_out is not None:
        quantize_dtype = q_rope_out.dtype
    if q_rope_out is None or q_nope_out is None:
        out_dtype = _out_dtype(quantize_dtype)
        if q_rope_out is None:
            q_rope_out = torch.empty(q_rope.shape, dtype=out_dtype, device=q_rope.device)
        if q_nope_out is None:
            dim = 0 if q_nope is None else q_nope.shape[2]
            q_nope_out = torch.empty((nnz, num_heads, dim), dtype=out_dtype, device=q_rope.device)
    if len(paged_kv_cache) != 2:
        raise ValueError("paged_kv_cache must be a tuple of 2 tensors")
    cache_0, cache_1 = paged_kv_cache
    if is_mla:
        if v is not None:
            raise ValueError("MLA takes no v (pass None)")
        k_rope = k_rope.unsqueeze(1)
        k_nope = None if k_nope is None else k_nope.unsqueeze(1)
        k_cache_rope, k_cache_nope, v_cache = cache_1.unsqueeze(2), cache_0.unsqueeze(2), None
        cache_page_size = cache_0.shape[1]
    else:
        if v is None:
            raise ValueError("GQA/MHA needs v (only MLA passes None)")
        if kv_layout == "HND":
            cache_0, cache_1 = cache_0.transpose(1, 2), cache_1.transpose(1, 2)
        elif kv_layout != "NHD":
            raise ValueError(f"kv_layout must be 'NHD' or 'HND', got '{kv_layout}'")
        r = k_rope.shape[-1]
        k_cache_rope, v_cache = cache_0[..., :r], cache_1
        k_cache_nope = cache_0[..., r:] if cache_0.shape[-1] > r else None
        cache_page_size = cache_0.shape[1]
    if cache_page_size != page_size:
        raise ValueError(f"page_size is {page_size}, but the cache's pages hold {cache_page_size}")

    def dtype_string(t: torch.Tensor) -> str:
        return _fp8_name(quantize_dtype) if t.dtype == torch.uint8 else "auto"

    q_nope_out_arg = q_nope_out if q_nope is not None else None
    rope_quantize_append(
        q_rope=q_rope, q_nope=q_nope, k_rope=k_rope, k_nope=k_nope, v=v,
        cos_sin_cache=cos_sin_cache, positions=pos_ids,
        q_rope_out=q_rope_out, q_nope_out=q_nope_out_arg,
        k_cache_rope=k_cache_rope, k_cache_nope=k_cache_nope, v_cache=v_cache,
        kv_indices=kv_indices, kv_indptr=kv_indptr, batch_indices=batch_indices,
        kv_positions=positions,
        q_scale=quant_scale_q, k_scale=quant_scale_kv, v_scale=quant_scale_kv,
        scale_convention="multiply", kind="mla" if is_mla else "gqa",
        rope_style="neox" if is_neox else "interleaved",
        cache_dtype=dtype_string(k_cache_rope), q_out_dtype=dtype_string(q_rope_out),
        pdl=enable_pdl,
    )
    return q_rope_out, q_nope_out
