"""Cost of one policy step, choose + observe.

    python benchmarks/bench_policy.py [--steps 200000] [--max-batch 64] [--policies nightjar off]

``nightjar (queued)`` is nightjar with requests waiting at every step (the queue-aware
objective on: Eq. 4 over the row of the batch the queue will produce, 2B).
``nightjar (gate reads)`` adds, at every step that speculates, the reads the driver's
draft gate makes when some request owes draft KV (``StepDriver._undrafted``): the ranked
row at B, and l~[B, 0] when the key has no row yet.

Each step is timed on its own with ``perf_counter_ns``, next to a plain dict
lookup timed the same way in the same run (the timer's own cost is in both).
The step includes building the ``StepResult``, as the engine does.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Sequence

from nightjar_ray.policy import StepResult, build_policy, policy_names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Time choose+observe per step.")
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--policies", nargs="*", default=["nightjar", *policy_names()])
    parser.add_argument("--seed", type=int, default=0)
    return parser


def percentile(sorted_ns: list[int], q: float) -> float:
    return float(sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))])


def time_dict_lookup(batches: list[int]) -> list[int]:
    table = {b: b for b in range(1, max(batches) + 1)}
    clock = time.perf_counter_ns
    out = []
    for b in batches:
        t0 = clock()
        table.get(b)
        out.append(clock() - t0)
    return out


def depths(num_reqs: int, gamma: int) -> tuple[int, ...]:
    """Drafted requests per acceptance depth (``StepResult.num_reqs_reaching``): half of
    those at one depth reach the next. The scheduler counts them (outside the policy)."""
    return tuple(num_reqs >> j for j in range(gamma + 1)) if gamma else ()


def time_policy(
    name: str,
    batches: list[int],
    seed: int,
    queued: bool = False,
    params: dict[str, object] | None = None,
    gated: bool = False,
) -> list[int]:
    policy = build_policy(name, params or {}, rng=random.Random(seed))
    # NOTE: what the scheduler counts for a step (depths, accepted drafts) is looked up, not
    # computed, inside the timed step: the policy step is choose, StepResult, observe.
    table = {
        (b, g): (depths(b, g), sum(depths(b, g)) - b if g else 0)
        for b in set(batches)
        for g in range(policy.gamma_max + 1)
    }
    clock = time.perf_counter_ns
    out = []
    for b in batches:
        t0 = clock()
        gamma = policy.choose(b, 0, 2 * b if queued else None)
        if gated and gamma > 0 and policy.latency_estimates(b) is None:
            policy.latency_at_zero_s(b)
        reaching, accepted = table[b, gamma]
        policy.observe(
            StepResult(b, gamma, b + accepted, 0.01 + 0.001 * gamma, b * gamma, accepted, reaching)
        )
        out.append(clock() - t0)
    return out


def summarize(label: str, samples: list[int], base_median: float | None) -> str:
    s = sorted(samples)
    med, p99 = percentile(s, 0.5), percentile(s, 0.99)
    ratio = f"{med / base_median:6.1f}x" if base_median else "      -"
    return f"{label:<21} {med / 1e3:8.3f} {p99 / 1e3:8.3f} {statistics.fmean(s) / 1e3:8.3f} {ratio}"


def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    batches = [rng.randint(1, args.max_batch) for _ in range(args.steps)]
    gc.disable()
    try:
        base = sorted(time_dict_lookup(batches))
        print(f"{args.steps} steps, batch sizes uniform in 1..{args.max_batch}")
        print(f"{'what':<21} {'med_us':>8} {'p99_us':>8} {'mean_us':>8} {'med/dict':>7}")
        print(summarize("dict lookup", base, None))
        for name in dict.fromkeys(args.policies):
            samples = time_policy(name, batches, args.seed)
            print(summarize(name, samples, percentile(base, 0.5)))
            if name == "nightjar":
                samples = time_policy(name, batches, args.seed, queued=True)
                print(summarize("nightjar (queued)", samples, percentile(base, 0.5)))
                samples = time_policy(name, batches, args.seed, gated=True)
                print(summarize("nightjar (gate reads)", samples, percentile(base, 0.5)))
                unpaired: dict[str, object] = {"paired_acceptance": False}
                samples = time_policy(name, batches, args.seed, params=unpaired)
                print(summarize("nightjar unpaired", samples, percentile(base, 0.5)))
    finally:
        gc.enable()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
