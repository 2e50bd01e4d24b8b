"""One-knob sweeps of Nightjar's defaults in simulation (tau_low, T_persist, bucketing).

    python benchmarks/simulate_tune.py --setting rtx4090-7b [--qps 4,12,35]

It takes the workload flags of ``nightjar-ray simulate run`` (``--dataset``,
``--num-requests``, ``--seed``, ...).

Each variant changes one knob from the defaults (``RunKnobs()``, ``NightjarParams()``)
and reports nightjar's throughput as a ratio to ``off`` on the same workload, one table row
per Poisson load (default: the 2nd, 4th and last of the setting's sweep).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

from nightjar_ray.cli.simulate import add_common_args, workload_from_args
from nightjar_ray.sim.experiments import (
    Contender,
    RunKnobs,
    default_contenders,
    run_contender,
    with_params,
)
from nightjar_ray.sim.metrics import summarize
from nightjar_ray.sim.presets import Setting, get_setting
from nightjar_ray.sim.scenario import build_workload
from nightjar_ray.workload import RequestSpec


@dataclass(frozen=True)
class Variant:
    label: str
    contender: Contender
    knobs: RunKnobs


def variants(
    persist_steps: Sequence[int] = (2, 32, 64),
    tau_fractions: Sequence[float] = (0.05, 0.20),
    switch_weights: Sequence[float] = (1.0, 0.1, 0.01, 0.0),
) -> list[Variant]:
    """One-knob-at-a-time variants around the defaults."""
    base = next(c for c in default_contenders() if c.label == "nightjar")
    knobs = RunKnobs()
    out = [
        Variant("defaults", base, knobs),
        Variant("bucketing=exact", with_params(base, bucketing="exact"), knobs),
        Variant(
            # NOTE: step-mean cannot weigh an arm by its tokens per request, so it runs
            # without that trust threshold (as the paper preset does).
            "estimator=step-mean",
            with_params(base, latency_estimator="step-mean", min_arm_tokens_per_req=0),
            knobs,
        ),
        Variant("share_across_keys=False", with_params(base, share_across_keys=False), knobs),
        Variant("exploration=uniform", with_params(base, exploration="uniform"), knobs),
        Variant("no offload", replace(base, elastic=False), knobs),
        Variant("trigger=played", base, replace(knobs, offload_trigger="played")),
        Variant(
            f"reclaim_draft_kv={not knobs.reclaim_draft_kv}",
            base,
            replace(knobs, reclaim_draft_kv=not knobs.reclaim_draft_kv),
        ),
        Variant("explore_bin_steps=None", with_params(base, explore_bin_steps=None), knobs),
        Variant(
            "paper offload, explore_bin_steps=None",
            with_params(base, explore_bin_steps=None),
            replace(knobs, reclaim_draft_kv=False),
        ),
        Variant("contract_persist=1", base, replace(knobs, contract_persist_steps=1)),
        Variant("observe=step", base, replace(knobs, observed_time="step")),
        Variant("observe=pure", base, replace(knobs, observed_time="pure")),
    ]
    out += [
        Variant(f"w_switch={w:g}", with_params(base, switch_cost_weight=w), knobs)
        for w in switch_weights
    ]
    out += [Variant(f"T_persist={t}", base, replace(knobs, persist_steps=t)) for t in persist_steps]
    out += [
        Variant(f"tau_low={f:g}", base, replace(knobs, tau_low_fraction=f)) for f in tau_fractions
    ]
    return out


def tune_row(
    setting: Setting, workload: Sequence[RequestSpec], dataset: str, seed: int
) -> dict[str, float]:
    """Throughput ratio to ``off`` of every variant on ``workload``."""
    off = Contender("off", "off", use_draft=False)
    base = summarize(run_contender(setting, off, workload, dataset, seed))
    out = {}
    for v in variants():
        s = summarize(run_contender(setting, v.contender, workload, dataset, seed, v.knobs))
        out[v.label] = s.throughput_tokens_per_s / base.throughput_tokens_per_s
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="One-knob sweeps of the Nightjar defaults.")
    add_common_args(parser)
    parser.add_argument("--qps", default=None, help="Comma-separated loads (default: 3 of preset).")
    return parser


def run(args: argparse.Namespace) -> int:
    setting = get_setting(args.setting)
    sweep = setting.qps_sweep
    loads = [float(q) for q in args.qps.split(",")] if args.qps else [sweep[1], sweep[3], sweep[-1]]
    labels = [v.label for v in variants()]
    print(f"setting {setting.name}, dataset {args.dataset}: nightjar throughput / off")
    print("| load | " + " | ".join(labels) + " |")
    print("|" + "---|" * (len(labels) + 1))
    for qps in loads:
        wl = build_workload(
            workload_from_args(args, "poisson", qps), setting, args.dataset, args.seed
        )
        row = tune_row(setting, wl, args.dataset, args.seed)
        print(f"| {qps:g} qps | " + " | ".join(f"{row[k]:.3f}" for k in labels) + " |")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
