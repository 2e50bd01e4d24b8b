"""Every policy on recorded CPU step costs.

    python benchmarks/policy_table.py [--tokens-per-phase 20000] [--rounds 3] [--seed 0]

Runs every policy against the recorded CPU environment
(``nightjar_ray.sim.envs.measured_cpu_env``): a load sequence that moves
through batch sizes 1, 4, 16 and 48 with the same work (tokens) in each phase,
and prints each phase's throughput as a ratio to speculation ``off``. No
engine runs; it takes seconds (the research companion of ``nightjar-ray demo``).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from typing import Any

from nightjar_ray.policy import build_policy
from nightjar_ray.sim.envs import measured_cpu_env
from nightjar_ray.sim.loop import LoopResult, run_phases

DEMO_POLICIES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("off", "off", {}),
    ("fixed g=1", "fixed", {"gamma": 1}),
    ("fixed g=2", "fixed", {"gamma": 2}),
    ("fixed g=3", "fixed", {"gamma": 3}),
    ("vllm-static", "vllm-static", {}),
    ("dsd", "dsd", {}),
    ("ucbspec", "ucbspec", {}),
    ("exp3spec", "exp3spec", {}),
    ("nightjar", "nightjar", {}),
    ("nightjar-paper", "nightjar-paper", {}),
)
BATCHES = (1, 4, 16, 48)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Every policy on recorded CPU step costs (no engine, seconds)."
    )
    parser.add_argument("--tokens-per-phase", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3, help="Times the 1/4/16/48 cycle repeats.")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def per_batch(results: list[LoopResult]) -> dict[int, float]:
    """Seconds spent per batch size over all rounds."""
    seconds = dict.fromkeys(BATCHES, 0.0)
    for i, r in enumerate(results):
        seconds[BATCHES[i % len(BATCHES)]] += r.duration_s
    return seconds


def run(args: argparse.Namespace) -> int:
    env = measured_cpu_env()
    phases = [(b, args.tokens_per_phase) for _ in range(args.rounds) for b in BATCHES]
    print("Policies on the recorded 2-core CPU measurements (s=0.05 pair), same work per phase.")
    print("Throughput ratio to `off` per batch size and overall (higher is better):")
    print(f"{'policy':<12} " + " ".join(f"{'B=' + str(b):>7}" for b in BATCHES) + "   overall")
    base: dict[int, float] | None = None
    for label, name, params in DEMO_POLICIES:
        policy = build_policy(name, params, rng=random.Random(args.seed + 1))
        seconds = per_batch(run_phases(policy, env, phases, random.Random(args.seed)))
        base = base or seconds
        cells = " ".join(f"{base[b] / seconds[b]:7.3f}" for b in BATCHES)
        print(f"{label:<12} {cells}   {sum(base.values()) / sum(seconds.values()):7.3f}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
