"""``nightjar-ray simulate suite``: the workload suite over settings and seeds (``sim/suite.py``).

Prints, per (setting, workload), each policy's worst seed against the best static choice
in hindsight and against ``off``, then how many cells each policy passes (the goals in
``sim/suite_report.py``) and its worst cell. ``--warm-start`` adds ``nightjar-warm`` (what a
redeploy that restores the policy pool's snapshot starts from) and ``--with-batch-oracle``
the cost model's table played with no learning: together they split the gap to the goals
into what a cold start costs and what learning at all costs (docs/benchmarks.md,
"Workload suite (simulator)").
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from nightjar_ray.cli.args import UsageError, existing_file, json_object, names, positive_int
from nightjar_ray.driver.observation import OBSERVATION_RULES
from nightjar_ray.sim.experiments import PAPER_PRESET, Contender, RunKnobs, default_contenders
from nightjar_ray.sim.presets import SETTINGS
from nightjar_ray.sim.scenario import ScenarioConfig
from nightjar_ray.sim.suite import MAX_LENGTH_SCALE, SUITE
from nightjar_ray.sim.suite_report import run_suite, suite_table, suite_totals
from nightjar_ray.workload.trace import TRACE_ENV, resolve_trace


def add_suite_parser(sub: Any) -> None:
    p = sub.add_parser("suite", help="The workload suite: nightjar vs the best static choice.")
    p.add_argument(
        "--settings",
        type=names(SETTINGS, "setting"),
        default=",".join(SETTINGS),
        help="Comma-separated settings.",
    )
    p.add_argument(
        "--workloads",
        type=names(SUITE, "suite workload"),
        default=",".join(SUITE),
        help="Comma-separated suite workloads.",
    )
    p.add_argument("--seeds", default="0,1,2", help="Comma-separated seeds.")
    p.add_argument(
        "--nightjar-params", type=json_object, default="{}", help="JSON extra nightjar config."
    )
    p.add_argument(
        "--with-paper-preset", action="store_true", help="Also run nightjar-paper (Algorithm 1)."
    )
    p.add_argument(
        "--warm-start",
        action="store_true",
        help=(
            "Also run nightjar-warm: nightjar starting from the statistics it learned on "
            "another draw of the same workload (as a redeployed replica restores the "
            "policy actor's snapshot)."
        ),
    )
    p.add_argument(
        "--with-batch-oracle",
        action="store_true",
        help="Also run batch-oracle: the cost model's best gamma per batch size (diagnostic).",
    )
    p.add_argument(
        "--observed-time",
        choices=list(OBSERVATION_RULES),
        default=None,
        help="Observation rule (default: the engine's default).",
    )
    p.add_argument(
        "--max-num-seqs",
        type=positive_int,
        default=None,
        help=(
            "Cap every setting's running requests (vLLM's max_num_seqs; default: each "
            "setting's own, 256) at the same arrival rates: a server whose requests wait "
            "for a seat before they wait for KV."
        ),
    )
    add_length_scale(p)
    add_policy_seed_offset(p)
    add_trace(p)
    p.add_argument(
        "--jobs", type=positive_int, default=1, help="Processes (results do not depend on it)."
    )
    p.set_defaults(func=run)


def add_trace(p: argparse.ArgumentParser) -> None:
    """``--trace``: the Azure-format trace CSV a trace workload replays (run, compare, suite)."""
    p.add_argument(
        "--trace",
        type=_trace_file,
        default=None,
        help=f"Azure-format trace CSV for the trace workload (default: ${TRACE_ENV}).",
    )


def _trace_file(value: str) -> str:
    return str(existing_file(value))


def trace_or_exit(command: str, given: str | None) -> Path:
    """The trace to replay (``given``, else ``$NIGHTJAR_TRACE``), or an exit that says how
    to name one."""
    try:
        return resolve_trace(given, os.environ)
    except ValueError as e:
        raise UsageError(str(e)) from None


def add_policy_seed_offset(p: argparse.ArgumentParser) -> None:
    """``--policy-seed-offset`` (``RunKnobs.policy_seed_offset``), for suite and compare."""
    p.add_argument(
        "--policy-seed-offset",
        type=int,
        default=RunKnobs().policy_seed_offset,
        help="Shift the policies' RNG seeds only (same workloads): their own randomness.",
    )


def add_length_scale(p: argparse.ArgumentParser) -> None:
    """``--length-scale`` (``suite_workload(..., length_scale)``), for suite and compare."""
    p.add_argument(
        "--length-scale",
        type=int,
        default=1,
        help=(
            f"Multiply every suite workload's length (requests, trace window, on-off "
            f"cycles) at the same rates, 1..{MAX_LENGTH_SCALE}: a cold start's learning is "
            "paid once per run, so longer runs show what is left after it."
        ),
    )


def check_length_scale(value: int) -> int:
    """``--length-scale`` in range, or a usage error naming the flag."""
    if not 1 <= value <= MAX_LENGTH_SCALE:
        raise UsageError(
            f"--length-scale: expected an integer in 1..{MAX_LENGTH_SCALE}, got {value}"
        )
    return value


def parse_seeds(value: str) -> list[int]:
    """``--seeds`` as a list; bad values fail naming the flag (``simulate compare`` too)."""
    try:
        seeds = [int(x) for x in value.split(",")]
    except ValueError:
        raise UsageError(f"--seeds: expected comma-separated integers, got {value!r}") from None
    if len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise UsageError(f"--seeds: expected distinct non-negative integers, got {value!r}")
    return seeds


def suite_contenders(
    nightjar_params: dict[str, Any], with_paper: bool, warm_start: bool = False
) -> list[Contender]:
    """nightjar, off, fixed-1..5 (the statics the best choice is taken from), paper preset,
    nightjar warm-started (``nightjar-warm``)."""
    keep = [
        c
        for c in default_contenders(nightjar_params=nightjar_params)
        if c.label in ("nightjar", "off") or c.label.startswith("fixed-")
    ]
    warm = [replace(keep[0], label="nightjar-warm", warm_start=True)] if warm_start else []
    return keep + ([PAPER_PRESET] if with_paper else []) + warm


def run(args: argparse.Namespace) -> int:
    settings, workloads = args.settings, args.workloads
    seeds = parse_seeds(args.seeds)
    check_length_scale(args.length_scale)
    trace = trace_or_exit("simulate suite", args.trace) if "trace" in workloads else None
    knob_args: dict[str, Any] = {"policy_seed_offset": args.policy_seed_offset}
    if args.observed_time is not None:
        knob_args["observed_time"] = args.observed_time
    knobs = ScenarioConfig.model_validate(knob_args).knobs
    contenders = suite_contenders(args.nightjar_params, args.with_paper_preset, args.warm_start)
    cells = run_suite(
        settings,
        workloads,
        seeds,
        contenders,
        knobs,
        args.jobs,
        args.with_batch_oracle,
        args.length_scale,
        trace,
        args.max_num_seqs,
    )
    judged = ("nightjar", "nightjar-paper", "nightjar-warm")
    labels = [c.label for c in contenders if c.label in judged]
    labels += ["batch-oracle"] if args.with_batch_oracle else []
    seats = "each setting's" if args.max_num_seqs is None else args.max_num_seqs
    print(
        f"observation rule: {knobs.observed_time}; seeds {seeds}; length scale "
        f"{args.length_scale}; max_num_seqs {seats}"
    )
    print("\n".join(suite_table(cells, [*labels, "off"])))
    print("\n".join(["", *suite_totals(cells, [*labels, "off"])]))
    return 0
