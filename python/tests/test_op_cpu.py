"""The op on the CPU (the host backend): against the C++ host backend called
directly (bit for bit), against unfused PyTorch (within one FP8 step),
padding, checked mode, bad input, the Meta kernel and the FlashInfer-style
wrapper. Runs on any torch from 1.13."""

import re

import pytest
import torch

import ropekv
from cases import (CASES, GUARD, Gqa, Mla, host_reference_library, make, op_kwargs,
                   run_host_reference, run_op, tensors_on, unfused, with_case)
from reference import fp8_encode, fp8_steps, rope

GQA_CASES = sorted(k for k, c in CASES.items() if isinstance(c, Gqa))


@pytest.fixture(scope="module")
def host_ref():
    lib = host_reference_library()
    if lib is None:
        pytest.skip("ROPEKV_HOST_REFERENCE is not set (ctest sets it to ropekv_host_reference.so)")
    return lib


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_op_equals_host_backend(name, host_ref):
    p = make(CASES[name])
    got = run_op(p)
    want = run_host_reference(host_ref, p)
    for key in want:
        assert torch.equal(got[key], want[key]), key
    # The call wrote something: every real token's query row changed.
    real = p.inputs["slots"] >= 0
    assert (got["q_out"][real] != GUARD).flatten(1).any(dim=1).all()


def test_host_comparison_tells_calls_apart(host_ref):
    """The comparison above fails for a call that differs in style, convention or one scale."""
    p = make(CASES["neox-slots"])
    got = run_op(p)
    for change in (dict(interleaved=True), dict(multiply=True), dict(scales=(0.05, 0.08, 0.111))):
        want = run_host_reference(host_ref, with_case(p, **change))
        assert not all(torch.equal(got[k], want[k]) for k in want), change


@pytest.mark.parametrize("name", GQA_CASES)
def test_cpu_op_within_one_fp8_step_of_unfused(name):
    p = make(CASES[name])
    got, want = run_op(p), unfused(p)
    for key in want:
        assert int(fp8_steps(got[key], want[key]).max()) <= 1, key
    # Most elements agree exactly (float32 RoPE with and without a fused multiply-add).
    assert float((got["q_out"] == want["q_out"]).float().mean()) > 0.9


def test_padding_tokens_write_nothing():
    c = Gqa(nnz=8, padding=(0, 3, 7), seed=11)
    p = make(c)
    got = run_op(p)
    slots = p.inputs["slots"]
    pad = slots < 0
    assert (got["q_out"][pad] == GUARD).all()
    # Each cache changed exactly at the real tokens' slots.
    for key in ("k_cache", "v_cache"):
        touched = (got[key].view(-1, c.hk * c.d) != GUARD).any(dim=1).nonzero().flatten()
        assert sorted(touched.tolist()) == sorted(slots[~pad].tolist())


def test_checked_mode_skips_and_counts_bad_slots():
    c = Gqa(nnz=5, padding=(1,), seed=12)
    p = make(c)
    p.inputs["slots"][3] = c.num_pages * c.page_size + 4  # beyond the cache
    skipped = torch.zeros(1, dtype=torch.int64)
    got = run_op(p, checked=True, skipped_tokens=skipped)
    assert int(skipped) == 1
    assert (got["q_out"][3] == GUARD).all() and (got["q_out"][1] == GUARD).all()
    assert (got["q_out"][0] != GUARD).any()


def _snapshot(kw):
    return {k: v.clone() for k, v in kw.items() if isinstance(v, torch.Tensor)}


def _unchanged(kw, before):
    return all(torch.equal(kw[k], v) for k, v in before.items())


def _gqa_kwargs(seed):
    p = make(Gqa(seed=seed))
    return op_kwargs(p, tensors_on(p, "cpu"))


BAD = {
    "cos_sin_cache width": (lambda kw: kw.update(cos_sin_cache=kw["cos_sin_cache"][:, :32]),
                            "cos_sin_cache.extent[1] must equal the rotary dim R"),
    "odd rotary dim": (lambda kw: kw.update(q_rope=kw["q_rope"][..., :63],
                                            k_rope=kw["k_rope"][..., :63]),
                       "rotary dim R (q_rope.extent[2]) must be even"),
    "V cache over the K cache": (lambda kw: kw.update(v_cache=kw["k_cache_rope"]),
                                 "k_cache_rope and v_cache must not overlap"),
    "uint8 cache without its format": (lambda kw: kw.update(cache_dtype="auto"),
                                       "k_cache_rope is a uint8 tensor"),
    "unknown kind": (lambda kw: kw.update(kind="mqa"), "kind must be 'gqa' or 'mla'"),
    "slots and a page table": (lambda kw: kw.update(kv_indices=kw["slot_mapping"]),
                               "give either slot_mapping or the page table"),
    "int32 scale tensor": (lambda kw: kw.update(q_scale=torch.ones(1, dtype=torch.int32)),
                           "q_scale must be a float32 tensor of one element"),
    "non-positive host scale": (lambda kw: kw.update(k_scale=0.0), "k_scale"),
    "query output too short": (lambda kw: kw.update(q_rope_out=kw["q_rope_out"][:3]),
                               "q_rope_out.extent[0]"),
    "float64 input": (lambda kw: kw.update(v=kw["v"].double()), "v has dtype Double"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_raises_and_writes_nothing(name):
    mutate, message = BAD[name]
    kw = _gqa_kwargs(13)
    mutate(kw)
    before = _snapshot(kw)
    with pytest.raises(ValueError, match="ropekv: .*" + re.escape(message)):
        ropekv.rope_quantize_append(**kw)
    assert _unchanged(kw, before)


def test_meta_kernel_checks_shapes():
    """On meta tensors the op runs the library's rules; views of one buffer
    share a storage there too, so overlaps are seen."""
    p = make(Gqa(seed=14))
    ropekv.rope_quantize_append(**op_kwargs(p, tensors_on(p, "meta")))
    kw = op_kwargs(p, tensors_on(p, "meta"))
    kw["cos_sin_cache"] = kw["cos_sin_cache"][:, :32]
    with pytest.raises(ValueError, match="cos_sin_cache.extent"):
        ropekv.rope_quantize_append(**kw)
    kw = op_kwargs(p, tensors_on(p, "meta"))
    kw["v_cache"] = kw["k_cache_rope"]
    with pytest.raises(ValueError, match="must not overlap"):
        ropekv.rope_quantize_append(**kw)


def test_meta_kernel_writes_nothing():
    """The Meta kernel, dispatched to directly with real CPU tensors, checks
    the call and writes none of them."""
    kw = _gqa_kwargs(15)
    before = _snapshot(kw)
    op = torch.ops.ropekv.rope_quantize_append.default
    args = ropekv.op_arguments(**kw)
    # Meta in the thread's included keys outranks the CPU tensors' own key
    # (as when fake tensors run a kernel; torch 1.x and 2.x name it apart).
    if hasattr(torch._C, "_set_meta_in_tls_dispatch_include"):
        torch._C._set_meta_in_tls_dispatch_include(True)
        try:
            op(*args)
        finally:
            torch._C._set_meta_in_tls_dispatch_include(False)
    else:
        torch._C._add_meta_to_tls_dispatch_include()
        try:
            op(*args)
        finally:
            torch._C._remove_meta_from_tls_dispatch_include()
    assert _unchanged(kw, before)
    # The CPU kernel on the same arguments does write (the comparison can fail).
    op(*args)
    assert not _unchanged(kw, before)


def test_fake_tensors_trace_without_writing():
    from torch._subclasses.fake_tensor import FakeTensorMode
    kw = _gqa_kwargs(16)
    before = _snapshot(kw)
    with FakeTensorMode() as mode:
        fake = {k: (mode.from_tensor(v) if isinstance(v, torch.Tensor) else v)
                for k, v in kw.items()}
        ropekv.rope_quantize_append(**fake)
    assert _unchanged(kw, before)


# ---------------------------------------------------------------- FlashInfer wrapper

def _flashinfer_call(p, quant_scale_q: float, quant_scale_kv: float, out_dtype: torch.dtype):
    """FlashInfer-style arguments (page table, (k_cache, v_cache)) for GQA
    problem p; float32 outputs are the op's rotated values (no scale
    applies), uint8 outputs e4m3fn codes. Returns (q_out, k_cache, v_cache)."""
    c, i = p.case, p.inputs
    views = ropekv.fused_qkv_views(i["qkv"], c.hq, c.hk, c.d, c.r)
    q_rope_out = torch.zeros(c.nnz, c.hq, c.r, dtype=out_dtype)
    q_nope_out = torch.zeros(c.nnz, c.hq, c.d - c.r, dtype=out_dtype)
    k_cache = torch.zeros(c.num_pages, c.page_size, c.hk, c.d, dtype=out_dtype)
    v_cache = torch.zeros_like(k_cache)
    ropekv.flashinfer.rope_quantize_fp8_append_paged_kv_cache(
        views.q_rope, views.k_rope, views.q_nope, views.k_nope, views.v, i["cos_sin"],
        i["positions"], (k_cache, v_cache), i["kv_indices"], i["kv_indptr"],
        i["batch_indices"], i["kv_positions"], is_neox=not c.interleaved,
        quantize_dtype="fp8_e4m3", quant_scale_q=quant_scale_q, quant_scale_kv=quant_scale_kv,
        page_size=c.page_size, q_rope_out=q_rope_out, q_nope_out=q_nope_out)
    return torch.cat((q_rope_out, q_nope_out), dim=-1), k_cache, v_cache


def _f32(x):
    return torch.tensor(x, dtype=torch.float32)


def _telling_pair():
    """A scale m and a bf16 value v with fp8(v * m) != fp8(v / fl(1 / m)) in
    e4m3fn (rare: the two float32 results must straddle a rounding boundary),
    found by search over every bf16 value in (0.01, 400)."""
    b = torch.arange(0, 65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    b = b[(b > 0.01) & (b < 400)]
    for m in (0.9, 0.7, 1.3, 0.55, 2.2):
        diff = fp8_encode("e4m3fn", b * _f32(m)) != fp8_encode("e4m3fn", b / (1 / _f32(m)))
        if diff.any():
            return m, float(b[diff][-1])
    raise AssertionError("no (scale, bf16 value) tells the conventions apart")


@pytest.mark.parametrize("scales", [(0.7, 1.3), (3.0, 0.1), (1.0 / 3.0, "telling")])
def test_flashinfer_wrapper_multiplies_exactly(scales):
    """FlashInfer's scales multiply: the wrapper's FP8 codes are exactly
    fp8(value * float32(scale)) of the op's own float32 values (the
    convention alone: the RoPE is checked against reference.rope elsewhere),
    for every element, the unwritten ones zero in both; with the telling
    pair, the v elements set to its value show that dividing by the
    reciprocal would have given other codes."""
    sq, skv = scales
    telling = skv == "telling"
    skv, v0 = _telling_pair() if telling else (skv, 1.0)
    c = Gqa(nnz=6, r=32, padding=(4,), seed=17, amplitude=40.0, page_table=True)
    p = make(c)
    p.inputs["qkv"].view(c.nnz, c.hq + 2 * c.hk, c.d)[:, c.hq + c.hk:, :8] = v0
    values = _flashinfer_call(p, 1.0, 1.0, torch.float32)
    codes = _flashinfer_call(p, sq, skv, torch.uint8)
    for got, val, s in zip(codes, values, (sq, skv, skv)):
        assert (val != 0).any()
        want = fp8_encode("e4m3fn", val * _f32(s)).view(val.shape)
        assert torch.equal(got, want)
    if telling:
        at_v0 = values[2] == v0
        assert at_v0.any()
        divided = fp8_encode("e4m3fn", values[2][at_v0] / (1 / _f32(skv)))
        assert not torch.equal(codes[2][at_v0], divided)


def test_flashinfer_wrapper_mla():
    """MLA through the wrapper: 2-D k_rope / k_nope, (ckv, kpe) caches."""
    c = Mla(nnz=3, padding=(2,), seed=18)
    p = make(c)
    i = p.inputs
    q_rope, q_nope = ropekv.mla_query_views(i["q"], c.latent)
    k_nope, k_rope = i["kv_a"][:, :c.latent], i["kv_a"][:, c.latent:]
    ckv = torch.zeros(c.num_pages, c.page_size, c.latent, dtype=torch.uint8)
    kpe = torch.zeros(c.num_pages, c.page_size, c.r, dtype=torch.uint8)
    i32 = lambda x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    # Token 0 -> page 2 entry 3; token 1 -> page 0 entry 9; token 2 is padding.
    q_rope_out, q_nope_out = ropekv.flashinfer.rope_quantize_fp8_append_paged_kv_cache(
        q_rope, k_rope, q_nope, k_nope, None, i["cos_sin"], i["positions"], (ckv, kpe),
        i32([2, 0, 3]), i32([0, 1, 2, 3]), i32([0, 1, -1]), i32([3, 9, 0]), is_neox=False,
        quantize_dtype="fp8_e4m3", quant_scale_q=2.0, quant_scale_kv=0.5, page_size=c.page_size)
    # Allocated in the format named: float8 where torch has it, else uint8 codes.
    assert q_rope_out.dtype == getattr(torch, "float8_e4m3fn", torch.uint8)
    assert q_rope_out.shape == q_rope.shape
    assert q_nope_out.shape == q_nope.shape
    cs = i["cos_sin"][i["positions"][:2]]
    k_rot = rope(k_rope[:2], cs[:, :c.r // 2], cs[:, c.r // 2:], True)
    want_kpe = fp8_encode("e4m3fn", k_rot * 0.5).view(2, c.r)
    want_ckv = fp8_encode("e4m3fn", k_nope[:2].float() * 0.5).view(2, c.latent)
    for t, (page, entry) in enumerate([(2, 3), (0, 9)]):
        assert int(fp8_steps(kpe[page, entry], want_kpe[t]).max()) <= 1
        assert torch.equal(ckv[page, entry], want_ckv[t])
    assert int((ckv != 0).any(dim=-1).sum()) == 2  # nothing else written
