"""Pseudo-regret of policies on the recorded CPU env.

    python benchmarks/policy_regret.py [--horizons 1000 10000 100000] [--max-batch 64] [--seeds 3]

Regret is measured against the per-batch-size best arm in hindsight (latency
per token, noise-free), summed over steps, averaged over seeds. Batch sizes
are drawn uniformly from 1..max_batch each step, so bucketing has neighbours
to share samples with (docs/benchmarks.md, "Regret").
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from nightjar_ray.policy import build_policy
from nightjar_ray.sim.envs import StationaryEnv, measured_cpu_env
from nightjar_ray.sim.loop import PolicyLoop

VARIANTS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("nightjar", "nightjar", {}),
    ("nightjar share", "nightjar", {"share_across_keys": True}),
    ("nightjar exact", "nightjar", {"bucketing": "exact"}),
    ("nightjar-paper", "nightjar-paper", {}),
    ("paper pow2", "nightjar-paper", {"bucketing": "pow2"}),
    ("ucbspec", "ucbspec", {}),
    ("exp3spec", "exp3spec", {}),
    ("dsd", "dsd", {}),
    ("vllm-static", "vllm-static", {}),
    ("off", "off", {}),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Regret of policies vs the best arm.")
    parser.add_argument("--horizons", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=3)
    return parser


def regret_per_step(
    name: str, params: dict[str, Any], env: StationaryEnv, batches: list[int], seed: int
) -> float:
    """Mean over steps of (latency of the played arm - latency of the best arm) / best."""
    loop = PolicyLoop(build_policy(name, params, rng=random.Random(seed)), env, random.Random(seed))
    env_gamma_max = max(env.acceptance)  # best arm over the environment's arms, not the policy's
    best = {b: env.expected_latency(b, env.best_gamma(b, env_gamma_max)) for b in set(batches)}
    total = 0.0
    for num_reqs in batches:
        loop.step(num_reqs)
        played = env.expected_latency(num_reqs, loop.gammas[-1])
        total += (played - best[num_reqs]) / best[num_reqs]
    return total / len(batches)


def run(args: argparse.Namespace) -> int:
    env = measured_cpu_env()
    print("Relative pseudo-regret per step (mean excess latency/token over the per-B best arm)")
    print(f"{'policy':<17} " + " ".join(f"{'T=' + str(t):>10}" for t in args.horizons))
    for label, name, params in VARIANTS:
        cells = []
        for horizon in args.horizons:
            values = []
            for seed in range(args.seeds):
                rng = random.Random(1000 + seed)
                batches = [rng.randint(1, args.max_batch) for _ in range(horizon)]
                values.append(regret_per_step(name, params, env, batches, seed))
            cells.append(f"{statistics.fmean(values):10.4f}")
        print(f"{label:<17} " + " ".join(cells))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
