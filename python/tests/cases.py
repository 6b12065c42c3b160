"""Test problems for the torch op: seeded random calls of the layouts engines
use, each runnable three ways: through the op (``run_op``, on any device),
through the C++ host backend called directly (``run_host_reference``), and
unfused in plain PyTorch (``unfused``, GQA)."""

import ctypes
import dataclasses
import os
from dataclasses import dataclass
from typing import Dict, Optional

import torch

import ropekv
from reference import quantize, rope

GUARD = 0xA5  # every output byte starts as this


@dataclass(frozen=True)
class Gqa:
    """GQA/MHA: fused QKV [nnz, (hq + 2 hk) d], query output [nnz, hq, d], NHD caches."""
    nnz: int = 7
    hq: int = 4
    hk: int = 2
    d: int = 64
    r: int = 64
    in_dtype: torch.dtype = torch.bfloat16
    fmt: str = "e4m3fn"  # FP8 format of the query output and the caches
    page_size: int = 16
    num_pages: int = 6
    max_pos: int = 300
    interleaved: bool = False
    page_table: bool = False
    scales: tuple = (0.05, 0.08, 0.11)
    multiply: bool = False
    padding: tuple = (2,)  # tokens that are padding
    seed: int = 0
    amplitude: float = 3.0


@dataclass(frozen=True)
class Mla:
    """DeepSeek MLA: query [nnz, h, latent + rope] (nope first), kv_a [nnz,
    latent + rope] (kv_c, k_pe), vLLM's cache [P, ps, latent + rope];
    interleaved RoPE, slot mapping."""
    nnz: int = 5
    h: int = 4
    latent: int = 64
    r: int = 32
    in_dtype: torch.dtype = torch.bfloat16
    fmt: str = "e4m3fn"
    page_size: int = 16
    num_pages: int = 4
    max_pos: int = 200
    scales: tuple = (0.05, 0.08)
    multiply: bool = False
    padding: tuple = (1,)
    seed: int = 0
    amplitude: float = 3.0


CASES = {
    "neox-slots": Gqa(),
    "interleaved-slots": Gqa(interleaved=True, seed=1),
    "neox-page-table": Gqa(page_table=True, seed=2),
    "partial-rotary-e5m2": Gqa(r=32, fmt="e5m2", seed=3),
    "multiply-fp16": Gqa(multiply=True, scales=(12.0, 9.5, 20.25), in_dtype=torch.float16, seed=4),
    "fp32-in-page-table-interleaved": Gqa(in_dtype=torch.float32, page_table=True,
                                          interleaved=True, seed=5),
    "saturating": Gqa(amplitude=200.0, scales=(0.01, 0.02, 0.5), seed=6),
    "decode-one-token": Gqa(nnz=1, padding=(), seed=7),
    "mla": Mla(),
    "mla-multiply-e5m2": Mla(fmt="e5m2", multiply=True, scales=(4.0, 0.75), seed=8),
}


@dataclass
class Problem:
    case: object
    inputs: Dict[str, torch.Tensor]  # on the CPU
    outputs: Dict[str, torch.Tensor]  # on the CPU, every byte GUARD


def _cos_sin(max_pos: int, r: int) -> torch.Tensor:
    inv = 1.0 / (10000.0 ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat((ang.cos(), ang.sin()), dim=1).float()


def _guard(*shape) -> torch.Tensor:
    return torch.full(shape, GUARD, dtype=torch.uint8)


def make(c) -> Problem:
    g = torch.Generator().manual_seed(c.seed)
    rand = lambda *s: (torch.randn(*s, generator=g) * c.amplitude).to(c.in_dtype)  # noqa: E731
    slots = torch.randperm(c.num_pages * c.page_size, generator=g)[:c.nnz]
    for t in c.padding:
        slots[t] = -1
    inputs = {"cos_sin": _cos_sin(c.max_pos, c.r),
              "positions": torch.randint(0, c.max_pos, (c.nnz,), generator=g), "slots": slots}
    if isinstance(c, Mla):
        inputs.update(q=rand(c.nnz, c.h, c.latent + c.r), kv_a=rand(c.nnz, c.latent + c.r))
        outputs = {"q_out": _guard(c.nnz, c.h, c.latent + c.r),
                   "cache": _guard(c.num_pages, c.page_size, c.latent + c.r)}
    else:
        inputs["qkv"] = rand(c.nnz, (c.hq + 2 * c.hk) * c.d)
        outputs = {"q_out": _guard(c.nnz, c.hq, c.d),
                   "k_cache": _guard(c.num_pages, c.page_size, c.hk, c.d),
                   "v_cache": _guard(c.num_pages, c.page_size, c.hk, c.d)}
        if c.page_table:
            inputs.update(_page_table(c, slots, g))
    return Problem(c, inputs, outputs)


def _page_table(c: Gqa, slots: torch.Tensor, g: torch.Generator) -> dict:
    """Page-table addressing of the same slots: one sequence per real token,
    whose pages (a few others first) hold the token's slot at its kv position."""
    perm = [int(x) for x in torch.randperm(c.num_pages, generator=g)]
    indices, indptr, batch, kv_pos = [], [0], [], []
    for s in (int(x) for x in slots):
        if s < 0:
            batch.append(-1)
            kv_pos.append(0)
            continue
        page, entry = divmod(s, c.page_size)
        lead = int(torch.randint(0, 3, (1,), generator=g))
        seq = [x for x in perm if x != page][:lead] + [page]
        indices += seq
        indptr.append(len(indices))
        batch.append(len(indptr) - 2)
        kv_pos.append((len(seq) - 1) * c.page_size + entry)
    i32 = lambda x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    return {"kv_indices": i32(indices), "kv_indptr": i32(indptr), "batch_indices": i32(batch),
            "kv_positions": i32(kv_pos)}


def fp8_string(fmt: str) -> str:
    return {"e4m3fn": "fp8_e4m3", "e5m2": "fp8_e5m2"}[fmt]


def op_kwargs(p: Problem, t: Dict[str, torch.Tensor]) -> dict:
    """The op's keyword arguments for problem p over tensors t (inputs and
    outputs by name, on one device)."""
    c = p.case
    kw = dict(cos_sin_cache=t["cos_sin"], positions=t["positions"],
              q_scale=c.scales[0], k_scale=c.scales[1],
              scale_convention="multiply" if c.multiply else "divide",
              cache_dtype=fp8_string(c.fmt), q_out_dtype=fp8_string(c.fmt))
    if isinstance(c, Mla):
        q_rope, q_nope = ropekv.mla_query_views(t["q"], c.latent)
        q_rope_out, q_nope_out = ropekv.mla_query_views(t["q_out"], c.latent)
        k_cache_rope, k_cache_nope = ropekv.mla_cache_single(t["cache"], c.latent)
        kv = t["kv_a"].unsqueeze(1)
        kw.update(kind="mla", rope_style="interleaved", q_rope=q_rope, q_nope=q_nope,
                  k_rope=kv[..., c.latent:], k_nope=kv[..., :c.latent], q_rope_out=q_rope_out,
                  q_nope_out=q_nope_out, k_cache_rope=k_cache_rope, k_cache_nope=k_cache_nope,
                  slot_mapping=t["slots"])
        return kw
    views = ropekv.fused_qkv_views(t["qkv"], c.hq, c.hk, c.d, c.r)
    q_rope_out, q_nope_out = ropekv.split_heads(t["q_out"], c.r)
    k_rope, k_nope, v = ropekv.nhd_kv_cache(t["k_cache"], t["v_cache"], c.r)
    kw.update(q_rope=views.q_rope, q_nope=views.q_nope, k_rope=views.k_rope,
              k_nope=views.k_nope, v=views.v, q_rope_out=q_rope_out, q_nope_out=q_nope_out,
              k_cache_rope=k_rope, k_cache_nope=k_nope, v_cache=v, v_scale=c.scales[2],
              rope_style="interleaved" if c.interleaved else "neox")
    if c.page_table:
        kw.update({k: t[k] for k in ("kv_indices", "kv_indptr", "batch_indices", "kv_positions")})
    else:
        kw.update(slot_mapping=t["slots"])
    return kw


def tensors_on(p: Problem, device: str) -> Dict[str, torch.Tensor]:
    """Fresh copies of p's inputs and outputs on `device`."""
    return {k: v.clone().to(device) for k, v in {**p.inputs, **p.outputs}.items()}


def run_op(p: Problem, device: str = "cpu", **extra) -> Dict[str, torch.Tensor]:
    """Runs the op on `device`; returns its outputs, on the CPU."""
    t = tensors_on(p, device)
    ropekv.rope_quantize_append(**op_kwargs(p, t), **extra)
    return {k: t[k].cpu() for k in p.outputs}


def with_case(p: Problem, **changes) -> Problem:
    """p with its case changed but its data kept (for tests that must fail)."""
    return dataclasses.replace(p, case=dataclasses.replace(p.case, **changes))


# ---------------------------------------------------------------- the C++ host backend

_NAMES = {torch.bfloat16: b"bf16", torch.float16: b"fp16", torch.float32: b"fp32"}


def host_reference_library():
    """The ctypes handle of ropekv_host_reference.so, or None when not built."""
    path = os.environ.get("ROPEKV_HOST_REFERENCE")
    return ctypes.CDLL(path) if path else None


def _ptr(t: Optional[torch.Tensor]):
    return ctypes.c_void_p(0 if t is None else t.data_ptr())


def run_host_reference(lib, p: Problem) -> Dict[str, torch.Tensor]:
    """The same call built with the C++ API's helpers, on the host backend."""
    c, i = p.case, p.inputs
    out = {k: v.clone() for k, v in p.outputs.items()}
    msg = ctypes.create_string_buffer(256)
    i64, f32, fmt = ctypes.c_int64, ctypes.c_float, c.fmt.encode()
    if isinstance(c, Mla):
        status = lib.ropekv_ref_mla(
            _ptr(i["q"]), _ptr(i["kv_a"]), _NAMES[c.in_dtype], i64(c.nnz), i64(c.h),
            i64(c.latent), i64(c.r), _ptr(out["q_out"]), fmt, _ptr(out["cache"]), fmt,
            i64(c.num_pages), i64(c.page_size), _ptr(i["cos_sin"]), i64(c.max_pos),
            _ptr(i["positions"]), _ptr(i["slots"]), f32(c.scales[0]), f32(c.scales[1]),
            ctypes.c_int(int(c.multiply)), msg, ctypes.c_int(256))
    else:
        pt = c.page_table
        status = lib.ropekv_ref_gqa(
            _ptr(i["qkv"]), _NAMES[c.in_dtype], i64(c.nnz), i64(c.hq), i64(c.hk), i64(c.d),
            i64(c.r), ctypes.c_int(int(c.interleaved)), _ptr(out["q_out"]), fmt,
            _ptr(out["k_cache"]), _ptr(out["v_cache"]), fmt, i64(c.num_pages),
            i64(c.page_size), _ptr(i["cos_sin"]), b"fp32", i64(c.max_pos), _ptr(i["positions"]),
            _ptr(None if pt else i["slots"]), _ptr(i.get("kv_indices")),
            i64(i["kv_indices"].numel() if pt else 0), _ptr(i.get("kv_indptr")),
            i64(i["kv_indptr"].numel() - 1 if pt else 0), _ptr(i.get("batch_indices")),
            _ptr(i.get("kv_positions")), f32(c.scales[0]), f32(c.scales[1]), f32(c.scales[2]),
            ctypes.c_int(int(c.multiply)), msg, ctypes.c_int(256))
    assert status == 0, msg.value.decode()
    return out


# ---------------------------------------------------------------- unfused PyTorch

def unfused(p: Problem, device: str = "cpu", quant=None) -> Dict[str, torch.Tensor]:
    """GQA in plain PyTorch on `device`: RoPE in float32, then quantization,
    then the write of each real token's rows into its slot. quant(x, scale)
    gives uint8 codes; by default the tests' table encoder with the case's
    format and convention. Returns the outputs, on the CPU."""
    c, t = p.case, tensors_on(p, device)
    if quant is None:
        quant = lambda x, s: quantize(x, c.fmt, s, c.multiply)  # noqa: E731
    heads = t["qkv"].view(c.nnz, c.hq + 2 * c.hk, c.d).float()
    q, k, v = heads[:, :c.hq], heads[:, c.hq:c.hq + c.hk], heads[:, c.hq + c.hk:]
    cs = t["cos_sin"][t["positions"]]
    cos, sin = cs[:, None, :c.r // 2], cs[:, None, c.r // 2:]
    q = torch.cat((rope(q[..., :c.r], cos, sin, c.interleaved), q[..., c.r:]), dim=-1)
    k = torch.cat((rope(k[..., :c.r], cos, sin, c.interleaved), k[..., c.r:]), dim=-1)
    qs, ks, vs = (quant(x, s) for x, s in zip((q, k, v), c.scales))
    slots = t["slots"]
    real = slots >= 0
    t["q_out"][real] = qs[real]
    t["k_cache"].view(-1, c.hk, c.d)[slots[real]] = ks[real]
    t["v_cache"].view(-1, c.hk, c.d)[slots[real]] = vs[real]
    return {key: t[key].cpu() for key in p.outputs}
