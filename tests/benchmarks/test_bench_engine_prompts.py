"""The engine benchmark never reuses a prompt in one engine (vLLM's prefix cache would
serve it without prefill, and nightjar's draft would catch up over it instead)."""

from __future__ import annotations

import argparse

from benchmarks import bench_engine as bench


def test_every_phase_round_and_batch_size_gets_its_own_prompts() -> None:
    args = argparse.Namespace(
        prompt_tokens=16, prompt_tokens_max=32, max_tokens=8, max_tokens_min=4, mixed=False
    )
    seen: set[tuple[int, ...]] = set()
    num_prompts = 0
    for phase in (bench.MEASURED, bench.LEARNING, bench.KERNEL_WARMUP):
        for round_idx in range(3):
            for batch in (1, 4, 16):
                seed = bench.prompt_seed(phase, round_idx, batch)
                prompts, outputs = bench.request_mix(batch, args, seed)
                assert all(16 <= len(p) <= 32 for p in prompts)
                assert all(4 <= n <= 8 for n in outputs)
                seen.update(tuple(p) for p in prompts)
                num_prompts += len(prompts)
    assert len(seen) == num_prompts  # B=4 of a round no longer repeats B=1's prompts
    # the same (phase, round, batch) gives every engine the same prompts (paired rounds)
    again = bench.request_mix(4, args, bench.prompt_seed(bench.MEASURED, 1, 4))
    assert again == bench.request_mix(4, args, bench.prompt_seed(bench.MEASURED, 1, 4))


def test_mixed_pairs_long_prompts_with_short_outputs_and_the_reverse() -> None:
    args = argparse.Namespace(
        prompt_tokens=32, prompt_tokens_max=1024, max_tokens=64, max_tokens_min=4, mixed=True
    )
    prompts, outputs = bench.request_mix(64, args, seed=7)
    kinds = {(len(p) >= 528, n) for p, n in zip(prompts, outputs, strict=True)}
    assert kinds == {(True, 4), (False, 64)}
    assert all(len(p) == 32 for p, n in zip(prompts, outputs, strict=True) if n == 64)


def test_dtype_reaches_every_engine_of_the_run() -> None:
    """``--dtype`` was once parsed and never passed on, so "float32" runs computed in the
    pair's bfloat16 (docs/benchmarks.md, "Lossless on AMX CPUs")."""
    assert bench.engine_overrides(argparse.Namespace(dtype="float32")) == {"dtype": "float32"}
    assert bench.engine_overrides(argparse.Namespace(dtype=None)) == {}
