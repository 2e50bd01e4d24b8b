"""Worker RSS drift of one offline engine under a seeded request stream (docs/benchmarks.md,
"Worker memory growth: oneDNN's primitive cache").

    python benchmarks/mem_drift.py --mode nightjar --out benchmarks/results/drift-nightjar.jsonl
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 python benchmarks/mem_drift.py ...

Modes: ``nightjar`` (defaults, elastic memory off), ``off`` (nightjar's scheduler and
worker, the draft never runs; elastic memory off), ``plain`` (vLLM without speculation),
``stock2`` (vLLM's own speculation, 2 tokens).
Run several at once to compare them on the same machine and stream. The stream draws batch
sizes 1-16, prompts of 8-256 random tokens and 4-96 output tokens from ``--seed``;
``--fixed`` sends one shape only (batches of 4, 64-token prompts, 32 output tokens), which
tells growth per request (a leak) from growth per distinct shape. Every ``--sample-s`` one
JSON line: elapsed seconds, requests done, RSS in bytes of this process and its children.
The allocator is the environment's (``LD_PRELOAD``, ``MALLOC_*``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import psutil

from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import offline_engine, run_batch
from nightjar_ray.serve.config import GENERATED_PAIRS, cache_dir

BATCH_SIZES = (1, 2, 3, 4, 6, 8, 12, 16)


def tree_rss_bytes(pid: int) -> dict[str, int]:
    """RSS of ``pid`` and of each live child, keyed by process name and pid."""
    proc = psutil.Process(pid)
    out = {"self": proc.memory_info().rss}
    for child in proc.children(recursive=True):
        try:
            out[f"{child.name()}:{child.pid}"] = child.memory_info().rss
        except psutil.Error:
            continue
    return out


def next_batch(rng: random.Random, fixed: bool) -> tuple[list[list[int]], list[int]]:
    """Prompts (token IDs) and output lengths of the next batch."""
    if fixed:
        return [[rng.randrange(10, 2000) for _ in range(64)] for _ in range(4)], [32] * 4
    size = rng.choice(BATCH_SIZES)
    prompts = [[rng.randrange(10, 2000) for _ in range(rng.randint(8, 256))] for _ in range(size)]
    return prompts, [rng.randint(4, 96) for _ in range(size)]


def engine(mode: str) -> Any:
    """The offline engine of ``mode`` on the default pair, in float32 (a context manager)."""
    from nightjar_ray.models.pair import generate_pair

    pair = generate_pair(cache_dir() / "pairs" / "default", GENERATED_PAIRS["default"])
    kwargs: dict[str, Any] = {"dtype": "float32", "max_num_seqs": 32}
    if mode in ("nightjar", "off"):
        # NOTE: elastic memory off: its KV arena commits KV pages as blocks are first
        # written, growth this drift measurement would count against the allocator.
        config = NightjarConfig.model_validate(
            {"policy": mode, "elastic_memory": {"enabled": False}}
        )
        return offline_engine(pair, config, **kwargs)
    if mode == "plain":
        return offline_engine(pair, None, **kwargs)
    return offline_engine(pair, None, stock_gamma=2, **kwargs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", required=True, choices=("nightjar", "off", "plain", "stock2"))
    p.add_argument("--minutes", type=float, default=20.0)
    p.add_argument("--sample-s", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fixed", action="store_true", help="One request shape only.")
    p.add_argument("--out", type=Path, required=True, help="JSONL of samples.")
    args = p.parse_args()
    rng = random.Random(args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with engine(args.mode) as llm, args.out.open("w") as out:
        t0, last_s, num_reqs = time.time(), float("-inf"), 0
        while time.time() - t0 < args.minutes * 60:
            prompts, max_tokens = next_batch(rng, args.fixed)
            run_batch(llm, prompts, max_tokens)
            num_reqs += len(prompts)
            if time.time() - last_s >= args.sample_s:
                last_s = time.time()
                rss = tree_rss_bytes(os.getpid())
                out.write(json.dumps({"t_s": last_s - t0, "num_reqs": num_reqs, "rss": rss}))
                out.write("\n")
                out.flush()
                print(args.mode, round(last_s - t0), num_reqs, {k: v >> 20 for k, v in rss.items()})


if __name__ == "__main__":
    main()
