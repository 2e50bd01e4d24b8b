"""Policy comparisons: the paper's Table 4 in simulation, plus the hindsight oracle.

A *contender* is a policy plus how the engine runs around it:

* ``off``: no draft model loaded (the paper's "w/o SD"; all memory is KV cache);
* ``fixed-k``, ``vllm-static``, ``dsd``, ``ucbspec``: stock vLLM behaviour (draft resident,
  kept in sync on gamma = 0 steps);
* ``nightjar``: skip the draft on gamma = 0 (pay C_switch on re-enable) and offload it
  under memory pressure (paper §6), with a C_switch table profiled on the simulated
  hardware (as ``nightjar-ray profile-switch-cost`` would on a real GPU).

The oracle is the best static choice per load in hindsight: among ``off`` and
``fixed-1..gamma_max`` the run with the highest throughput at that load.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from nightjar_ray.driver.observation import DEFAULT_OBSERVATION_RULE, ObservationRuleName
from nightjar_ray.memory.elastic_mode import (
    DEFAULT_CONTROLLER_PARAMS,
    DEFAULT_ELASTIC_MODE,
    ElasticMode,
    elastic_memory_blocker,
    resolve_elastic_mode,
)
from nightjar_ray.policy import build_policy
from nightjar_ray.policy.base import Policy
from nightjar_ray.policy.nightjar import NightjarPolicy
from nightjar_ray.sim.calibration import simulated_switch_cost, token_latency_s
from nightjar_ray.sim.elastic import ElasticParams
from nightjar_ray.sim.hardware import plan_memory
from nightjar_ray.sim.metrics import SimResult, Summary, summarize
from nightjar_ray.sim.presets import Setting
from nightjar_ray.sim.server import ServerOptions, SimServer
from nightjar_ray.workload import RequestSpec


@dataclass(frozen=True)
class RunKnobs:
    """Engine-side knobs around the policy; each default, and when to change it:
    docs/simulator.md, "Engine options around the policy"."""

    tau_low_fraction: float = DEFAULT_CONTROLLER_PARAMS.tau_low_fraction
    """tau_low as a fraction of N_orig (paper Fig. 14: 10% free-cache threshold)."""
    persist_steps: int = DEFAULT_CONTROLLER_PARAMS.expand_persist_steps
    """T_persist in scheduling steps."""
    contract_persist_steps: int = DEFAULT_CONTROLLER_PARAMS.contract_persist_steps
    """Steps the reload condition must hold (paper: 1; ``ElasticParams``)."""
    offload_trigger: Literal["played", "exploited"] = "exploited"
    """§6.1 condition (1) (``ServerOptions.offload_trigger``)."""
    observed_time: ObservationRuleName = DEFAULT_OBSERVATION_RULE
    """What policies observe: the engine's observation rule (``ServerOptions.observed_time``)."""
    reclaim_draft_kv: bool = True
    """Offload frees the draft's per-block KV share too (``ElasticParams``; False: the
    paper's weights-only offload, docs/simulator.md)."""
    offload_outvalued: bool = DEFAULT_CONTROLLER_PARAMS.offload_outvalued
    """An outvalued draft counts as off for the offload trigger (``ElasticParams``)."""
    policy_seed_offset: int = 0
    """Added to the policy RNG's seed only: the same workload and acceptance draws, other
    policy draws (how far a policy's own randomness moves a result)."""


@dataclass(frozen=True)
class Contender:
    label: str
    policy: str
    params: dict[str, Any] = field(default_factory=dict)
    use_draft: bool = True
    skip_draft: bool = False
    elastic: ElasticMode = False
    """Elastic memory, as the engine's ``elastic_memory.enabled`` (resolved for the
    setting's device by :func:`runs_elastic`)."""
    warm_start: bool = False
    """Start from the statistics the same contender learned on another run (its task's
    ``warm_workload``), as a Serve replica starts from the policy actor's pooled table."""


WARM_START_SEED_OFFSET = 100
"""Workload seed of a warm-started contender's earlier run: ``seed + this`` (another draw
of the same workload, never one of the suite's seeds 0..99)."""


def default_contenders(
    gamma_max: int = 4, nightjar_params: dict[str, Any] | None = None, max_fixed_gamma: int = 5
) -> list[Contender]:
    """The Table 4 line-up: nightjar, off, fixed 1..max_fixed_gamma, vllm-static, dsd, ucbspec.

    Adaptive policies choose among 0..``gamma_max``; nightjar runs the ``nightjar`` preset
    (``NightjarParams``, the engine's too) overridden by ``nightjar_params``, with the
    engine's default elastic memory (``DEFAULT_ELASTIC_MODE``).
    """
    g = {"gamma_max": gamma_max}
    nightjar = {**g, **(nightjar_params or {})}
    out = [
        Contender("nightjar", "nightjar", nightjar, skip_draft=True, elastic=DEFAULT_ELASTIC_MODE),
        Contender("off", "off", use_draft=False),
    ]
    out += [
        Contender(f"fixed-{k}", "fixed", {"gamma_max": max_fixed_gamma, "gamma": k})
        for k in range(1, max_fixed_gamma + 1)
    ]
    out += [
        Contender("vllm-static", "vllm-static", g),
        Contender("dsd", "dsd", g),
        Contender("ucbspec", "ucbspec", g),
    ]
    return out


PAPER_PRESET = Contender("nightjar-paper", "nightjar-paper", {"gamma_max": 4}, True, True, True)
"""The paper's exact Algorithm 1 with Nightjar's engine setup (``--with-paper-preset``)."""

CEILING = Contender("gamma0+offload", "off", skip_draft=True, elastic=True)
"""Diagnostic: draft loaded but never used, offloaded at the first memory pressure: the most
any draft-loaded policy can get under load (``off`` has no draft and smaller blocks)."""


BATCH_ORACLE_CONTEXT_TOKENS = 512
"""Context length at which ``batch_oracle`` reads the cost model (as
``benchmarks/simulate_calibrate.py``)."""


def batch_oracle(setting: Setting, dataset: str, gamma_max: int = 4) -> Contender:
    """Diagnostic: the cost model's fastest gamma at every batch size, run as nightjar is.

    A vLLM-style per-batch-size table (``vllm-static``) read off the simulator's own cost
    model at ``BATCH_ORACLE_CONTEXT_TOKENS`` of context and the dataset's mean acceptance,
    with nightjar's engine setup (true skip on gamma = 0, elastic offload): what a policy
    that knew the hardware in advance would play, with no learning and no probes. A
    reference, not a bound: it reads the model at one context length and mean acceptance,
    so a learned schedule can beat it; where it is level with the best static choice, a
    gamma schedule has little to gain (docs/benchmarks.md, "Workload suite (simulator)").
    """
    acc = setting.acceptance_for(dataset)
    arms = range(gamma_max + 1)
    table: list[tuple[int, int, int]] = []
    for b in range(1, setting.max_num_seqs + 1):
        lat = [token_latency_s(setting, b, g, BATCH_ORACLE_CONTEXT_TOKENS, acc) for g in arms]
        gamma = min(arms, key=lat.__getitem__)
        if table and table[-1][2] == gamma:
            table[-1] = (table[-1][0], b, gamma)
        else:
            table.append((b, b, gamma))
    lo, _, gamma = table[-1]
    table[-1] = (lo, 1 << 20, gamma)  # batch sizes past max_num_seqs keep the last arm
    params = {"gamma_max": gamma_max, "num_speculative_tokens_per_batch_size": table}
    return Contender("batch-oracle", "vllm-static", params, skip_draft=True, elastic=True)


def elastic_params(setting: Setting, knobs: RunKnobs) -> ElasticParams:
    """Trigger thresholds and operation costs of ``setting`` (per GPU of the TP group)."""
    plan = plan_memory(
        setting.hw,
        setting.target,
        setting.draft,
        setting.tp,
        setting.gpu_memory_utilization,
        setting.activation_reserve_bytes,
    )
    return ElasticParams(
        tau_low_blocks=max(1, round(knobs.tau_low_fraction * plan.num_orig_blocks)),
        persist_steps=knobs.persist_steps,
        contract_persist_steps=knobs.contract_persist_steps,
        expand_stall_s=setting.expand_stall_s,
        contract_fixed_s=setting.contract_fixed_s,
        reload_s=plan.draft_weight_bytes / setting.hw.pcie_bw_bytes_per_s,
        migrate_s_per_block=2.0 * plan.block_bytes / setting.hw.effective_bw,
        reclaim_draft_kv=knobs.reclaim_draft_kv,
        offload_outvalued=knobs.offload_outvalued,
    )


def build_contender_policy(setting: Setting, c: Contender, seed: int) -> Policy:
    rng = random.Random(seed + 7919)
    policy = build_policy(c.policy, c.params, rng=rng)
    if isinstance(policy, NightjarPolicy):
        config = policy.config
        if config.switch_cost_ms == 0.0:
            return type(policy)(config, rng, simulated_switch_cost(setting))
    return policy


def runs_elastic(setting: Setting, c: Contender) -> bool:
    """Whether contender ``c`` runs elastic memory on ``setting``: its mode resolved by
    the engine's rule (``memory.elastic_mode``) for the setting's device."""
    blocker = elastic_memory_blocker(
        setting.hw.device_type, draft_model=c.use_draft, catch_up=c.skip_draft
    )
    return resolve_elastic_mode(c.elastic, blocker)


def server_options(
    setting: Setting, c: Contender, dataset: str, seed: int, knobs: RunKnobs
) -> ServerOptions:
    """How the simulated engine runs around contender ``c``."""
    return ServerOptions(
        dataset=dataset,
        use_draft=c.use_draft,
        draft_when_off="skip" if c.skip_draft else "sync",
        elastic=elastic_params(setting, knobs) if runs_elastic(setting, c) else None,
        seed=seed,
        observed_time=knobs.observed_time,
        offload_trigger=knobs.offload_trigger,
    )


def warm_started_policy(
    setting: Setting,
    c: Contender,
    warm_workload: Sequence[RequestSpec],
    dataset: str,
    seed: int,
    knobs: RunKnobs = RunKnobs(),
) -> Policy:
    """A fresh policy of ``c`` holding only the statistics ``c`` learned on ``warm_workload``
    (its bin schedules start over), as a replica loads the actor's pooled table."""
    earlier_seed = seed + WARM_START_SEED_OFFSET
    earlier = build_contender_policy(setting, c, earlier_seed + knobs.policy_seed_offset)
    options = server_options(setting, c, dataset, earlier_seed, knobs)
    SimServer(setting, earlier, options).run(warm_workload)
    policy = build_contender_policy(setting, c, seed + knobs.policy_seed_offset)
    policy.load_stats(earlier.export_stats())
    return policy


def contender_policy(
    setting: Setting,
    c: Contender,
    dataset: str,
    seed: int,
    knobs: RunKnobs = RunKnobs(),
    warm_workload: Sequence[RequestSpec] | None = None,
) -> Policy:
    """The policy ``c`` starts a run with: fresh, or warm-started from ``warm_workload``
    when ``c.warm_start``."""
    if not c.warm_start:
        return build_contender_policy(setting, c, seed + knobs.policy_seed_offset)
    if warm_workload is None:
        raise ValueError(f"contender {c.label!r} warm-starts but got no warm_workload")
    return warm_started_policy(setting, c, warm_workload, dataset, seed, knobs)


def run_contender(
    setting: Setting,
    c: Contender,
    workload: Sequence[RequestSpec],
    dataset: str,
    seed: int,
    knobs: RunKnobs = RunKnobs(),
    warm_workload: Sequence[RequestSpec] | None = None,
) -> SimResult:
    """Simulate ``workload`` under contender ``c`` (warm-started from ``warm_workload``
    when ``c.warm_start``)."""
    policy = contender_policy(setting, c, dataset, seed, knobs, warm_workload)
    options = server_options(setting, c, dataset, seed, knobs)
    return SimServer(setting, policy, options).run(workload)


@dataclass(frozen=True)
class LoadRow:
    """All contenders at one load, plus the oracle."""

    load: str
    summaries: dict[str, Summary]
    oracle_label: str

    def ratio(self, label: str, base: str = "off") -> tuple[float, float]:
        """(throughput ratio, mean E2E latency ratio) of ``label`` to ``base``."""
        s, b = self.summaries[label], self.summaries[base]
        return (
            s.throughput_tokens_per_s / b.throughput_tokens_per_s,
            s.mean_e2e_s / b.mean_e2e_s,
        )


def oracle_label(summaries: dict[str, Summary]) -> str:
    """Best static contender (off or fixed-k) by throughput; ties go to the first."""
    static = [k for k in summaries if k == "off" or k.startswith("fixed-")] or list(summaries)
    return max(static, key=lambda k: summaries[k].throughput_tokens_per_s)


@dataclass(frozen=True)
class RunTask:
    """One contender on one workload: the unit ``run_summaries`` fans out."""

    setting: Setting
    contender: Contender
    workload: tuple[RequestSpec, ...]
    dataset: str
    seed: int
    knobs: RunKnobs = RunKnobs()
    warm_workload: tuple[RequestSpec, ...] | None = None
    """The earlier run of a warm-started contender (``Contender.warm_start``)."""


def summarize_task(task: RunTask) -> Summary:
    """Run ``task`` and summarize it (a module-level function, so processes can run it)."""
    result = run_contender(
        task.setting,
        task.contender,
        task.workload,
        task.dataset,
        task.seed,
        task.knobs,
        task.warm_workload,
    )
    return summarize(result)


def run_summaries(tasks: Sequence[RunTask], jobs: int = 1) -> list[Summary]:
    """Summaries of ``tasks`` in order; with ``jobs`` > 1, in that many processes.

    NOTE: a run depends on its task alone (its seed, its workload), so the summaries are
    the same for every ``jobs``.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if jobs == 1 or len(tasks) <= 1:
        return [summarize_task(t) for t in tasks]
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
        return list(pool.map(summarize_task, tasks))


def compare_loads(
    setting: Setting,
    contenders: Sequence[Contender],
    cases: Sequence[tuple[str, int, Sequence[RequestSpec]]],
    dataset: str,
    knobs: RunKnobs = RunKnobs(),
    jobs: int = 1,
    warm_workloads: Sequence[Sequence[RequestSpec]] | None = None,
) -> list[LoadRow]:
    """Every contender on every ``(load label, seed, workload)`` case, one row per case;
    warm-started contenders first run the case's entry of ``warm_workloads``."""
    workloads = [tuple(wl) for _, _, wl in cases]  # NOTE: one copy per case, shared by its runs
    warm = [tuple(wl) for wl in warm_workloads] if warm_workloads is not None else None
    if warm is not None and len(warm) != len(cases):
        raise ValueError(f"need one warm workload per case, got {len(warm)} for {len(cases)}")
    tasks = [
        RunTask(setting, c, wl, dataset, seed, knobs, warm[i] if warm and c.warm_start else None)
        for i, ((_, seed, _), wl) in enumerate(zip(cases, workloads, strict=True))
        for c in contenders
    ]
    summaries = iter(run_summaries(tasks, jobs))
    rows = []
    for load, _, _ in cases:
        by_label = {c.label: next(summaries) for c in contenders}
        rows.append(LoadRow(load, by_label, oracle_label(by_label)))
    return rows


def with_params(c: Contender, **params: Any) -> Contender:
    """``c`` with extra policy params."""
    return replace(c, params={**c.params, **params})
