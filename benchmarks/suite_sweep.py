"""Nightjar variants on the workload suite, the static contenders run once and cached.

    python benchmarks/suite_sweep.py --variant defaults='{}' \
        --variant noqueue='{"queue_aware": false}' [--warm] [--cache PATH]

The statics (``off``, ``fixed-1..5``) do not depend on nightjar's parameters and a run is
a pure function of its task, so their summaries are cached (``--cache``: a pickle keyed
by setting, workload, seed, length scale and contender) and each variant costs only its
own runs. Prints each variant's suite totals (the goals of ``sim/suite_report.py``) and
every cell that misses one. ``nightjar-ray simulate suite`` is the command results are
recorded with; this script is for sweeping variants against it.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from nightjar_ray.cli.simulate_suite import suite_contenders
from nightjar_ray.sim.experiments import (
    WARM_START_SEED_OFFSET,
    Contender,
    LoadRow,
    RunKnobs,
    RunTask,
    oracle_label,
    run_summaries,
)
from nightjar_ray.sim.metrics import Summary
from nightjar_ray.sim.presets import SETTINGS, get_setting
from nightjar_ray.sim.suite import SUITE, suite_workload
from nightjar_ray.sim.suite_report import MAX_E2E_OF_BEST_STATIC, SuiteCell, suite_totals
from nightjar_ray.workload import RequestSpec
from nightjar_ray.workload.trace import TRACE_ENV

CacheKey = tuple[str, str, int, int, str]
"""(setting, workload, seed, length scale, static contender)."""


@dataclass(frozen=True)
class Case:
    setting: str
    workload: str
    seed: int
    requests: tuple[RequestSpec, ...]
    warm_requests: tuple[RequestSpec, ...]


def cases(args: argparse.Namespace) -> Iterator[Case]:
    trace = Path(os.environ[TRACE_ENV]) if TRACE_ENV in os.environ else None
    for name in args.settings.split(","):
        setting = get_setting(name)
        for w in args.workloads.split(","):
            for n in (int(s) for s in args.seeds.split(",")):
                wl = suite_workload(w, setting, n, args.length_scale, trace)
                warm = suite_workload(
                    w, setting, n + WARM_START_SEED_OFFSET, args.length_scale, trace
                )
                yield Case(name, w, n, tuple(wl), tuple(warm))


def variant_contenders(variants: list[tuple[str, str]], warm: bool) -> list[Contender]:
    """Each variant's nightjar (and its warm start), relabelled with the variant's name."""
    out = []
    for label, params in variants:
        for c in suite_contenders(json.loads(params), False, warm):
            if c.label.startswith("nightjar"):
                out.append(replace(c, label=c.label.replace("nightjar", label)))
    return out


def run_all(
    all_cases: list[Case],
    statics: list[Contender],
    variants: list[Contender],
    args: argparse.Namespace,
) -> tuple[dict[CacheKey, Summary], dict[tuple[int, str], Summary]]:
    """The statics' summaries (cached, then updated) and each (case, variant)'s."""
    path = Path(args.cache)
    cache: dict[CacheKey, Summary] = pickle.loads(path.read_bytes()) if path.exists() else {}
    knobs = RunKnobs(policy_seed_offset=args.policy_seed_offset)
    static_tasks: list[tuple[CacheKey, RunTask]] = []
    variant_tasks: list[tuple[tuple[int, str], RunTask]] = []
    for i, case in enumerate(all_cases):
        setting = get_setting(case.setting)
        for c in statics:
            key = (case.setting, case.workload, case.seed, args.length_scale, c.label)
            if key not in cache:
                static_tasks.append(
                    (key, RunTask(setting, c, case.requests, "sharegpt", case.seed))
                )
        for c in variants:
            warm = case.warm_requests if c.warm_start else None
            task = RunTask(setting, c, case.requests, "sharegpt", case.seed, knobs, warm)
            variant_tasks.append(((i, c.label), task))
    tasks = [t for _, t in static_tasks] + [t for _, t in variant_tasks]
    summaries = run_summaries(tasks, args.jobs)
    cache |= {k: s for (k, _), s in zip(static_tasks, summaries, strict=False)}
    rest = summaries[len(static_tasks) :]
    runs = {k: s for (k, _), s in zip(variant_tasks, rest, strict=True)}
    path.write_bytes(pickle.dumps(cache))
    return cache, runs


def statics_of(
    cache: dict[CacheKey, Summary], case: Case, statics: list[Contender], length_scale: int
) -> dict[str, Summary]:
    """Each static contender's cached summary for ``case``, by label."""
    return {
        c.label: cache[(case.setting, case.workload, case.seed, length_scale, c.label)]
        for c in statics
    }


def e2e_by_workload(cells: list[SuiteCell], label: str) -> str:
    """``workload passed/cells`` for the E2E goal (``MAX_E2E_OF_BEST_STATIC``), per workload."""
    out = []
    for workload in dict.fromkeys(c.workload for c in cells):
        group = [c for c in cells if c.workload == workload]
        ok = sum(c.e2e_of_best_static(label) <= MAX_E2E_OF_BEST_STATIC for c in group)
        out.append(f"{workload} {ok}/{len(group)}")
    return ", ".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--variant", action="append", default=[], help="LABEL=JSON nightjar params")
    p.add_argument("--settings", default=",".join(SETTINGS))
    p.add_argument("--workloads", default=",".join(SUITE))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--length-scale", type=int, default=1)
    p.add_argument("--warm", action="store_true", help="also each variant warm-started")
    p.add_argument("--policy-seed-offset", type=int, default=0)
    p.add_argument("--cache", default="/tmp/suite-statics.pkl")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--cells", action="store_true", help="every cell, not only misses")
    args = p.parse_args()
    pairs = [(v.split("=", 1)[0], v.split("=", 1)[1]) for v in args.variant]
    variants = variant_contenders(pairs or [("defaults", "{}")], args.warm)
    statics = [c for c in suite_contenders({}, False) if c.label != "nightjar"]
    all_cases = list(cases(args))
    cache, runs = run_all(all_cases, statics, variants, args)
    cells = []
    for i, case in enumerate(all_cases):
        by = statics_of(cache, case, statics, args.length_scale)
        oracle = oracle_label(by)
        by |= {c.label: runs[(i, c.label)] for c in variants}
        cells.append(SuiteCell(case.setting, case.workload, case.seed, LoadRow("", by, oracle)))
    labels = [c.label for c in variants]
    print("\n".join(suite_totals(cells, [*labels, "off"])))
    for label in labels:
        print(f"{label}: mean E2E within 1.03x, by workload: {e2e_by_workload(cells, label)}")
    for label in labels:
        print(f"\n{label}: thr/best static, thr/off, E2E/best static's, E2E/off, best static:")
        for cell in cells:
            if args.cells or not cell.passes(label):
                print(
                    f"  {cell.setting:11s} {cell.workload:14s} s{cell.seed} "
                    f"{cell.of_best_static(label):.3f} {cell.of_off(label):.3f} "
                    f"{cell.e2e_of_best_static(label):.3f} {cell.row.ratio(label)[1]:.3f} "
                    f"{cell.row.oracle_label}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
