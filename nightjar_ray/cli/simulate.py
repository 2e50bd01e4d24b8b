"""``nightjar-ray simulate``: the GPU-scale discrete-event simulator (``nightjar_ray.sim``).

Sub-commands::

    simulate run        one policy on one workload (or --scenario FILE.json)
    simulate compare    Table 4 line-up + oracle on a Poisson sweep and/or the trace
    simulate suite      the workload suite over settings and seeds (``sim/suite.py``)
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import fields
from pathlib import Path
from typing import Any

from nightjar_ray.cli.args import (
    UsageError,
    existing_file,
    json_object,
    names,
    output_file,
    positive_int,
)
from nightjar_ray.cli.simulate_suite import (
    add_length_scale,
    add_policy_seed_offset,
    add_suite_parser,
    add_trace,
    check_length_scale,
    parse_seeds,
    trace_or_exit,
)
from nightjar_ray.driver.observation import OBSERVATION_RULES
from nightjar_ray.policy.registry import policy_names
from nightjar_ray.sim.experiments import (
    CEILING,
    PAPER_PRESET,
    Contender,
    LoadRow,
    RunKnobs,
    batch_oracle,
    compare_loads,
    default_contenders,
    run_contender,
    with_params,
)
from nightjar_ray.sim.metrics import SimResult, summarize
from nightjar_ray.sim.presets import DATASETS, SETTINGS, Setting, get_setting
from nightjar_ray.sim.report import (
    absolute_table,
    ratio_table,
    seed_summary_table,
    summary_lines,
)
from nightjar_ray.sim.scenario import ScenarioConfig, WorkloadConfig, build_workload, load_scenario
from nightjar_ray.sim.suite import SUITE, suite_workload
from nightjar_ray.workload import RequestSpec
from nightjar_ray.workload.trace import TRACE_ATTRIBUTION


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("simulate", help="Simulate policies at GPU scale.")
    sub = parser.add_subparsers(dest="sim_command", required=True)
    run_p = sub.add_parser("run", help="One policy on one workload.")
    add_common_args(run_p)
    run_p.add_argument(
        "--policy", choices=policy_names(), default="nightjar", help="Policy to simulate."
    )
    run_p.add_argument(
        "--policy-params", type=json_object, default="{}", help="JSON policy config."
    )
    run_p.add_argument(
        "--arrival",
        choices=["poisson", "gamma", "trace"],
        default="poisson",
        help="Arrival process (trace: replay --trace).",
    )
    run_p.add_argument("--qps", type=float, default=10.0, help="Mean arrival rate (req/s).")
    run_p.add_argument("--cv", type=float, default=2.0, help="CV of gamma arrivals.")
    run_p.add_argument(
        "--scenario",
        type=existing_file,
        help="JSON scenario file (replaces the flags above).",
    )
    run_p.add_argument(
        "--timeline-csv", type=output_file, help="Write the per-step gamma timeline here."
    )
    run_p.set_defaults(func=run_one)
    cmp_p = sub.add_parser("compare", help="Table 4 line-up and oracle, ratios to off.")
    add_common_args(cmp_p)
    cmp_p.add_argument("--qps", default=None, help="Comma-separated loads (default: preset).")
    cmp_p.add_argument("--trace-only", action="store_true", help="Skip the Poisson sweep.")
    cmp_p.add_argument("--no-trace", action="store_true", help="Skip the trace replay.")
    cmp_p.add_argument("--gamma-max", type=int, default=4, help="Adaptive policies' Gamma_max.")
    cmp_p.add_argument("--max-fixed-gamma", type=int, default=5, help="fixed-1..this.")
    cmp_p.add_argument("--contenders", default=None, help="Comma-separated labels to run.")
    cmp_p.add_argument(
        "--with-ceiling", action="store_true", help="Add the gamma0+offload diagnostic."
    )
    cmp_p.add_argument(
        "--with-batch-oracle",
        action="store_true",
        help="Add batch-oracle: the cost model's best gamma per batch size, run as nightjar.",
    )
    cmp_p.add_argument(
        "--nightjar-params", type=json_object, default="{}", help="JSON extra nightjar config."
    )
    cmp_p.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        help="Processes to run the simulations in (results are the same for any value).",
    )
    cmp_p.add_argument(
        "--seeds",
        default=None,
        help="Comma-separated seeds (replaces --seed): one table per seed, then nightjar "
        "against the oracle over the seeds.",
    )
    cmp_p.add_argument(
        "--workloads",
        type=names(SUITE, "suite workload"),
        default=None,
        help=f"Comma-separated suite workloads {list(SUITE)} (replace the sweep and trace).",
    )
    add_length_scale(cmp_p)
    cmp_p.add_argument(
        "--with-paper-preset", action="store_true", help="Add nightjar-paper (Algorithm 1)."
    )
    cmp_p.set_defaults(func=compare)
    add_suite_parser(sub)


def add_common_args(p: argparse.ArgumentParser) -> None:
    """Flags of ``simulate run`` and ``compare``: setting, dataset, workload, knobs, seed."""
    p.add_argument(
        "--setting", choices=sorted(SETTINGS), default="rtx4090-7b", help="Hardware and model."
    )
    p.add_argument(
        "--dataset", choices=sorted(DATASETS), default="sharegpt", help="Length distribution."
    )
    p.add_argument("--num-requests", type=int, default=480, help="Requests per workload.")
    add_trace(p)
    p.add_argument("--trace-start-s", type=float, default=0.0, help="Window start (s).")
    p.add_argument("--trace-duration-s", type=float, default=3600.0, help="Window length (s).")
    p.add_argument("--trace-qps", type=float, default=None, help="Replay mean rate (req/s).")
    p.add_argument(
        "--trace-lengths",
        choices=["trace", "dataset"],
        default="dataset",
        help="Replayed lengths: the trace's, or sampled from --dataset (paper Table 4).",
    )
    p.add_argument(
        "--tau-low-fraction",
        type=float,
        default=RunKnobs().tau_low_fraction,
        help="Free-KV fraction below which the draft may be offloaded (docs/memory.md).",
    )
    p.add_argument(
        "--persist-steps",
        type=int,
        default=RunKnobs().persist_steps,
        help="Steps the offload condition must hold (docs/memory.md).",
    )
    p.add_argument(
        "--contract-persist-steps",
        type=int,
        default=RunKnobs().contract_persist_steps,
        help="Steps the reload condition must hold (1 = paper; docs/simulator.md).",
    )
    p.add_argument(
        "--observed-time",
        choices=list(OBSERVATION_RULES),
        default=RunKnobs().observed_time,
        help="What policies observe: one of the engine's observation rules.",
    )
    p.add_argument(
        "--offload-trigger",
        choices=["played", "exploited"],
        default=RunKnobs().offload_trigger,
        help="When SD counts as disabled for the offload trigger (docs/simulator.md).",
    )
    p.add_argument(
        "--reclaim-draft-kv",
        action=argparse.BooleanOptionalAction,
        default=RunKnobs().reclaim_draft_kv,
        help="Offload frees the draft's per-block KV share too (docs/simulator.md).",
    )
    p.add_argument(
        "--offload-outvalued",
        action=argparse.BooleanOptionalAction,
        default=RunKnobs().offload_outvalued,
        help="Offload a draft whose memory is worth more as KV cache (docs/memory.md).",
    )
    add_policy_seed_offset(p)
    p.add_argument("--seed", type=int, default=0, help="Workload and policy seed.")


def _scenario_from_args(args: argparse.Namespace) -> ScenarioConfig:
    if args.scenario:
        try:
            return load_scenario(args.scenario)
        except ValueError as e:
            raise UsageError(f"--scenario {e}") from None
    return ScenarioConfig(
        setting=args.setting,
        dataset=args.dataset,
        policy=args.policy,
        policy_params=args.policy_params,
        workload=workload_from_args(args, args.arrival, args.qps),
        seed=args.seed,
        **_knob_args(args),
    )


def workload_from_args(args: argparse.Namespace, arrival: str, qps: float) -> WorkloadConfig:
    """The workload of ``args`` (flags of :func:`add_common_args`) at ``arrival``, ``qps``."""
    return WorkloadConfig.model_validate(
        {
            "arrival": arrival,
            "qps": qps,
            "cv": getattr(args, "cv", 2.0),
            "num_requests": args.num_requests,
            "trace_path": args.trace,
            "trace_start_s": args.trace_start_s,
            "trace_duration_s": args.trace_duration_s,
            "trace_qps": args.trace_qps,
            "trace_lengths": args.trace_lengths,
        }
    )


def run_one(args: argparse.Namespace) -> int:
    cfg = _with_trace(_scenario_from_args(args), args)
    setting = get_setting(cfg.setting)
    workload = build_workload(cfg.workload, setting, cfg.dataset, cfg.seed)
    contender = next(
        (c for c in default_contenders() if c.policy == cfg.policy and c.policy != "fixed"),
        Contender(cfg.policy, cfg.policy),
    )
    # NOTE: the same engine setup and defaults as `compare`; the user's params override.
    contender = with_params(contender, **cfg.policy_params)
    result = run_contender(setting, contender, workload, cfg.dataset, cfg.seed, cfg.knobs)
    print(f"setting {setting.name}, dataset {cfg.dataset}, workload {cfg.workload.arrival}")
    print("\n".join(summary_lines(cfg.policy, summarize(result))))
    if args.timeline_csv:
        write_timeline(result, args.timeline_csv)
    if cfg.workload.arrival == "trace":
        print(f"Trace: {TRACE_ATTRIBUTION}")
    return 0


def _with_trace(cfg: ScenarioConfig, args: argparse.Namespace) -> ScenarioConfig:
    """``cfg`` with the trace a trace workload replays: the scenario's ``trace_path``, else
    ``--trace``, else ``$NIGHTJAR_TRACE``; exits with a clear message when none is a file."""
    if cfg.workload.arrival != "trace":
        return cfg
    path = trace_or_exit("simulate run", cfg.workload.trace_path or args.trace)
    workload = cfg.workload.model_copy(update={"trace_path": str(path)})
    return cfg.model_copy(update={"workload": workload})


def write_timeline(result: SimResult, path: str) -> None:
    """Per-step CSV: time, batch size, gamma, running, waiting, free blocks."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "time_s",
                "duration_s",
                "num_reqs",
                "gamma",
                "num_running",
                "num_waiting",
                "free_blocks",
            ]
        )
        for s in result.timeline:
            w.writerow(
                [
                    f"{s.time_s:.6f}",
                    f"{s.duration_s:.6f}",
                    s.num_reqs,
                    s.gamma,
                    s.num_running,
                    s.num_waiting,
                    s.num_free_blocks,
                ]
            )


def _contenders(args: argparse.Namespace, setting: Setting) -> list[Contender]:
    contenders = default_contenders(args.gamma_max, args.nightjar_params, args.max_fixed_gamma)
    if args.with_ceiling:
        contenders.append(CEILING)
    if args.with_paper_preset:
        contenders.append(PAPER_PRESET)
    if args.with_batch_oracle:
        contenders.append(batch_oracle(setting, args.dataset, args.gamma_max))
    if args.contenders:
        wanted = args.contenders.split(",")
        known = [c.label for c in contenders]
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise UsageError(f"--contenders: unknown {unknown}; choose from {known}")
        # NOTE: every ratio is to `off`, so the baseline always runs.
        contenders = [c for c in contenders if c.label in wanted or c.label == "off"]
    return contenders


def _knob_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``RunKnobs`` fields of ``args`` (each flag's dest is the field's name)."""
    return {f.name: getattr(args, f.name) for f in fields(RunKnobs)}


def _knobs_from_args(args: argparse.Namespace) -> RunKnobs:
    """The engine knobs of ``args``, validated as a scenario's (bad values name the field)."""
    return ScenarioConfig.model_validate(_knob_args(args)).knobs


def compare(args: argparse.Namespace) -> int:
    check_length_scale(args.length_scale)
    if args.length_scale != 1 and not args.workloads:
        raise UsageError("--length-scale applies to --workloads only (the suite's workloads)")
    workloads = args.workloads
    if (workloads is None and not args.no_trace) or "trace" in (workloads or ()):
        args.trace = str(trace_or_exit("simulate compare", args.trace))
    setting = get_setting(args.setting)
    contenders = _contenders(args, setting)
    labels = [c.label for c in contenders]
    knobs = _knobs_from_args(args)
    seeds = _seeds(args)
    cases = [(load, n, wl) for n in seeds for load, wl in _compare_workloads(args, setting, n)]
    rows = compare_loads(setting, contenders, cases, args.dataset, knobs, args.jobs)
    rows_by_seed: dict[int, list[LoadRow]] = {n: [] for n in seeds}
    for (_, n, _), row in zip(cases, rows, strict=True):
        rows_by_seed[n].append(row)
    for n, seed_rows in rows_by_seed.items():
        print(f"setting {setting.name}, dataset {args.dataset}, seed {n}")
        print("\n".join(ratio_table(seed_rows, labels)))
        print("\nAbsolute throughput (tok/s):\n")
        print("\n".join(absolute_table(seed_rows, labels)) + "\n")
    if len(seeds) > 1 and "nightjar" in labels:
        print(f"setting {setting.name}, dataset {args.dataset}, seeds {args.seeds}")
        print("\n".join(seed_summary_table(rows_by_seed)))
    if not args.no_trace and (args.workloads is None or "trace" in args.workloads):
        print(f"\nTrace: {TRACE_ATTRIBUTION}")
    return 0


def _seeds(args: argparse.Namespace) -> list[int]:
    """``--seeds`` as a list (``[--seed]`` without it); bad values fail naming the flag."""
    if args.seeds is None:
        return [args.seed]
    return parse_seeds(args.seeds)


def _compare_workloads(
    args: argparse.Namespace, setting: Setting, seed: int
) -> list[tuple[str, tuple[RequestSpec, ...]]]:
    """(load label, workload) of each Poisson load (unless --trace-only) and of the trace."""
    out: list[tuple[str, tuple[RequestSpec, ...]]] = []
    if args.workloads:
        scale = args.length_scale
        trace = None if args.trace is None else Path(args.trace)
        return [(w, suite_workload(w, setting, seed, scale, trace)) for w in args.workloads]
    if not args.trace_only:
        loads = [float(q) for q in args.qps.split(",")] if args.qps else setting.qps_sweep
        for qps in loads:
            cfg = workload_from_args(args, "poisson", qps)
            out.append((f"{qps:g} qps", build_workload(cfg, setting, args.dataset, seed)))
    if not args.no_trace:
        wl, label = trace_for_compare(args, setting, seed)
        out.append((label, wl))
    return out


def trace_for_compare(
    args: argparse.Namespace, setting: Setting, seed: int
) -> tuple[tuple[RequestSpec, ...], str]:
    """The trace workload at ``--trace-qps`` or the setting's ``trace_qps``, and its label."""
    qps = args.trace_qps if args.trace_qps is not None else setting.trace_qps
    cfg = workload_from_args(args, "trace", 1.0).model_copy(update={"trace_qps": qps})
    return build_workload(cfg, setting, args.dataset, seed), f"trace @ {qps:g} qps"
