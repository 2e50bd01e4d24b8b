"""One suite cell, traced: what nightjar decided over the run, beside static contenders.

    python benchmarks/suite_trace.py --setting rtx4090-7b --workload high --seed 2 \
        [--policy-seed-offset 1000] [--warm] [--window-s 10] [--steps 8:20] \
        [--table 100,200] [--contenders off]

Prints, per contender, its mean E2E, throughput, steps, preemptions, draft catch-up and
memory events; per window of each run, the steps, busy seconds, mean B, most requests
waiting and steps per gamma; with ``--steps T0:T1``, every decision of nightjar's run that
started in that span, from the step driver's decision log (the engine's, docs/engine.md
"Seeing the decisions"); with ``--table``, per listed batch size, the tokens behind each
arm of its key and the row Eq. (4) ranks there, in the statistics nightjar started from
(``--warm``: the pool's, learned on another draw of the workload) and ended with. The
suite's cells and their verdicts: ``nightjar-ray simulate suite``, ``suite_sweep.py``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from nightjar_ray.cli.simulate_suite import suite_contenders
from nightjar_ray.policy.bucketing import bucket_fn
from nightjar_ray.policy.estimates import LATENCY_TABLE
from nightjar_ray.policy.nightjar import NightjarPolicy
from nightjar_ray.sim.experiments import (
    WARM_START_SEED_OFFSET,
    Contender,
    RunKnobs,
    contender_policy,
    run_contender,
    server_options,
)
from nightjar_ray.sim.metrics import SimResult, summarize
from nightjar_ray.sim.presets import SETTINGS, Setting, get_setting
from nightjar_ray.sim.server import SimServer
from nightjar_ray.sim.suite import SUITE, suite_workload
from nightjar_ray.workload import RequestSpec
from nightjar_ray.workload.trace import TRACE_ENV


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="suite_trace.py", description=__doc__)
    p.add_argument("--setting", choices=sorted(SETTINGS), required=True)
    p.add_argument("--workload", choices=SUITE, required=True)
    p.add_argument("--seed", type=int, default=0, help="workload seed (the suite's 0, 1, 2)")
    p.add_argument("--policy-seed-offset", type=int, default=0)
    p.add_argument("--warm", action="store_true", help="nightjar warm-started (nightjar-warm)")
    p.add_argument("--params", default="{}", help="JSON nightjar params over the defaults")
    p.add_argument("--contenders", default="off", help="static contenders beside nightjar")
    p.add_argument("--window-s", type=float, default=10.0)
    p.add_argument("--steps", default=None, metavar="T0:T1", help="decisions started in span")
    p.add_argument("--table", default=None, metavar="B,B,...", help="batch sizes to rank at")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setting = get_setting(args.setting)
    trace = Path(os.environ[TRACE_ENV]) if TRACE_ENV in os.environ else None
    if args.workload == "trace" and trace is None:
        print(f"the trace workload needs ${TRACE_ENV}", file=sys.stderr)
        return 2
    workload = suite_workload(args.workload, setting, args.seed, 1, trace)
    earlier = suite_workload(args.workload, setting, args.seed + WARM_START_SEED_OFFSET, 1, trace)
    by_label = {c.label: c for c in suite_contenders(json.loads(args.params), False)}
    knobs = RunKnobs(policy_seed_offset=args.policy_seed_offset)
    results: dict[str, SimResult] = {}
    for label in [s for s in args.contenders.split(",") if s]:
        results[label] = run_contender(
            setting, by_label[label], workload, "sharegpt", args.seed, knobs
        )
    nightjar = replace(by_label["nightjar"], warm_start=args.warm)
    policy = start_policy(setting, nightjar, earlier, args.seed, knobs)
    sizes = [int(b) for b in args.table.split(",")] if args.table else []
    print_table("started from", policy, sizes)
    log = io.StringIO()
    options = server_options(setting, nightjar, "sharegpt", args.seed, knobs)
    label = "nightjar-warm" if args.warm else "nightjar"
    results[label] = SimServer(setting, policy, options, decision_log=log).run(workload)
    print_table("ended with", policy, sizes)
    for name, result in results.items():
        print_run(name, result, args.window_s)
    if args.steps:
        t0, t1 = (float(t) for t in args.steps.split(":"))
        print_steps(label, log.getvalue(), t0, t1)
    return 0


def start_policy(
    setting: Setting, c: Contender, earlier: Sequence[RequestSpec], seed: int, knobs: RunKnobs
) -> NightjarPolicy:
    """Nightjar as the suite starts it (``contender_policy``): fresh, or warm-started
    from its run on ``earlier``."""
    policy = contender_policy(setting, c, "sharegpt", seed, knobs, earlier)
    if not isinstance(policy, NightjarPolicy):
        raise TypeError(f"{c.label} runs {policy.name}, not nightjar")
    return policy


def print_table(when: str, policy: NightjarPolicy, sizes: Sequence[int]) -> None:
    """Per batch size: its key, the tokens behind each arm there, the ranked row."""
    if not sizes:
        return
    cells = policy.export_stats().tables.get(LATENCY_TABLE, {})
    key_of = bucket_fn(policy.config.bucketing)
    print(f"nightjar {when}: per B, its key, tokens per arm | ranked row (ms per token)")
    for num_reqs in sizes:
        key = key_of(num_reqs)
        arms = range(policy.gamma_max + 1)
        tokens = [round(cells.get((key, g), (0.0, 0.0))[0]) for g in arms]
        row = policy.ranked_row(num_reqs)
        ranked = "none" if row is None else " ".join(f"{x * 1e3:.3f}" for x in row)
        print(f"  B {num_reqs:4d} key {key:4d}: tokens {tokens} | {ranked}")


def print_run(label: str, result: SimResult, window_s: float) -> None:
    """The run's totals, then per window: steps, busy s, mean B, most waiting, gammas."""
    s = summarize(result)
    events = ", ".join(f"{e.kind} {e.time_s:.1f}s" for e in result.memory_events) or "none"
    print(
        f"== {label}: mean E2E {s.mean_e2e_s:.3f} s, {s.throughput_tokens_per_s:.0f} tok/s, "
        f"{result.num_steps} steps, {result.num_preemptions} preempted, "
        f"catch-up {result.catchup_s:.2f} s, memory: {events}"
    )
    windows: dict[int, list[Any]] = {}
    for step in result.timeline:
        w = windows.setdefault(int(step.time_s // window_s), [0, 0.0, 0, 0, Counter()])
        w[0] += 1
        w[1] += step.duration_s
        w[2] += step.num_reqs
        w[3] = max(w[3], step.num_waiting)
        w[4][step.gamma] += 1
    for i in sorted(windows):
        n, busy, sum_b, waiting, gammas = windows[i]
        print(
            f"  {i * window_s:7.1f}s steps {n:5d} busy {busy:6.2f} mean B {sum_b / n:6.1f} "
            f"waiting <= {waiting:4d} gammas {dict(sorted(gammas.items()))}"
        )


def print_steps(label: str, log: str, t0: float, t1: float) -> None:
    """Every decision of the log that started in [t0, t1)."""
    print(f"== {label}: decisions started in [{t0}, {t1}) s")
    for line in log.splitlines():
        d = json.loads(line)
        if not t0 <= d["start_s"] < t1:
            continue
        print(
            f"  {d['start_s']:8.2f}s B {d['num_reqs']:4d} gamma {d['gamma']} "
            f"verified {d['verified_gamma']} explored {int(d['explored'])} "
            f"queued {int(d['queued'])} B' {d['num_reqs_ahead']} gated {int(d['gated'])} "
            f"undrafted {d['num_undrafted_reqs']} prefill {d['num_prefill_tokens']} "
            f"{d['duration_s'] * 1e3:.1f} ms observed {int(d['observed'])}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
