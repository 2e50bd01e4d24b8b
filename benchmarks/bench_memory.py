"""Elastic-memory benchmarks, one run, side by side (docs/benchmarks.md, "KV block
migration and pool operations").

    python benchmarks/bench_memory.py --out benchmarks/results/bench-memory.json

1. migration: moving ``--moves`` KV blocks of KV-shaped pages (default: the 7B
   setting, 32 layers x 16 tokens x 32 KV heads x 128 x K/V in fp16 = 256 KiB per
   layer page) with the ``torch`` block mover, against a plain ``copy_`` of the
   same number of bytes, and a second plain copy as the A/A control; rounds
   interleaved, ratios per round (throughput of the contender / the plain copy).
2. pool: scheduler-side latency of ``ElasticBlockPool.expand`` and of
   ``plan_contract`` + ``contract`` on vLLM's own ``BlockPool`` at a realistic size
   (``--num-blocks`` blocks, a region of ``--region-blocks``, a fraction
   ``--live-fraction`` of the region live), next to the paper's Table 6.

The Triton mover is the GPU path; it needs a GPU to be timed (under
``TRITON_INTERPRET=1`` on CPU it is a correctness check, not a performance proxy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from nightjar_ray.memory.arena import CPUKVArena
from nightjar_ray.memory.kernels import move_blocks_torch


def bench_migration(args: argparse.Namespace) -> dict[str, Any]:
    page = args.page_bytes
    slots = 2 * args.moves
    arena = CPUKVArena((page,) * args.layers, slots)
    arena.buffer.fill_(1)  # commit every page: a real cache's blocks are written
    moves = {args.moves + i: i for i in range(args.moves)}
    nbytes = args.moves * args.layers * page
    src = torch.ones(nbytes, dtype=torch.int8)
    dst = torch.empty_like(src)
    dst.fill_(0)

    def timed(fn: Any) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    contenders: dict[str, Callable[[], object]] = {
        "torch mover": lambda: move_blocks_torch(arena.layout, arena.buffer, moves),
        "plain copy": lambda: dst.copy_(src),
        "plain copy (A/A)": lambda: dst.copy_(src),
    }
    for fn in contenders.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(args.rounds):
        for label, fn in contenders.items():
            times[label].append(timed(fn))
    base = times["plain copy"]
    ratios = {k: [b / t for b, t in zip(base, v, strict=True)] for k, v in times.items()}
    return {
        "bytes_moved": nbytes,
        "gb_per_s": {k: nbytes / statistics.median(v) / 1e9 for k, v in times.items()},
        "ratio_to_copy_median": {k: statistics.median(v) for k, v in ratios.items()},
        "ratio_to_copy_rounds": ratios,
    }


def bench_pool(args: argparse.Namespace) -> dict[str, Any]:
    from vllm.v1.core.block_pool import BlockPool

    from nightjar_ray.engine.block_pool import ElasticBlockPool

    expand_s, contract_s, moved = [], [], []
    n, region = args.num_blocks, args.region_blocks
    for _ in range(args.rounds):
        elastic = ElasticBlockPool(BlockPool(n, True, 16), n + region)
        elastic.pool.get_new_blocks(n // 2)
        t0 = time.perf_counter()
        elastic.expand(region)
        expand_s.append(time.perf_counter() - t0)
        held = elastic.pool.get_new_blocks(n - 1 - n // 2 + region)
        keep = int(args.live_fraction * region)
        elastic.pool.free_blocks([b for b in held if b.block_id < n][:region])
        elastic.pool.free_blocks([b for b in held if b.block_id >= n][keep:])
        t0 = time.perf_counter()
        plan = elastic.plan_contract(region)
        assert plan is not None
        elastic.contract(region, plan)
        contract_s.append(time.perf_counter() - t0)
        moved.append(len(plan))
        elastic.check()
    return {
        "num_blocks": n,
        "region_blocks": region,
        "moved_blocks": statistics.median(moved),
        "expand_ms_median": 1e3 * statistics.median(expand_s),
        "contract_ms_median": 1e3 * statistics.median(contract_s),
        "paper_table6_ms": {"expand": 143.9, "contract": 11.9, "reload_dispatch": 0.0219},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--page-bytes", type=int, default=16 * 32 * 128 * 2 * 2)
    parser.add_argument("--moves", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--num-blocks", type=int, default=4096)
    parser.add_argument("--region-blocks", type=int, default=512)
    parser.add_argument("--live-fraction", type=float, default=0.25)
    args = parser.parse_args()
    result = {"args": vars(args) | {"out": str(args.out)}}
    result["migration"] = bench_migration(args)
    result["pool"] = bench_pool(args)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
