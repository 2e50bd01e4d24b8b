"""FULL CUDA-graph replay against PIECEWISE and eager, per query length, on a stand-in 7B.

    python benchmarks/gpu_graph_replay.py [--max-gamma 4] [--num-reqs 1,8] [--layers 28]

What ``cuda_graphs: per-gamma`` is worth (docs/cuda-graphs.md): vLLM replays one FULL
graph for a decode step at the largest gamma and PIECEWISE graphs (graphs between
attention calls, attention eager) at smaller ones. This builds a decoder stack shaped like
a 7B model (Qwen2-7B: hidden 3584, intermediate 18944, 28 query / 4 KV heads of 128; bf16)
with a KV cache of ``--context`` tokens per request, and times one decode step of
``num_reqs`` requests at each query length 1..K+1 three ways: one FULL graph, PIECEWISE
(one graph per dense piece, SDPA attention eager between them) and eager. It prints one
JSON line per (num_reqs, query length), with the graph memory each capture added. CUDA
only (PyTorch alone, no vLLM); it refuses to run without a GPU.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

CUDA_REQUIRED = "gpu_graph_replay needs a CUDA GPU: torch.cuda.is_available() is False"


@dataclass(frozen=True)
class Shape:
    """A decoder layer's sizes (defaults: Qwen2-7B, the paper's 7B target family)."""

    hidden: int = 3584
    intermediate: int = 18944
    num_heads: int = 28
    num_kv_heads: int = 4
    head_dim: int = 128


class Layer:
    """One pre-norm decoder layer: norm, qkv, attention over a static KV cache, o_proj,
    norm, gated MLP. ``pre``/``post`` are the dense pieces vLLM's PIECEWISE mode graphs."""

    def __init__(self, shape: Shape, max_reqs: int, context: int, device: torch.device) -> None:
        def w(out: int, inp: int) -> torch.Tensor:
            return torch.randn(out, inp, dtype=torch.bfloat16, device=device) * inp**-0.5

        s = shape
        self.shape = s
        self.qkv = w((s.num_heads + 2 * s.num_kv_heads) * s.head_dim, s.hidden)
        self.o = w(s.hidden, s.num_heads * s.head_dim)
        self.gate_up = w(2 * s.intermediate, s.hidden)
        self.down = w(s.hidden, s.intermediate)
        kv = (max_reqs, s.num_kv_heads, context, s.head_dim)
        self.k_cache = torch.randn(kv, dtype=torch.bfloat16, device=device)
        self.v_cache = torch.randn(kv, dtype=torch.bfloat16, device=device)

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.rms_norm(x, (x.shape[-1],)), self.qkv)

    def attention(self, qkv: torch.Tensor, num_reqs: int, query_len: int) -> torch.Tensor:
        s = self.shape
        q, k, v = qkv.split(
            [s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim, s.num_kv_heads * s.head_dim],
            dim=-1,
        )
        q = q.view(num_reqs, query_len, s.num_heads, s.head_dim).transpose(1, 2)
        context = self.k_cache.shape[2]
        # NOTE: the step's new keys/values go into the cache's last slots (a KV write).
        new_k = k.view(num_reqs, query_len, s.num_kv_heads, s.head_dim).transpose(1, 2)
        new_v = v.view(num_reqs, query_len, s.num_kv_heads, s.head_dim).transpose(1, 2)
        self.k_cache[:num_reqs, :, context - query_len :].copy_(new_k)
        self.v_cache[:num_reqs, :, context - query_len :].copy_(new_v)
        out = F.scaled_dot_product_attention(
            q, self.k_cache[:num_reqs], self.v_cache[:num_reqs], enable_gqa=True
        )
        return out.transpose(1, 2).reshape(num_reqs * query_len, s.num_heads * s.head_dim)

    def post(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        h = x + F.linear(attn, self.o)
        gate, up = F.linear(F.rms_norm(h, (h.shape[-1],)), self.gate_up).chunk(2, dim=-1)
        return h + F.linear(F.silu(gate) * up, self.down)


def _step(layers: Sequence[Layer], x: torch.Tensor, num_reqs: int, query_len: int) -> torch.Tensor:
    for layer in layers:
        x = layer.post(x, layer.attention(layer.pre(x), num_reqs, query_len))
    return x


def _capture(
    fn: Callable[[], torch.Tensor], pool: Any
) -> tuple[torch.cuda.CUDAGraph, int, torch.Tensor]:
    """A CUDA graph of ``fn`` (after a side-stream warm-up), the device bytes the capture
    took (free memory before minus after) and the graph's static output."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    free_before = torch.cuda.mem_get_info()[0]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        output = fn()
    torch.cuda.synchronize()
    return graph, free_before - torch.cuda.mem_get_info()[0], output


@dataclass
class _Piece:
    """One layer under PIECEWISE: graphs before and after its eager attention, and the
    static tensors between them."""

    pre: torch.cuda.CUDAGraph
    post: torch.cuda.CUDAGraph
    layer: Layer
    qkv: torch.Tensor
    attn: torch.Tensor


def _piecewise_step(
    layers: Sequence[Layer], x: torch.Tensor, num_reqs: int, query_len: int
) -> tuple[Callable[[], None], int]:
    """A step replaying one graph per dense piece with eager attention between them (as
    vLLM's PIECEWISE mode splits at attention), and the bytes its captures took."""
    pool = torch.cuda.graph_pool_handle()
    pieces: list[_Piece] = []
    total_bytes = 0
    h = x
    for layer in layers:
        pre, pre_bytes, qkv = _capture(functools.partial(layer.pre, h), pool)
        attn = torch.empty(num_reqs * query_len, layer.o.shape[1], dtype=x.dtype, device=x.device)
        post, post_bytes, h = _capture(functools.partial(layer.post, h, attn), pool)
        pieces.append(_Piece(pre, post, layer, qkv, attn))
        total_bytes += pre_bytes + post_bytes

    def step() -> None:
        for piece in pieces:
            piece.pre.replay()
            piece.attn.copy_(piece.layer.attention(piece.qkv, num_reqs, query_len))
            piece.post.replay()

    return step, total_bytes


def _median_ms(run: Callable[[], Any], iters: int) -> float:
    for _ in range(3):
        run()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(statistics.median(times))


def time_query_len(
    layers: Sequence[Layer], num_reqs: int, query_len: int, iters: int
) -> dict[str, Any]:
    """FULL, PIECEWISE and eager step times (ms) at ``query_len`` tokens per request."""
    hidden = layers[0].shape.hidden
    device = layers[0].qkv.device
    x = torch.randn(num_reqs * query_len, hidden, dtype=torch.bfloat16, device=device)
    eager_ms = _median_ms(lambda: _step(layers, x, num_reqs, query_len), iters)

    full, full_bytes, _ = _capture(
        lambda: _step(layers, x, num_reqs, query_len), torch.cuda.graph_pool_handle()
    )
    full_ms = _median_ms(full.replay, iters)

    piecewise, piece_bytes = _piecewise_step(layers, x, num_reqs, query_len)
    piecewise_ms = _median_ms(piecewise, iters)
    del full, piecewise
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return {
        "num_reqs": num_reqs,
        "query_len": query_len,
        "gamma": query_len - 1,
        "full_ms": round(full_ms, 4),
        "piecewise_ms": round(piecewise_ms, 4),
        "eager_ms": round(eager_ms, 4),
        "piecewise_over_full": round(piecewise_ms / full_ms, 4),
        "full_graph_bytes": full_bytes,
        "piecewise_graph_bytes": piece_bytes,
    }


def run(
    max_gamma: int, num_reqs: Sequence[int], num_layers: int, context: int, iters: int
) -> list[dict[str, Any]]:
    """One result per (num_reqs, query length 1..max_gamma+1); CUDA only."""
    if not torch.cuda.is_available():
        raise SystemExit(CUDA_REQUIRED)
    device = torch.device("cuda")
    torch.manual_seed(0)
    shape = Shape()
    layers = [Layer(shape, max(num_reqs), context, device) for _ in range(num_layers)]
    device_name = torch.cuda.get_device_name(device)
    results = []
    for n in num_reqs:
        for q in range(1, max_gamma + 2):
            with torch.inference_mode():
                result = time_query_len(layers, n, q, iters)
            result.update(device=device_name, layers=num_layers, context=context)
            results.append(result)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu_graph_replay.py", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--max-gamma", type=int, default=4, help="K: query lengths 1..K+1.")
    parser.add_argument(
        "--num-reqs", default="1,8", help="Comma-separated decode batch sizes (requests)."
    )
    parser.add_argument("--layers", type=int, default=28, help="Decoder layers (7B: 28).")
    parser.add_argument("--context", type=int, default=1024, help="KV tokens per request.")
    parser.add_argument("--iters", type=int, default=50, help="Timed steps per mode.")
    args = parser.parse_args(argv)
    if args.max_gamma < 0 or args.layers < 1 or args.context < args.max_gamma + 1:
        parser.error("need --max-gamma >= 0, --layers >= 1, --context > --max-gamma")
    num_reqs = [int(n) for n in args.num_reqs.split(",")]
    if min(num_reqs) < 1:
        parser.error("--num-reqs: every batch size must be >= 1")
    for result in run(args.max_gamma, num_reqs, args.layers, args.context, args.iters):
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
