"""Warm-start snapshot for an engine policy, learned on the recorded CPU step costs.

    python benchmarks/train_snapshot.py --out /tmp/nightjar-warm.json --steps-per-batch 100000

Runs the policy against ``nightjar_ray.sim.envs.measured_cpu_env`` (the s=0.05
pair's measured tok/s per batch size and gamma) for ``--steps-per-batch`` steps
at each of ``--batches``, interleaved, and writes ``policy.snapshot()``: the
statistics and the schedule state (late blocks, so little exploration left).
Pass the file as ``NightjarConfig(policy_snapshot=...)``.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from nightjar_ray.policy import build_policy
from nightjar_ray.sim.envs import measured_cpu_env
from nightjar_ray.sim.loop import PolicyLoop


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--policy", default="nightjar")
    p.add_argument("--params", default="{}", help="Policy params (JSON).")
    p.add_argument("--batches", default="1,4,16,48")
    p.add_argument("--steps-per-batch", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    params = {"gamma_max": 4, **json.loads(args.params)}
    policy = build_policy(args.policy, params, rng=random.Random(args.seed))
    loop = PolicyLoop(policy, measured_cpu_env(), random.Random(args.seed + 1))
    batches = [int(b) for b in args.batches.split(",")]
    rng = random.Random(args.seed + 2)
    for _ in range(args.steps_per_batch * len(batches)):
        loop.step(rng.choice(batches))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(policy.snapshot()))
    tail = loop.gammas[-len(batches) * 1000 :]
    print(
        f"wrote {args.out}; gamma shares over the last steps:",
        {g: round(tail.count(g) / len(tail), 3) for g in range(params["gamma_max"] + 1)},
    )


if __name__ == "__main__":
    main()
