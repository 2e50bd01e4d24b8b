"""The GPU work the mover and reload figures of ``gpu_figures.py`` time: KV-shaped pages
to move, a 7B-shaped decode loop, and a draft reload on a side stream (CUDA events)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from benchmarks._gpu_arena import qwen05b_shapes


def event_time_s(fn: Callable[[], object], stream: Any = None) -> float:
    """Seconds ``fn``'s GPU work takes, by CUDA events around it on ``stream``."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    return float(start.elapsed_time(end)) / 1e3


class MoverBench:
    """``num`` moves of 7B target pages (28 layers x 32 KiB) from scattered blocks in
    ``[num, 2 num)`` to ``[0, num)`` of one flat buffer, and a plain copy of as many bytes."""

    def __init__(self, device: torch.device, num: int, gen: torch.Generator) -> None:
        from nightjar_ray.memory.kernels import PageLayout

        layers, page, slots = 28, 16 * 4 * 128 * 2 * 2, 2 * num
        self.buffer = torch.empty(layers * slots * page, dtype=torch.int8, device=device)
        self.buffer.random_(-128, 128, generator=gen)
        self.layout = PageLayout(tuple(i * slots * page for i in range(layers)), (page,) * layers)
        src = (num + torch.randperm(num, generator=gen, device=device)).tolist()
        self.moves = dict(zip(src, range(num), strict=True))
        self.pages = self.buffer.view(torch.int64).view(layers, slots, page // 8)
        self.src_idx = torch.tensor(src, device=device)
        self.dst_idx = torch.arange(num, device=device)
        self.nbytes = num * layers * page
        self.flat_src = torch.empty(self.nbytes, dtype=torch.int8, device=device)
        self.flat_src.random_(-128, 128, generator=gen)
        self.flat_dst = torch.empty_like(self.flat_src)

    def plain_copy(self) -> None:
        self.flat_dst.copy_(self.flat_src)

    def index_copy(self) -> None:
        self.pages.index_copy_(1, self.dst_idx, self.pages.index_select(1, self.src_idx))

    def moves_pages(self, fn: Callable[[], object]) -> bool:
        """Whether ``fn`` writes every source page over its (zeroed) destination."""
        self.pages[:, self.dst_idx] = 0
        fn()
        return bool(torch.equal(self.pages[:, self.dst_idx], self.pages[:, self.src_idx]))


def qwen7b_decode_shapes() -> list[tuple[int, int]]:
    """Per layer [in, out]: QKV (3584 -> 28x128 + 2x4x128), O, gate+up, down; then the LM
    head (3584 -> 152064). 28 layers: 7.07B parameters (the embedding is a lookup)."""
    hidden, mlp = 3584, 18944
    layer = [(hidden, hidden + 2 * 512), (hidden, hidden), (hidden, 2 * mlp), (mlp, hidden)]
    return [*layer * 28, (hidden, 152064)]


def qwen7b_decode_weights(device: torch.device, gen: torch.Generator) -> list[torch.Tensor]:
    """Random bf16 weights of :func:`qwen7b_decode_shapes` (std 0.02)."""
    out = []
    for shape in qwen7b_decode_shapes():
        w = torch.empty(shape, dtype=torch.bfloat16, device=device)
        out.append(w.normal_(0.0, 0.02, generator=gen))
    return out


def decode_step(x: torch.Tensor, weights: Sequence[torch.Tensor]) -> torch.Tensor:
    """One 7B-shaped decode step's matmuls for the batch ``x`` [tokens, 3584]."""
    for i in range(0, len(weights) - 1, 4):
        qkv, o, gate_up, down = weights[i : i + 4]
        h = (x @ qkv)[:, : x.shape[1]] @ o
        g, u = (h @ gate_up).chunk(2, dim=1)
        x = (torch.nn.functional.silu(g) * u) @ down
    return x @ weights[-1]


def draft_weights(
    device: torch.device, gen: torch.Generator
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    host, dev = [], []
    for shape in qwen05b_shapes():
        d = torch.empty(shape, dtype=torch.bfloat16, device=device).normal_(generator=gen)
        host.append(torch.empty(shape, dtype=torch.bfloat16, pin_memory=True).copy_(d))
        dev.append(d)
    return host, dev


def start_reload(
    host: Sequence[torch.Tensor], dev: Sequence[torch.Tensor], side: Any
) -> tuple[float, Any]:
    """Issue the reload on ``side`` (non-blocking copies); returns the host seconds the
    dispatch took and the event marking the copy's end."""
    t0 = time.perf_counter()
    with torch.cuda.stream(side):
        for d, h in zip(dev, host, strict=True):
            d.copy_(h, non_blocking=True)
        done = torch.cuda.Event(enable_timing=True)
        done.record(side)
    return time.perf_counter() - t0, done


def _timed_loop(x: torch.Tensor, weights: Sequence[torch.Tensor], steps: int) -> tuple[Any, Any]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        decode_step(x, weights)
    end.record()
    return start, end


def reload_round(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    steps: int,
    host: Sequence[torch.Tensor],
    dev: Sequence[torch.Tensor],
    side: Any,
) -> dict[str, float]:
    """One round. A GPU sleep holds the main stream while the host enqueues, so the copy
    (waiting on an event after it) and the loop start together."""
    out: dict[str, float] = {}
    for label in ("alone", "with", "alone_again"):
        torch.cuda.synchronize()
        torch.cuda._sleep(50_000_000)  # ~25 ms at 2 GHz: longer than the enqueueing
        go = torch.cuda.Event()
        go.record()
        done = None
        if label == "with":
            side.wait_event(go)
            out["dispatch_s"], done = start_reload(host, dev, side)
        start, end = _timed_loop(x, weights, steps)
        torch.cuda.synchronize()
        out[label] = float(start.elapsed_time(end))
        if done is not None:
            out["copy_end_over_loop_end"] = float(start.elapsed_time(done)) / out[label]
    return out
