"""User-facing scenario configuration (pydantic, ``extra="forbid"``) and workload building.

A scenario file is JSON, for example::

    {"setting": "rtx4090-7b", "dataset": "sharegpt", "policy": "nightjar",
     "policy_params": {"gamma_max": 4},
     "workload": {"arrival": "poisson", "qps": 10, "num_requests": 480}}
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nightjar_ray.driver.observation import ObservationRuleName
from nightjar_ray.sim.experiments import RunKnobs
from nightjar_ray.sim.presets import DATASETS, SETTINGS, Setting, get_dataset
from nightjar_ray.sim.workload import synthetic_workload, trace_workload
from nightjar_ray.workload import RequestSpec
from nightjar_ray.workload.arrivals import gamma_gaps, poisson_gaps
from nightjar_ray.workload.trace import TRACE_ENV, read_trace


class WorkloadConfig(BaseModel):
    """Arrivals and lengths."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arrival: Literal["poisson", "gamma", "trace"] = Field(
        "poisson", description="Arrival process, or replay of the Azure trace."
    )
    qps: float = Field(10.0, gt=0, description="Mean request rate (poisson/gamma), req/s.")
    cv: float = Field(2.0, gt=0, description="Coefficient of variation of gamma gaps.")
    num_requests: int = Field(480, ge=1, le=1_000_000, description="Requests (poisson/gamma).")
    trace_path: str | None = Field(
        None, description="Azure-format trace CSV; required by arrival=trace (no default)."
    )
    trace_start_s: float = Field(0.0, ge=0, description="Start of the replayed window, s.")
    trace_duration_s: float = Field(3600.0, gt=0, description="Length of the window, s.")
    trace_qps: float | None = Field(
        None, gt=0, description="Replay at this mean rate (rescales time); None = as recorded."
    )
    trace_lengths: Literal["trace", "dataset"] = Field(
        "trace",
        description="Lengths of replayed requests: the trace's own, or sampled from the dataset "
        "(trace arrivals with dataset prompts, as the paper's Table 4).",
    )


class ScenarioConfig(BaseModel):
    """One simulated run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    setting: str = Field("rtx4090-7b", description=f"Preset: one of {sorted(SETTINGS)}.")
    dataset: str = Field("sharegpt", description=f"Lengths and acceptance: {sorted(DATASETS)}.")
    policy: str = Field("nightjar", description="Policy name (see nightjar_ray.policy).")
    policy_params: dict[str, Any] = Field(default_factory=dict, description="Policy config.")
    workload: WorkloadConfig = Field(
        default_factory=lambda: WorkloadConfig.model_validate({}),
        description="Arrivals and lengths.",
    )
    tau_low_fraction: float = Field(
        RunKnobs().tau_low_fraction, ge=0, le=1, description="tau_low / N_orig (nightjar)."
    )
    persist_steps: int = Field(
        RunKnobs().persist_steps, ge=1, description="T_persist in steps (nightjar)."
    )
    contract_persist_steps: int = Field(
        RunKnobs().contract_persist_steps,
        ge=1,
        description="Steps the reload condition must hold before the draft returns (nightjar).",
    )
    observed_time: ObservationRuleName = Field(
        RunKnobs().observed_time,
        description=(
            "What policies observe: one of the engine's observation rules "
            "(prefill-corrected, pure, step)."
        ),
    )
    offload_trigger: Literal["played", "exploited"] = Field(
        RunKnobs().offload_trigger,
        description="SD counts as disabled after any gamma=0 step, or only an exploited one.",
    )
    reclaim_draft_kv: bool = Field(
        RunKnobs().reclaim_draft_kv,
        description="Offload frees the draft's per-block KV share too, not only its weights.",
    )
    offload_outvalued: bool = Field(
        RunKnobs().offload_outvalued,
        description="Offload a draft outvalued by its memory too (memory/triggers.py).",
    )
    policy_seed_offset: int = Field(
        RunKnobs().policy_seed_offset,
        ge=0,
        description="Added to the seed of the policy's RNG only: the same workload, other draws.",
    )
    seed: int = Field(0, ge=0, description="Seed of workload, acceptance and policy RNGs.")

    @property
    def knobs(self) -> RunKnobs:
        # NOTE: every RunKnobs field is a scenario field of the same name.
        return RunKnobs(**{f.name: getattr(self, f.name) for f in fields(RunKnobs)})


def load_scenario(path: str | Path) -> ScenarioConfig:
    """Read and validate a JSON scenario; ``ValueError`` names the bad field."""
    try:
        return ScenarioConfig.model_validate(json.loads(Path(path).read_text()))
    except ValidationError as e:
        fields = ", ".join(".".join(str(p) for p in err["loc"]) for err in e.errors())
        raise ValueError(f"{path}: invalid scenario (fields: {fields}): {e}") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON: {e}") from e


def build_workload(
    cfg: WorkloadConfig, setting: Setting, dataset: str, seed: int
) -> tuple[RequestSpec, ...]:
    """The requests ``cfg`` describes (deterministic for ``seed``)."""
    rng = random.Random(seed)
    max_len = setting.target.max_model_len
    if cfg.arrival == "trace":
        if cfg.trace_path is None:
            raise ValueError(
                f"workload.trace_path: arrival 'trace' needs a trace CSV (--trace PATH or "
                f"{TRACE_ENV})"
            )
        window = trace_for(read_trace(cfg.trace_path), cfg, max_len)
        if cfg.trace_lengths == "trace":
            return window
        arrivals = [0.0, *(r.arrival_s for r in window)]
        gaps = [b - a for a, b in itertools.pairwise(arrivals)]
        return synthetic_workload(gaps, get_dataset(dataset), max_len, rng)
    if cfg.arrival == "poisson":
        gaps = poisson_gaps(cfg.qps, cfg.num_requests, rng)
    else:
        gaps = gamma_gaps(cfg.qps, cfg.cv, cfg.num_requests, rng)
    return synthetic_workload(gaps, get_dataset(dataset), max_len, rng)


def trace_for(
    rows: Sequence[RequestSpec], cfg: WorkloadConfig, max_len: int
) -> tuple[RequestSpec, ...]:
    """The configured trace window, rescaled to ``trace_qps`` if set."""
    window = trace_workload(rows, cfg.trace_start_s, cfg.trace_duration_s, 1.0, max_len)
    if cfg.trace_qps is None:
        return window
    recorded_qps = len(window) / cfg.trace_duration_s
    scale = recorded_qps / cfg.trace_qps
    return trace_workload(rows, cfg.trace_start_s, cfg.trace_duration_s, scale, max_len)
