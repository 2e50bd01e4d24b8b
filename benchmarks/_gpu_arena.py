"""The arena figure of ``gpu_figures.py``: one elastic-memory cycle on a KV arena, timed.

Per setting (the target's and the draft's KV pages per block, layers target first)::

    setup      commit [0, N_orig) of every layer, fill it with random bytes
    expand     release the draft's layers [0, N_orig); commit the target's [N_orig, N_max)
    (live)     write random pages into a fraction of the region (blocks the pool handed out)
    contract   move the live region blocks below N_orig (the block mover), release the
               target's [N_orig, N_max)
    draft KV   commit the draft's layers [0, N_orig) again (before the draft reloads)

Sampled pages below N_orig are compared before and after each remap, and every moved
page with what was written at its source (``torch.equal``: bit for bit). Committed
bytes are the arena's ``resident_bytes()`` (and, on CUDA, the device's used memory);
a plain allocation of the same pool is measured for comparison. Times are wall clock
around each operation with the device synchronized: mapping and unmapping are host-side
driver calls, which events on a stream would not bracket.
"""

from __future__ import annotations

import argparse
import gc
import math
import mmap
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nightjar_ray.memory import plan_migration
from nightjar_ray.memory.arena import arena_unit_bytes
from nightjar_ray.memory.arena_budget import ArenaBudget, max_rounding_bytes, reserve_bytes
from nightjar_ray.memory.kernels import BlockMover, PageLayout, build_block_mover

ARENA_SCALES = ("small", "cpu", "medium", "full")
"""full: the pool on an 80 GB H100; medium: an eighth of it; cpu: 1,024 blocks (1.1 and
2.2 GB); small: 64 blocks (tests)."""

H100_80GB_BYTES = 81559 << 20
"""An H100 80GB HBM3's memory as nvidia-smi reports it."""
GPU_MEMORY_UTILIZATION = 0.9
"""deploy/gpu-7b.yaml and deploy/gpu-32b-tp2.yaml."""
NON_KV_PEAK_BYTES = 3 << 30
"""Assumed: activations at the profiled batch, CUDA graphs, allocator slack (per rank)."""
PAPER_TABLE6_MS = {"expand": 143.9, "contract": 11.9, "setting": "30B, 2 L20 GPUs (TP=2)"}


@dataclass(frozen=True)
class KVShape:
    """One model's KV cache on one rank; a page is one layer's K and V of one block."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_tokens: int = 16
    dtype_bytes: int = 2

    @property
    def page_bytes(self) -> int:
        return self.block_tokens * self.num_kv_heads * self.head_dim * 2 * self.dtype_bytes


def qwen05b_shapes() -> list[tuple[int, ...]]:
    """Qwen2.5-0.5B's parameter shapes (24 layers, hidden 896, 14 heads, 2 KV heads of
    64, MLP 4864, vocabulary 151936, tied embeddings): 494M parameters."""
    hidden, kv, mlp = 896, 2 * 64, 4864
    layer = [
        (hidden, hidden), (hidden,), (kv, hidden), (kv,), (kv, hidden), (kv,),
        (hidden, hidden), (mlp, hidden), (mlp, hidden), (hidden, mlp), (hidden,), (hidden,),
    ]  # fmt: skip
    return [(151936, hidden), *layer * 24, (hidden,)]


QWEN05B_BF16_BYTES = 2 * sum(math.prod(s) for s in qwen05b_shapes())


@dataclass(frozen=True)
class ArenaSetting:
    """A target/draft pair on one rank and its weights there (bf16)."""

    name: str
    target: KVShape
    draft: KVShape
    target_weight_bytes: int
    draft_weight_bytes: int

    @property
    def page_bytes(self) -> tuple[int, ...]:
        t, d = self.target, self.draft
        return (t.page_bytes,) * t.num_layers + (d.page_bytes,) * d.num_layers

    def num_stock_blocks(self) -> int:
        """Stock vLLM's pool on an 80 GB H100 at the deploy files' utilization."""
        budget = int(GPU_MEMORY_UTILIZATION * H100_80GB_BYTES) - NON_KV_PEAK_BYTES
        kv = budget - self.target_weight_bytes - self.draft_weight_bytes
        return kv // sum(self.page_bytes)


SETTINGS = (
    ArenaSetting(
        "7b", KVShape(28, 4, 128), KVShape(24, 2, 64), 2 * 7_615_616_512, QWEN05B_BF16_BYTES
    ),
    ArenaSetting(
        "32b-tp2-rank",
        KVShape(64, 8 // 2, 128),
        KVShape(24, 2 // 2, 64),
        2 * 32_763_876_352 // 2,
        QWEN05B_BF16_BYTES // 2,
    ),
)
"""DeepSeek-R1-Distill-Qwen-7B + 0.5B draft (deploy/gpu-7b.yaml); Qwen2.5-32B + 0.5B at
TP=2, one rank's share (deploy/gpu-32b-tp2.yaml)."""


@dataclass(frozen=True)
class PoolSizes:
    """One setting's pool at a scale, sized as the engine sizes it (engine/kv_rebind.py,
    engine/worker_memory.py): stock vLLM's block count, ``N_orig`` (stock less the blocks
    the arena's rounding to the device's unit needs), ``N_max`` (the largest pool whose
    expanded commit stays within stock's KV buffer and the draft's weights: what the engine's
    ``num_max_blocks`` computes; not imported, since engine/ imports pydantic and the
    figures run with PyTorch alone)."""

    num_stock_blocks: int
    num_orig_blocks: int
    num_max_blocks: int
    draft_weight_bytes: int
    stock_bytes: int
    """What stock vLLM commits: ``num_stock_blocks`` blocks of every layer + draft weights."""


def pool_sizes(setting: ArenaSetting, scale: str, unit_bytes: int) -> PoolSizes:
    """The pool at ``scale`` on a device whose arena commits ``unit_bytes`` at a time;
    smaller scales shrink the pool and the draft's weights by the same factor."""
    full = setting.num_stock_blocks()
    num_stock = {"full": full, "medium": full // 8, "cpu": 1024, "small": 64}[scale]
    draft = setting.draft_weight_bytes * num_stock // full
    pages = setting.page_bytes
    reserve = reserve_bytes(max_rounding_bytes(pages, unit_bytes), sum(pages)) // sum(pages)
    if reserve >= num_stock:
        raise ValueError(
            f"--scale {scale}: the arena's rounding to {unit_bytes} bytes needs "
            f"{reserve} of the pool's {num_stock} blocks; use a larger scale"
        )
    draft_layers = tuple(range(setting.target.num_layers, len(pages)))
    budget = ArenaBudget(pages, draft_layers, num_stock - reserve, unit_bytes, draft)
    stock = budget.stock_bytes(num_stock)
    num_max = budget.largest_num_max_blocks(stock)
    return PoolSizes(num_stock, num_stock - reserve, num_max, draft, stock)


def arena_figure(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Every setting at ``args.scale`` on ``device``."""
    from nightjar_ray.memory import arena as arena_module

    if not hasattr(arena_module, "build_kv_arena"):
        raise RuntimeError("nightjar_ray.memory.arena has no build_kv_arena in this checkout")
    return {
        "device": str(device),
        "scale": args.scale,
        "assumed": {
            "device_bytes": H100_80GB_BYTES,
            "gpu_memory_utilization": GPU_MEMORY_UTILIZATION,
            "non_kv_peak_bytes": NON_KV_PEAK_BYTES,
        },
        "paper_table6_ms": PAPER_TABLE6_MS,
        "settings": [_run_setting(s, args, device, arena_module.build_kv_arena) for s in SETTINGS],
    }


def _run_setting(
    setting: ArenaSetting, args: argparse.Namespace, device: torch.device, build: Any
) -> dict[str, Any]:
    sizes = pool_sizes(setting, args.scale, arena_unit_bytes(device))
    num_orig, num_max = sizes.num_orig_blocks, sizes.num_max_blocks
    plain = _plain_committed_bytes(device, num_orig * sum(setting.page_bytes))
    used0 = _device_used_bytes(device)
    arena = build(device, setting.page_bytes, num_max)
    try:
        rounds = _rounds(setting, arena, num_orig, args, device)
    finally:
        arena.release_blocks(range(len(setting.page_bytes)), 0, num_max)
        released = arena.resident_bytes()
        arena.close()
    rounds[-1]["after_release_all"] = released
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return _setting_result(setting, sizes, plain, rounds, used0, args)


def _rounds(
    setting: ArenaSetting,
    arena: Any,
    num_orig: int,
    args: argparse.Namespace,
    device: torch.device,
) -> list[dict[str, Any]]:
    cycle = ArenaCycle(setting, arena, num_orig, args, device)
    return [cycle.run_round() for _ in range(args.warmup + args.rounds)]


def _setting_result(
    setting: ArenaSetting,
    sizes: PoolSizes,
    plain: int,
    rounds: list[dict[str, Any]],
    used0: int | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    timed, last = rounds[args.warmup :], rounds[-1]
    stages = ("before_expand", "after_expand", "after_contract", "after_draft_kv_commit")
    ms = ("expand", "contract", "move", "release_region", "draft_kv_commit")
    return {
        "setting": setting.name,
        "page_bytes": {"target": setting.target.page_bytes, "draft": setting.draft.page_bytes},
        "num_layers": {"target": setting.target.num_layers, "draft": setting.draft.num_layers},
        "num_stock_blocks": sizes.num_stock_blocks,
        "num_orig_blocks": sizes.num_orig_blocks,
        "num_max_blocks": sizes.num_max_blocks,
        "moved_blocks": last["moved_blocks"],
        "mover": "triton" if args.device == "cuda" else "torch",
        "ms": {k: summary([1e3 * r[f"{k}_s"] for r in timed]) for k in ms},
        "committed_bytes": {k: last[k] for k in (*stages, "after_release_all")}
        | {"plain_pool": plain, "stock": sizes.stock_bytes},
        "device_used_delta_bytes": None
        if used0 is None
        else {k: last[f"used_{k}"] - used0 for k in stages},
        "readback_identical": {
            "after_expand": all(r["identical_after_expand"] for r in rounds),
            "after_contract": all(r["identical_after_contract"] for r in rounds),
        },
    }


def summary(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


class ArenaCycle:
    """Expand / contract rounds on one arena (module docstring), with their checks."""

    def __init__(
        self,
        setting: ArenaSetting,
        arena: Any,
        num_orig: int,
        args: argparse.Namespace,
        device: torch.device,
    ) -> None:
        self.arena, self.device, self.num_orig = arena, device, num_orig
        self.num_max: int = arena.num_slot_blocks
        self.target = range(setting.target.num_layers)
        self.draft = range(setting.target.num_layers, len(setting.page_bytes))
        self.live_fraction = args.live_fraction
        self.gen = torch.Generator(device=device).manual_seed(args.seed)
        self.picks = torch.Generator().manual_seed(args.seed)
        self.mover: BlockMover = build_block_mover("triton" if device.type == "cuda" else "torch")
        self.check = [*self._sample(range(num_orig), min(256, num_orig // 4)), 0, num_orig - 1]
        self.free = sorted(set(range(num_orig)) - set(self.check))
        arena.commit_blocks(range(len(setting.page_bytes)), 0, num_orig)
        for layer in range(len(setting.page_bytes)):
            arena.layer_pages(layer)[:num_orig].random_(-128, 128, generator=self.gen)

    def _sample(self, ids: range, count: int) -> list[int]:
        picked = torch.randperm(len(ids), generator=self.picks)[:count]
        return sorted(ids[int(i)] for i in picked)

    def _pages(self, blocks: Sequence[int]) -> torch.Tensor:
        idx = torch.tensor(blocks, dtype=torch.int64, device=self.device)
        return torch.stack(
            [self.arena.layer_pages(layer).index_select(0, idx) for layer in self.target]
        )

    def _timed(self, fn: Callable[[], object]) -> float:
        _sync(self.device)
        t0 = time.perf_counter()
        fn()
        _sync(self.device)
        return time.perf_counter() - t0

    def _record(self, out: dict[str, Any], stage: str) -> None:
        out[stage] = self.arena.resident_bytes()
        out[f"used_{stage}"] = _device_used_bytes(self.device)

    def run_round(self) -> dict[str, Any]:
        a = self.arena
        out: dict[str, Any] = {}
        reference = self._pages(self.check)
        self._record(out, "before_expand")
        out["expand_s"] = self._timed(self._expand)
        out["identical_after_expand"] = bool(torch.equal(self._pages(self.check), reference))
        self._record(out, "after_expand")
        live = self._sample(range(self.num_orig, self.num_max), self._num_live())
        self._write(live)
        written = self._pages(live)
        moves = plan_migration(live, self.free, self.num_orig)
        assert moves is not None, "more live region blocks than free blocks below N_orig"
        layout = _target_layout(a, self.target)
        out["move_s"] = self._timed(lambda: self.mover(layout, a.buffer, moves))
        out["release_region_s"] = self._timed(
            lambda: a.release_blocks(self.target, self.num_orig, self.num_max)
        )
        out["contract_s"] = out["move_s"] + out["release_region_s"]
        moved = self._pages([moves[b] for b in live])
        same = torch.equal(moved, written) and torch.equal(self._pages(self.check), reference)
        out["identical_after_contract"] = bool(same)
        self._record(out, "after_contract")
        out["draft_kv_commit_s"] = self._timed(
            lambda: a.commit_blocks(self.draft, 0, self.num_orig)
        )
        self._record(out, "after_draft_kv_commit")
        return out | {"moved_blocks": len(moves)}

    def _expand(self) -> None:
        self.arena.release_blocks(self.draft, 0, self.num_orig)
        self.arena.commit_blocks(self.target, self.num_orig, self.num_max)

    def _num_live(self) -> int:
        region = self.num_max - self.num_orig
        return min(len(self.free), max(1, int(self.live_fraction * region)))

    def _write(self, blocks: Sequence[int]) -> None:
        idx = torch.tensor(blocks, dtype=torch.int64, device=self.device)
        for layer in self.target:
            pages = self.arena.layer_pages(layer)
            data = torch.empty(len(blocks), pages.shape[1], dtype=torch.int8, device=self.device)
            pages.index_copy_(0, idx, data.random_(-128, 128, generator=self.gen))


def _target_layout(arena: Any, layers: Sequence[int]) -> PageLayout:
    """The arena's layout restricted to ``layers`` (moves leave the other layers alone)."""
    offsets, pages = arena.layout.layer_offsets_bytes, arena.layout.page_bytes
    return PageLayout(tuple(offsets[i] for i in layers), tuple(pages[i] for i in layers))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _device_used_bytes(device: torch.device) -> int | None:
    """Device memory in use outside PyTorch's caching allocator (the arena's mappings,
    the CUDA context); ``None`` on the CPU."""
    if device.type != "cuda":
        return None
    torch.cuda.empty_cache()
    return _device_total_used_bytes(device) - int(torch.cuda.memory_reserved(device))


def _device_total_used_bytes(device: torch.device) -> int:
    free, total = torch.cuda.mem_get_info(device)
    return int(total - free)


def _rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * mmap.PAGESIZE


def _plain_committed_bytes(device: torch.device, num_bytes: int) -> int:
    """Memory a plain allocation of ``num_bytes`` commits: on CUDA ``torch.empty``
    (committed at once), on the CPU written once (committed on first touch)."""
    _sync(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    measure = _device_total_used_bytes if device.type == "cuda" else (lambda _: _rss_bytes())
    before = measure(device)
    pool = torch.empty(num_bytes, dtype=torch.int8, device=device)
    if device.type == "cpu":
        pool.fill_(1)
    _sync(device)
    after = measure(device)
    del pool
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return after - before


def arena_rows(figure: dict[str, Any]) -> list[str]:
    """docs/benchmarks.md rows: | figure | setting | measure | value | goal / paper |."""
    rows = []
    for s in figure["settings"]:
        name = f"{s['setting']} ({s['num_orig_blocks']} -> {s['num_max_blocks']} blocks)"
        c, ms = s["committed_bytes"], s["ms"]
        rows += [
            f"| arena | {name} | expand | {ms['expand']['median']:.1f} ms | paper 143.9 ms |",
            f"| arena | {name} | contract ({s['moved_blocks']} moved) | "
            f"{ms['contract']['median']:.1f} ms | paper 11.9 ms |",
            f"| arena | {name} | draft KV recommit | "
            f"{ms['draft_kv_commit']['median']:.1f} ms | - |",
            f"| arena | {name} | committed after expand / stock | "
            f"{c['after_expand'] / c['stock']:.3f} | <= 1 |",
            f"| arena | {name} | committed after contract / before expand | "
            f"{c['after_contract'] / c['before_expand']:.3f} | <= 1 |",
            f"| arena | {name} | arena before expand / plain pool | "
            f"{c['before_expand'] / c['plain_pool']:.3f} | - |",
            f"| arena | {name} | bit-identical readback | "
            f"{all(s['readback_identical'].values())} | True |",
        ]
    return rows
