"""Measure C_switch(L_max, B) on this machine and write the profile CSV (paper §4.2).

    python benchmarks/profile_switch_cost.py --out benchmarks/results/switch-cost.csv \\
        [--target DIR --draft DIR | --tiny] [--skip-tokens 16,64,256,512] [--batch-sizes 1,2,4]

Starts one vLLM engine on the target/draft pair (``--target/--draft``, or a generated
pair) and writes ``max_skip_tokens,num_reqs,switch_cost_ms`` rows, the profile that
``NightjarConfig(switch_cost_profile=PATH)`` feeds to the nightjar policy.

The paper profiles the switch cost as T_SD - T_base: the prefill time with
the draft running minus without it, over a grid of lengths and batch sizes.
In this engine that difference *is* the draft catch-up forward, so this times
the catch-up itself, in the real engine, on the real code path:

    engine: NightjarConfig(testing={forced_gammas: [0, 0, 0, 0, 1]})
    for each (L, B), repeated:
      submit B fresh random prompts of exactly L tokens (max_tokens=12)
        gamma=0 steps: target prefill (and a few decodes); draft skipped
        next gamma=1 step: the worker catches up all B requests (timed)
      C_switch(L, B) = median wall time of the first catch-up that covers
                       all B requests with >= L tokens each (worker clock),
                       after one unrecorded pass over the whole grid

The four-step gamma=0 phase absorbs vLLM's request arrival: a batch is not
always admitted in one step, and the few decode steps at gamma=0 after the
prefill make each lag L to L+4 tokens (recorded at L).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.engine.offline import draft_stats, offline_engine, random_prompts, run_batch
from nightjar_ray.engine.testing_config import TestingConfig
from nightjar_ray.models.pair import TINY_SPEC, ModelPair, PairSpec, generate_pair
from nightjar_ray.policy import SwitchCostTable

PROFILE_CONFIG = NightjarConfig(
    draft_sync="catch-up",
    testing=TestingConfig(forced_gammas=[0, 0, 0, 0, 1], forced_steps_per_gamma=1),
)
"""The engine configuration the profiler needs (four gamma=0 steps, one gamma=1)."""
PROFILE_SPEC_EXTRA = {"num_speculative_tokens": 1}
"""``speculative_config`` fields of the profiled engine: gammas 0..1."""


@dataclass(frozen=True)
class ProfileGrid:
    """Grid of effective skip lengths (L_max) and batch sizes (B)."""

    skip_tokens: tuple[int, ...] = (16, 64, 256, 512)
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    repeats: int = 3

    def __post_init__(self) -> None:
        if not self.skip_tokens or min(self.skip_tokens) < 1:
            raise ValueError("skip_tokens must be non-empty and >= 1")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ValueError("batch_sizes must be non-empty and >= 1")
        if self.repeats < 1:
            raise ValueError("repeats must be >= 1")

    @property
    def max_batched_tokens(self) -> int:
        """Token budget for one-step prefills of the largest point."""
        return max(self.skip_tokens) * max(self.batch_sizes) + max(self.batch_sizes)


def engine_overrides(grid: ProfileGrid) -> dict[str, Any]:
    """Engine kwargs the profiling run needs on top of the usual ones."""
    return {
        "max_num_batched_tokens": grid.max_batched_tokens,
        "max_num_seqs": max(grid.batch_sizes),
        "max_model_len": max(grid.skip_tokens) + 32,
        "enable_prefix_caching": False,
    }


def _catch_up_s(llm: Any, skip: int, batch: int) -> float | None:
    """Time of the first catch-up covering ``batch`` requests, >= ``skip`` each."""
    for step in draft_stats(llm)["steps"]:
        if step["num_catch_up_reqs"] == batch and step["num_catch_up_tokens"] >= skip * batch:
            return float(step["catch_up_s"])
    return None


def measure_point(
    llm: Any, skip: int, batch: int, vocab_size: int, seed: int, max_tries: int = 3
) -> float:
    """One C_switch sample in seconds for ``batch`` requests lagging ``skip`` tokens."""
    for attempt in range(max_tries):
        llm.collective_rpc("nightjar_reset_draft_stats")
        prompts = random_prompts(batch, skip, vocab_size, seed * 1000 + attempt)
        run_batch(llm, prompts, max_tokens=12)
        cost = _catch_up_s(llm, skip, batch)
        if cost is not None:
            return cost
    raise RuntimeError(f"no catch-up of {batch} requests x {skip} tokens observed")


def profile_switch_cost(
    llm: Any,
    grid: ProfileGrid,
    vocab_size: int,
    progress: Callable[[str], None] = lambda _: None,
) -> SwitchCostTable:
    """Measure the grid on ``llm`` (started with :data:`PROFILE_CONFIG`)."""
    # NOTE: the first run of each new shape pays one-off kernel set-up (several
    # ms on CPU), so the whole grid runs once unrecorded before measuring.
    for skip in grid.skip_tokens:
        for batch in grid.batch_sizes:
            measure_point(llm, skip, batch, vocab_size, seed=0)
    rows: list[tuple[int, int, float]] = []
    for skip in grid.skip_tokens:
        for batch in grid.batch_sizes:
            samples = [
                measure_point(llm, skip, batch, vocab_size, seed=r + 1) for r in range(grid.repeats)
            ]
            cost_ms = statistics.median(samples) * 1e3
            progress(f"L_max={skip:5d} B={batch:3d} C_switch={cost_ms:8.3f} ms")
            rows.append((skip, batch, cost_ms))
    return SwitchCostTable.from_rows(rows)


def parse_ints(text: str, name: str) -> Sequence[int]:
    """``"16,64,256"`` -> (16, 64, 256); ``ValueError`` names ``name``."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError as e:
        raise ValueError(f"{name}: expected comma-separated integers, got {text!r}") from e
    if not values:
        raise ValueError(f"{name}: empty list")
    return values


DEFAULT_PAIR_DIR = Path.home() / ".cache" / "nightjar-ray" / "pairs"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Measure C_switch(L_max, B) and write the profile CSV."
    )
    parser.add_argument("--out", required=True, help="Profile CSV to write.")
    parser.add_argument("--target", help="Target model directory (default: generated pair).")
    parser.add_argument("--draft", help="Draft model directory (with --target).")
    parser.add_argument("--pair-dir", default=str(DEFAULT_PAIR_DIR), help="Generated pairs.")
    parser.add_argument("--residual-scale", type=float, default=0.05, help="Generated pair s.")
    parser.add_argument("--tiny", action="store_true", help="Generate the small test pair.")
    parser.add_argument("--skip-tokens", default="16,64,256,512", help="L_max grid.")
    parser.add_argument("--batch-sizes", default="1,2,4,8,16", help="B grid.")
    parser.add_argument("--repeats", type=int, default=3, help="Samples per point (median).")
    return parser


def resolve_pair(args: argparse.Namespace) -> ModelPair:
    """The pair named by ``--target/--draft`` or a generated one."""
    if bool(args.target) != bool(args.draft):
        raise ValueError("--target and --draft go together")
    if args.target:
        config = json.loads((Path(args.target) / "config.json").read_text())
        spec = replace(PairSpec(), vocab_size=int(config["vocab_size"]))
        return ModelPair(Path(args.target), Path(args.draft), spec)
    base = TINY_SPEC if args.tiny else PairSpec()
    spec = replace(base, residual_scale=args.residual_scale)
    name = f"{'tiny' if args.tiny else 'bench'}-s{args.residual_scale:g}"
    return generate_pair(Path(args.pair_dir) / name, spec)


def run(args: argparse.Namespace) -> int:
    grid = ProfileGrid(
        tuple(parse_ints(args.skip_tokens, "--skip-tokens")),
        tuple(parse_ints(args.batch_sizes, "--batch-sizes")),
        args.repeats,
    )
    pair = resolve_pair(args)
    with offline_engine(
        pair, PROFILE_CONFIG, spec_extra=PROFILE_SPEC_EXTRA, **engine_overrides(grid)
    ) as llm:
        table = profile_switch_cost(llm, grid, pair.spec.vocab_size, progress=print)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    table.save(args.out)
    print(f"wrote {args.out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
