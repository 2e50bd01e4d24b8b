"""The memory-drift tool's request streams: ``--fixed`` sends one shape only (what tells a
per-request leak from per-shape growth), the default stream varies every dimension and is
reproducible from its seed; the RSS sampler sees child processes."""

from __future__ import annotations

import os
import random
import subprocess
import sys

from benchmarks import mem_drift as tool


def _shape(
    batch: tuple[list[list[int]], list[int]],
) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    prompts, max_tokens = batch
    return len(prompts), tuple(len(p) for p in prompts), tuple(max_tokens)


def test_fixed_stream_has_one_shape_and_fresh_prompts() -> None:
    rng = random.Random(0)
    batches = [tool.next_batch(rng, True) for _ in range(50)]
    assert {_shape(b) for b in batches} == {(4, (64,) * 4, (32,) * 4)}
    prompts = {tuple(p) for b in batches for p in b[0]}
    assert len(prompts) == 200


def test_varying_stream_is_seeded_and_varies_every_dimension() -> None:
    assert tool.next_batch(random.Random(3), False) == tool.next_batch(random.Random(3), False)
    rng = random.Random(0)
    shapes = [_shape(tool.next_batch(rng, False)) for _ in range(200)]
    assert len({s[0] for s in shapes}) == len(tool.BATCH_SIZES)
    assert len({n for s in shapes for n in s[1]}) > 100
    assert len({n for s in shapes for n in s[2]}) > 50


def test_rss_sampler_includes_children() -> None:
    # a child that waits on its stdin until it is killed
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        rss = tool.tree_rss_bytes(os.getpid())
        assert rss["self"] > 0
        assert any(key.endswith(f":{child.pid}") and value > 0 for key, value in rss.items())
    finally:
        child.kill()
        child.wait()
