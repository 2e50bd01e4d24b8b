"""What the CUDA arena's driver calls cost, and its commit per run against per chunk.

    python benchmarks/gpu_arena_calls.py [--chunks 2048] [--rounds 6]

Two measurements on one arena layer of 2 MiB pages (one page = one chunk of the
allocation granularity), printed as one JSON object (docs/benchmarks.md, "GPU figures"):

1. ``us_per_call``: each driver call of a commit and a release timed alone over
   ``--calls`` chunks (``cuMemCreate``, ``cuMemMap``, ``cuMemSetAccess`` per chunk,
   ``cuMemUnmap``, ``cuMemRelease``), and one ``cuMemSetAccess`` and one ``cuMemUnmap``
   over many adjacent chunks at once.
2. ``commit``: paired rounds, order alternated, of the arena's ``commit_blocks`` (access
   granted and zeroed once per run of new chunks) against the same chunks committed one
   by one (one ``cuMemSetAccess`` and one fill each, the arena before), with the first
   repeated as the A/A control; each commit is checked for zeroed, resident memory and
   released before the next.

CUDA and ``cuda-bindings`` only (no vLLM); it refuses to run without a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

if __package__ in (None, ""):  # run as a script: the repository root, for ``nightjar_ray``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nightjar_ray.memory.arena import build_kv_arena

CUDA_REQUIRED = "gpu_arena_calls needs a CUDA GPU: torch.cuda.is_available() is False"
CHUNK_BYTES = 2 << 20


def call_costs(arena: Any, num: int) -> dict[str, Any]:
    """Microseconds per driver call over ``num`` chunks (the arena's reservation, nothing
    of it committed through the arena meanwhile)."""
    g = arena.granularity_bytes
    times: dict[str, list[float]] = {}

    def ptr(i: int) -> Any:
        return arena._ptr(i * g)

    def call(name: str, *args: Any) -> Any:  # the arena's own call, which checks the result
        t0 = time.perf_counter()
        value = arena._call(name, *args)
        times.setdefault(name, []).append(time.perf_counter() - t0)
        return value

    handles = []
    for i in range(2 * num):
        handles.append(call("cuMemCreate", g, arena._prop, 0))
        call("cuMemMap", ptr(i), g, 0, handles[-1], 0)
    for i in range(num):
        call("cuMemSetAccess", ptr(i), g, [arena._access], 1)
    out: dict[str, Any] = {"us_per_call": {k: 1e6 * statistics.mean(v) for k, v in times.items()}}
    t0 = time.perf_counter()
    call("cuMemSetAccess", ptr(num), num * g, [arena._access], 1)
    out["us_per_chunk_one_set_access_over_all"] = 1e6 * (time.perf_counter() - t0) / num
    times.clear()
    for i in range(num):
        call("cuMemUnmap", ptr(i), g)
    t0 = time.perf_counter()
    call("cuMemUnmap", ptr(num), num * g)
    out["us_per_chunk_one_unmap_over_all"] = 1e6 * (time.perf_counter() - t0) / num
    for handle in handles:
        call("cuMemRelease", handle)
    out["us_per_call"] |= {k: 1e6 * statistics.mean(v) for k, v in times.items()}
    out["num_call_chunks"] = num
    return out


def commit_rounds(arena: Any, num: int, rounds: int) -> dict[str, Any]:
    """Paired rounds: ``commit_blocks`` against chunk-by-chunk commits (module docstring)."""

    def per_run() -> None:
        arena.commit_blocks([0], 0, num)

    def per_chunk() -> None:
        with torch.cuda.device(arena.device):
            for chunk in range(num):
                arena._map_run(range(chunk, chunk + 1))

    contenders: dict[str, Callable[[], None]] = {
        "per_run": per_run,
        "per_chunk": per_chunk,
        "per_run_aa": per_run,
    }
    for fn in contenders.values():
        _timed(arena, num, fn)
    seconds: dict[str, list[float]] = {k: [] for k in contenders}
    for r in range(rounds):
        order = list(contenders) if r % 2 == 0 else ["per_chunk", "per_run", "per_run_aa"]
        for label in order:
            seconds[label].append(_timed(arena, num, contenders[label]))
    ratio = [a / b for a, b in zip(seconds["per_run"], seconds["per_chunk"], strict=True)]
    aa = [a / b for a, b in zip(seconds["per_run_aa"], seconds["per_run"], strict=True)]
    return {
        "us_per_chunk": {k: 1e6 * statistics.median(v) / num for k, v in seconds.items()},
        "per_run_over_per_chunk": statistics.median(ratio),
        "aa": statistics.median(aa),
        "rounds": rounds,
        "num_chunks": num,
    }


def _timed(arena: Any, num: int, commit: Callable[[], None]) -> float:
    """Seconds of one commit of chunks [0, num); checks it, dirties it, releases it."""
    torch.cuda.synchronize(arena.device)
    t0 = time.perf_counter()
    commit()
    torch.cuda.synchronize(arena.device)
    seconds = time.perf_counter() - t0
    committed = arena.buffer[: num * CHUNK_BYTES]
    if arena.resident_bytes() != num * CHUNK_BYTES or bool(committed.any()):
        raise RuntimeError("a commit left chunks unmapped or not zeroed")
    committed.fill_(1)  # the next commit must zero what it maps again
    arena.release_blocks([0], 0, num)
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu_arena_calls.py", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--chunks", type=int, default=2048, help="Chunks per paired commit.")
    parser.add_argument("--calls", type=int, default=200, help="Chunks per timed call.")
    parser.add_argument("--rounds", type=int, default=6, help="Paired rounds.")
    args = parser.parse_args(argv)
    if min(args.chunks, args.calls, args.rounds) < 1:
        parser.error("--chunks, --calls and --rounds must be >= 1")
    if not torch.cuda.is_available():
        raise SystemExit(CUDA_REQUIRED)
    device = torch.device("cuda", torch.cuda.current_device())
    arena = build_kv_arena(device, [CHUNK_BYTES], max(args.chunks, 2 * args.calls))
    if arena.granularity_bytes != CHUNK_BYTES:  # type: ignore[attr-defined]
        raise SystemExit(f"expected a {CHUNK_BYTES}-byte granularity")
    try:
        result = commit_rounds(arena, args.chunks, args.rounds)
        result |= call_costs(arena, args.calls)
    finally:
        arena.close()
    print(json.dumps({"device": torch.cuda.get_device_name(device), **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
