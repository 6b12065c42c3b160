#!/usr/bin/env python3
"""One decode step of an attention layer's front half on a CUDA device: the
QKV projection GEMM, then RoPE + FP8 quantization + KV-cache write, fused
(ropekv's op) or unfused (the PyTorch ops vLLM runs without the fusion), each
eager and under torch.compile, each captured in a CUDA graph of `--calls`
layer steps and timed by replays (CUDA events, median). The GEMM alone is the
reference of the same run.

    PYTHONPATH=<build>/python python3 perf/layer_bench.py --out results.json

Rows: shape, tokens, variant, us per layer step, and the front half's time
above the GEMM. Shapes: gpt-oss-120b TP8 (hidden 2880, 8 query heads, 1 KV
head, head dim 64) and llama-3.1-8b (4096, 32, 8, 128); bf16 activations and
weights, e4m3fn query output and NHD caches, page size 16, NeoX RoPE,
dequantization scales, every token real (no padding), one buffer set.
"""

import argparse
import json
import statistics

import torch

import ropekv

SHAPES = {
    "gpt-oss-120b-tp8": dict(hidden=2880, hq=8, hk=1, d=64),
    "llama-3.1-8b": dict(hidden=4096, hq=32, hk=8, d=128),
}
FP8_MAX = 448.0


class Step:
    """The buffers of one layer step with `nnz` tokens."""

    def __init__(self, shape: dict, nnz: int, page_size: int = 16, max_pos: int = 8192):
        dev = "cuda"
        self.hq, self.hk, self.d = shape["hq"], shape["hk"], shape["d"]
        width = (self.hq + 2 * self.hk) * self.d
        self.x = torch.randn(nnz, shape["hidden"], device=dev, dtype=torch.bfloat16)
        self.w = torch.randn(width, shape["hidden"], device=dev, dtype=torch.bfloat16) * 0.02
        inv = 1.0 / (10000.0 ** (torch.arange(0, self.d, 2, device=dev).float() / self.d))
        ang = torch.arange(max_pos, device=dev).float()[:, None] * inv[None, :]
        self.cos_sin = torch.cat((ang.cos(), ang.sin()), dim=1)
        self.positions = torch.randint(0, max_pos, (nnz,), device=dev)
        pages = (4 * nnz + page_size - 1) // page_size
        self.slots = torch.randperm(pages * page_size, device=dev)[:nnz]
        cache = (pages, page_size, self.hk, self.d)
        self.k_cache = torch.zeros(cache, device=dev, dtype=torch.uint8)
        self.v_cache = torch.zeros(cache, device=dev, dtype=torch.uint8)
        self.q_out = torch.empty(nnz, self.hq, self.d, device=dev, dtype=torch.uint8)
        self.q_scale = torch.tensor([0.05], device=dev)
        self.k_scale = torch.tensor([0.06], device=dev)
        self.v_scale = torch.tensor([0.07], device=dev)

    def gemm(self):
        return self.x @ self.w.t()

    def fused(self):
        qkv = self.gemm()
        q = ropekv.fused_qkv_views(qkv, self.hq, self.hk, self.d)
        ropekv.rope_quantize_append(
            q_rope=q.q_rope, k_rope=q.k_rope, v=q.v, cos_sin_cache=self.cos_sin,
            positions=self.positions, q_rope_out=self.q_out, k_cache_rope=self.k_cache,
            v_cache=self.v_cache, slot_mapping=self.slots, q_scale=self.q_scale,
            k_scale=self.k_scale, v_scale=self.v_scale, cache_dtype="fp8_e4m3",
            q_out_dtype="fp8_e4m3")

    def unfused(self):
        """vLLM's unfused ops: rotary embedding (forward_native), static FP8
        quantization of q, k and v, reshape_and_cache's slot write."""
        qkv = self.gemm()
        nnz = qkv.shape[0]
        q, k, v = qkv.split([self.hq * self.d, self.hk * self.d, self.hk * self.d], dim=-1)
        cos, sin = self.cos_sin[self.positions].chunk(2, dim=-1)
        cos, sin = cos[:, None, :], sin[:, None, :]

        def rotate(x, heads):
            x = x.view(nnz, heads, self.d).float()
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

        def quant(x, s):
            return (x / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(torch.uint8)

        self.q_out.copy_(quant(rotate(q, self.hq), self.q_scale))
        kc = self.k_cache.view(-1, self.hk, self.d)
        vc = self.v_cache.view(-1, self.hk, self.d)
        kc.index_copy_(0, self.slots, quant(rotate(k, self.hk), self.k_scale))
        vc.index_copy_(0, self.slots, quant(v.view(nnz, self.hk, self.d).float(), self.v_scale))


def time_graph(fn, calls: int, replays: int) -> float:
    """Median us per call of `calls` back-to-back calls captured in one graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="8,16,64,256,1024")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--replays", type=int, default=15)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, ropekv {ropekv.library_path}")
    rows = []
    for name, shape in SHAPES.items():
        for nnz in (int(t) for t in args.tokens.split(",")):
            step = Step(shape, nnz)
            variants = {
                "gemm": step.gemm,
                "fused": step.fused,
                "fused-compiled": torch.compile(step.fused, fullgraph=True),
                "unfused": step.unfused,
                "unfused-compiled": torch.compile(step.unfused, fullgraph=True),
            }
            us = {v: time_graph(fn, args.calls, args.replays) for v, fn in variants.items()}
            for v, t in us.items():
                rows.append(dict(shape=name, tokens=nnz, variant=v, us=t,
                                 above_gemm_us=t - us["gemm"]))
            print(f"{name:18s} {nnz:5d} " + "  ".join(
                f"{v} {t:7.2f} (+{t - us['gemm']:.2f})" for v, t in us.items()), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(torch=torch.__version__, device=torch.cuda.get_device_name(),
                           calls=args.calls, replays=args.replays, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
