"""The op on a CUDA device and under torch 2.x machinery: bit-identical with
the CPU op, the float8 dtypes against vLLM's unfused reference,
torch.compile(fullgraph=True), CUDA graph capture and replay with new slots
and padding, torch.library.opcheck. Each test skips, saying why, where its
device or torch feature is missing (e.g. in CI: no GPU, torch 1.13)."""

import pytest
import torch

import ropekv
from cases import CASES, GUARD, Gqa, make, op_kwargs, run_op, tensors_on, unfused
from reference import fp8_steps

cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="no CUDA device (the GPU machine runs these: scripts/gpu_torch.sh)")
float8 = pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"),
                            reason=f"torch {torch.__version__} has no float8 dtypes")
compile_ = pytest.mark.skipif(not hasattr(torch, "compile"),
                              reason=f"torch {torch.__version__} has no torch.compile")
opcheck = pytest.mark.skipif(not hasattr(getattr(torch, "library", None), "opcheck"),
                             reason=f"torch {torch.__version__} has no torch.library.opcheck")


@cuda
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_op_equals_cpu_op(name):
    p = make(CASES[name])
    got, want = run_op(p, "cuda"), run_op(p, "cpu")
    for key in want:
        assert torch.equal(got[key], want[key]), key
    assert (got["q_out"] != GUARD).any()


@cuda
@pytest.mark.parametrize("pdl,early", [(True, False), (True, True)])
def test_cuda_pdl_options_write_the_same(pdl, early):
    p = make(CASES["neox-page-table"])
    got = run_op(p, "cuda", pdl=pdl, indices_ready_before_previous_kernel=early)
    want = run_op(p, "cpu")
    assert all(torch.equal(got[k], want[k]) for k in want)


@cuda
def test_cuda_device_scales_equal_host_scales():
    c = CASES["multiply-fp16"]
    p = make(c)
    t = tensors_on(p, "cuda")
    kw = op_kwargs(p, t)
    kw.update(q_scale=torch.tensor([c.scales[0]], device="cuda"),
              k_scale=torch.tensor([c.scales[1]], device="cuda"),
              v_scale=torch.tensor([c.scales[2]], device="cuda"))
    ropekv.rope_quantize_append(**kw)
    want = run_op(p, "cpu")
    assert all(torch.equal(t[k].cpu(), want[k]) for k in want)


@cuda
def test_cuda_tensor_on_another_device_raises():
    p = make(CASES["neox-slots"])
    kw = op_kwargs(p, tensors_on(p, "cuda"))
    kw["positions"] = kw["positions"].cpu()
    with pytest.raises(ValueError, match="positions is on cpu"):
        ropekv.rope_quantize_append(**kw)


def _vllm_quant(out_dtype):
    """vLLM's static FP8 quantization: x / scale, clamped to the format's
    range, then torch's conversion (as uint8 codes)."""
    top = torch.finfo(out_dtype).max
    return lambda x, s: (x / s).clamp(-top, top).to(out_dtype).view(torch.uint8)


@cuda
@float8
@pytest.mark.parametrize("name", ["neox-slots", "interleaved-slots", "saturating",
                                  "partial-rotary-e5m2"])
def test_cuda_float8_tensors_against_vllm_unfused(name):
    """Caches and query output as torch.float8 tensors (cache_dtype 'auto'):
    the same bytes as uint8 tensors, and within one FP8 step of vLLM's unfused
    ops (torch's own float8 conversion)."""
    c = CASES[name]
    p = make(c)
    out_dtype = torch.float8_e5m2 if c.fmt == "e5m2" else torch.float8_e4m3fn
    t = tensors_on(p, "cuda")
    f8 = {k: t[k].view(out_dtype) for k in p.outputs}
    kw = op_kwargs(p, {**t, **f8})
    kw.update(cache_dtype="auto", q_out_dtype="auto")
    ropekv.rope_quantize_append(**kw)
    got = {k: t[k].cpu() for k in p.outputs}
    as_uint8 = run_op(p, "cuda")
    want = unfused(p, "cuda", _vllm_quant(out_dtype))  # vLLM's unfused ops
    for key in want:
        assert torch.equal(got[key], as_uint8[key]), key
        assert int(fp8_steps(got[key], want[key]).max()) <= 1, key


class _Layer(torch.nn.Module):
    """The op inside a module, as an engine's attention layer calls it."""

    def __init__(self, c: Gqa):
        super().__init__()
        self.c = c

    def forward(self, qkv, cos_sin, positions, slots, q_out, k_cache, v_cache):
        c = self.c
        views = ropekv.fused_qkv_views(qkv, c.hq, c.hk, c.d, c.r)
        q_rope_out, q_nope_out = ropekv.split_heads(q_out, c.r)
        k_rope, k_nope, v = ropekv.nhd_kv_cache(k_cache, v_cache, c.r)
        ropekv.rope_quantize_append(
            q_rope=views.q_rope, q_nope=views.q_nope, k_rope=views.k_rope, k_nope=views.k_nope,
            v=views.v, cos_sin_cache=cos_sin, positions=positions, q_rope_out=q_rope_out,
            q_nope_out=q_nope_out, k_cache_rope=k_rope, k_cache_nope=k_nope, v_cache=v,
            slot_mapping=slots, q_scale=c.scales[0], k_scale=c.scales[1], v_scale=c.scales[2],
            cache_dtype="fp8_e4m3", q_out_dtype="fp8_e4m3")
        return q_out


def _layer_args(p, device):
    t = tensors_on(p, device)
    return t, (t["qkv"], t["cos_sin"], t["positions"], t["slots"], t["q_out"], t["k_cache"],
               t["v_cache"])


@cuda
@compile_
def test_torch_compile_fullgraph():
    c = Gqa(r=32, seed=21)
    p = make(c)
    compiled = torch.compile(_Layer(c), fullgraph=True)
    t, args = _layer_args(p, "cuda")
    compiled(*args)
    torch.cuda.synchronize()
    want = run_op(p, "cpu")
    assert all(torch.equal(t[k].cpu(), want[k]) for k in want)
    # A second step with other slots and padding, through the same compiled code.
    p.inputs["slots"][:] = torch.flip(p.inputs["slots"], (0,))
    p.inputs["slots"][0] = -1
    t, args = _layer_args(p, "cuda")
    compiled(*args)
    torch.cuda.synchronize()
    want = run_op(p, "cpu")
    assert all(torch.equal(t[k].cpu(), want[k]) for k in want)


@cuda
def test_cuda_graph_replay_with_new_slots_and_padding():
    """One capture; before each replay the engine writes new inputs, positions
    and slots (padding included) into the captured buffers."""
    c = Gqa(nnz=8, seed=22)
    p = make(c)
    layer = _Layer(c)
    t, args = _layer_args(p, "cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        layer(*args)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        layer(*args)
    g = torch.Generator().manual_seed(23)
    for step in range(3):
        fresh = make(Gqa(nnz=8, seed=100 + step))
        slots = torch.randperm(c.num_pages * c.page_size, generator=g)[:c.nnz]
        slots[step::3] = -1
        fresh.inputs["slots"] = slots
        for key, value in {**fresh.inputs, **fresh.outputs}.items():
            t[key].copy_(value)
        graph.replay()
        torch.cuda.synchronize()
        want = run_op(fresh, "cpu")
        for key in want:
            assert torch.equal(t[key].cpu(), want[key]), (step, key)


@opcheck
@pytest.mark.parametrize("name", ["neox-slots", "neox-page-table", "mla"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_opcheck(name, device):
    """Schema, fake-tensor kernel, autograd registration and AOT dispatch checks."""
    p = make(CASES[name])
    kw = op_kwargs(p, tensors_on(p, device))
    torch.library.opcheck(torch.ops.ropekv.rope_quantize_append.default,
                          ropekv.op_arguments(**kw))
