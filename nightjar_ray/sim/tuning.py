"""Sweeps that choose Nightjar's defaults in simulation (tau_low, T_persist, bucketing).

Each variant changes one knob from the defaults (``RunKnobs()``, ``NightjarPolicyConfig()``)
and reports nightjar's throughput as a ratio to ``off`` on the same workload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from nightjar_ray.sim.experiments import (
    Contender,
    RunKnobs,
    default_contenders,
    run_contender,
    with_params,
)
from nightjar_ray.sim.metrics import summarize
from nightjar_ray.sim.presets import Setting
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
        Variant("estimator=step-mean", with_params(base, latency_estimator="step-mean"), knobs),
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
