"""``NightjarConfig``: what the engine adapter needs, validated before vLLM starts.

It travels inside vLLM's ``additional_config`` (key ``"nightjar"``) to the
scheduler (engine-core process) and to every worker, which re-validate it
(cheap) on their side. Importing this module does not import vLLM. Its ``testing``
block (:class:`TestingConfig`) holds test-only switches and is left out of the JSON
schema (the product schema).

The largest gamma is vLLM's own ``speculative_config.num_speculative_tokens``
(:func:`~nightjar_ray.engine.args.nightjar_engine_args` reads it, default
:data:`DEFAULT_NUM_SPECULATIVE_TOKENS`) and reaches the policy as ``policy_params``'
``gamma_max``; the field ``gamma_max`` is a deprecated alias of it.

>>> cfg = NightjarConfig(policy="fixed", policy_params={"gamma": 2, "gamma_max": 3})
>>> cfg.policy_config().gamma_max
3
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from nightjar_ray.engine.testing_config import TestingConfig
from nightjar_ray.memory.elastic_mode import (
    DEFAULT_CONTROLLER_PARAMS,
    DEFAULT_ELASTIC_MODE,
    ElasticMode,
)
from nightjar_ray.policy import (
    PRESETS,
    ForcedSchedulePolicy,
    Policy,
    PolicyConfig,
    build_policy,
    operator_policy_config,
    policy_config,
    policy_names,
)
from nightjar_ray.policy.registry import load_switch_cost

ADDITIONAL_CONFIG_KEY = "nightjar"

DEFAULT_NUM_SPECULATIVE_TOKENS = 4
"""The largest gamma when neither ``speculative_config.num_speculative_tokens`` nor the
deprecated ``gamma_max`` is set."""
MAX_NUM_SPECULATIVE_TOKENS = 16

DraftSyncMode = Literal["catch-up", "stock", "none"]
"""What a worker does with the draft on gamma = 0 ("none": ``testing.skip_catch_up``)."""


CudaGraphs = Literal["stock", "per-gamma"]
"""``NightjarConfig.cuda_graphs``: vLLM's CUDA graphs, or FULL decode graphs per gamma."""


class PoolingConfig(BaseModel):
    """Pooling of learned statistics across a Serve deployment's replicas."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        default=True,
        description=(
            "Under Ray Serve, push this replica's observations to the deployment's policy "
            "actor and load the pooled table back (replicas learn together; a new replica "
            "starts from the policy pool). Ignored outside Serve."
        ),
    )
    sync_interval_s: float = Field(
        default=2.0, gt=0.0, le=300.0, description="Seconds between exchanges with the actor."
    )
    snapshot_dir: str = Field(
        default="/tmp/nightjar-ray/policy-pool",
        pattern=r"^(/|file:///|s3://[^/?]+|gs://[^/?]+)",
        description=(
            "Where the policy actor snapshots the policy pool (when it changed, at most once "
            "a second) and restores it from when it restarts: an absolute directory on the "
            "actor's node (on Kubernetes, a volume mounted there), a file:/// URI, or an "
            "object store prefix s3://bucket/prefix or gs://bucket/prefix (credentials from "
            "the environment; query options such as ?endpoint_override= go to pyarrow.fs)."
        ),
    )
    actor_node: Literal["head", "any"] = Field(
        default="head",
        description=(
            "Where the policy actor runs: 'head' pins it to the Ray head node (it takes no "
            "CPU, so a head started with num-cpus 0 holds it, and it outlives the loss of "
            "any worker node); 'any' leaves its placement to Ray."
        ),
    )


class ElasticMemoryConfig(BaseModel):
    """Elastic draft memory (paper §6; docs/memory.md): under KV scarcity with speculation
    off, offload the draft and grow the KV cache into its memory; when the queue drains,
    compact the KV cache and reload the draft."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: ElasticMode = Field(
        default=DEFAULT_ELASTIC_MODE,
        description=(
            "Run the §6.1 memory controller: offload the draft and hand its weights' and "
            "KV share's memory to the KV cache under scarcity; compact and reload when "
            "load drops. 'auto': on where the engine's device has a KV arena (CPU, CUDA) "
            "and the deployment can run it (a draft model, draft_sync='catch-up'), off "
            "elsewhere with a log line saying why; true: on, an error at start where it "
            "cannot run; false: off."
        ),
    )
    tau_low_fraction: float = Field(
        default=DEFAULT_CONTROLLER_PARAMS.tau_low_fraction,
        ge=0.0,
        le=0.9,
        description="tau_low as a fraction of the stock block pool's blocks (paper §7.3.3: 10%).",
    )
    expand_persist_steps: int = Field(
        default=DEFAULT_CONTROLLER_PARAMS.expand_persist_steps,
        ge=1,
        le=100_000,
        description="T_persist: steps speculation must be off with N_free < tau_low.",
    )
    contract_persist_steps: int = Field(
        default=DEFAULT_CONTROLLER_PARAMS.contract_persist_steps,
        ge=1,
        le=100_000,
        description=(
            "Steps the queue must stay empty with N_free > N_region + tau_low before a "
            "contraction (the paper: 1)."
        ),
    )
    offload_outvalued: bool = Field(
        default=DEFAULT_CONTROLLER_PARAMS.offload_outvalued,
        description=(
            "Also offload when requests wait for blocks and the draft's memory, as KV "
            "cache, would grow the batch by more than speculation speeds it up by the "
            "policy's estimates (docs/memory.md, 'Outvalued'). False: the paper's "
            "condition alone (speculation off)."
        ),
    )
    block_mover: Literal["torch", "triton"] = Field(
        default="torch",
        description=(
            "How workers move KV blocks: 'torch' (gather/scatter, CPU and GPU) or "
            "'triton' (one program per block and layer; GPU)."
        ),
    )

    @property
    def on(self) -> bool:
        """Whether the controller runs. ``RuntimeError`` while ``enabled`` is "auto": an
        engine reads a config resolved for its device (``engine.args.resolve_elastic_memory``)."""
        if self.enabled == "auto":
            raise RuntimeError(
                "elastic_memory.enabled is 'auto' here: resolve it for the engine's device "
                "first (nightjar_engine_args and the Serve replica do)"
            )
        return self.enabled


class NightjarConfig(BaseModel):
    """Per-engine Nightjar settings (user-facing; unknown fields are errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str = Field(
        default="nightjar",
        description=(
            f"Policy name, one of {', '.join(policy_names())} (docs/policies.md). "
            "'nightjar': the defaults measured best; 'nightjar-paper': the paper's exact "
            "Algorithm 1, for reproduction."
        ),
    )
    policy_params: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "The policy's own parameters (docs/policies.md), e.g. fixed: {gamma: 3}; the "
            "nightjar presets take none. gamma_max is filled in from "
            "speculative_config.num_speculative_tokens (if given here, it must equal it)."
        ),
    )
    gamma_max: int | None = Field(
        default=None,
        ge=1,
        le=MAX_NUM_SPECULATIVE_TOKENS,
        description=(
            "Deprecated alias of engine_kwargs.speculative_config.num_speculative_tokens "
            "(vLLM's name for the largest speculative length, default "
            f"{DEFAULT_NUM_SPECULATIVE_TOKENS}): set that instead. Accepted with a "
            "deprecation warning; an error when both are set and differ."
        ),
        json_schema_extra={"deprecated": True},
    )
    switch_cost_profile: str | None = Field(
        default=None,
        description=(
            "C_switch(L_max, B) table of Eq. 4's switch penalty: a profile CSV "
            "(docs/policies.md) or builtin:NAME. Read by the nightjar-paper preset; the "
            "default nightjar preset does not weigh the penalty (its draft gate prices "
            "each catch-up) and ignores it."
        ),
    )
    draft_sync: Literal["catch-up", "stock"] = Field(
        default="catch-up",
        description=(
            "'catch-up': gamma=0 runs no draft forward, the draft KV is caught up when "
            "speculation resumes (default). 'stock': vLLM's K=0, which still runs the draft "
            "to keep its KV in sync."
        ),
    )
    cuda_graphs: CudaGraphs = Field(
        default="stock",
        description=(
            "GPU only (vLLM's V1 model runner). 'stock': vLLM's CUDA graphs, FULL for "
            "decode steps at the largest gamma only, PIECEWISE at smaller gammas. "
            "'per-gamma': also capture FULL decode graphs for every gamma 0..K "
            "(more graph memory; docs/cuda-graphs.md). Turn it on once `nightjar-ray "
            "selfcheck` passes with it on your GPU."
        ),
    )
    policy_snapshot: str | None = Field(
        default=None,
        description=(
            "Warm start: a JSON file written from `policy.snapshot()` (statistics and "
            "schedule state) of the same policy; the engine's policy starts from it."
        ),
    )
    seed: int = Field(default=0, description="Seed of the policy's RNG.")
    decision_log_path: str | None = Field(
        default=None, description="If set, the scheduler appends one JSON line per step here."
    )
    log_interval_steps: int = Field(
        default=0, ge=0, description="Log a decision summary every N steps at INFO (0 = never)."
    )
    pooling: PoolingConfig = Field(
        default_factory=PoolingConfig, description="Pooling across replicas (Ray Serve)."
    )
    elastic_memory: ElasticMemoryConfig = Field(
        default_factory=ElasticMemoryConfig,
        description="Elastic draft memory and KV compaction (docs/memory.md).",
    )
    metrics_interval_s: float = Field(
        default=1.0,
        gt=0.0,
        le=60.0,
        description="Under Ray Serve, seconds between updates of the nightjar_* metrics.",
    )
    testing: SkipJsonSchema[TestingConfig] = Field(
        default_factory=TestingConfig,
        description="Tests, benchmarks and chaos runs only; not in the product schema.",
    )

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, policy: str) -> str:
        if policy not in policy_names():
            raise ValueError(f"unknown policy {policy!r}; choose from {policy_names()}")
        return policy

    @model_validator(mode="after")
    def _check(self) -> NightjarConfig:
        self.policy_config()
        self._check_memory_modes()
        if self.switch_cost_profile is not None:
            try:
                load_switch_cost(self.switch_cost_profile, 0.0)
            except (OSError, ValueError) as e:
                raise ValueError(f"switch_cost_profile: {e}") from e
        if self.testing.forced_gammas is not None:
            if self.policy_snapshot is not None:
                raise ValueError("testing.forced_gammas and policy_snapshot: set one of them")
            try:
                self.build_policy()
            except ValueError as e:
                raise ValueError(f"testing.forced_gammas: {e}") from e
        if self.policy_snapshot is not None:
            self.build_policy()
        return self

    def _check_memory_modes(self) -> None:
        testing = self.testing
        chaos = [n for n in ("chaos_cycle_steps", "chaos_offload_steps") if getattr(testing, n)]
        elastic = self.elastic_memory.enabled is True
        if elastic and chaos:
            raise ValueError(
                f"elastic_memory.enabled and testing.{chaos[0]} drive the same memory; "
                "set one of them"
            )
        if testing.forced_undrafted_cycle is not None and self.draft_sync != "catch-up":
            raise ValueError(
                "testing.forced_undrafted_cycle needs draft_sync='catch-up' (got "
                f"{self.draft_sync!r}): undrafted requests are caught up later"
            )
        if testing.skip_catch_up and self.draft_sync != "catch-up":
            raise ValueError(
                "testing.skip_catch_up needs draft_sync='catch-up' (got 'stock', which runs "
                "the draft at gamma = 0)"
            )
        needs_catch_up = {
            "elastic_memory.enabled": elastic,
            "testing.chaos_offload_steps": bool(testing.chaos_offload_steps),
        }
        for name, on in needs_catch_up.items():
            if on and self.draft_sync_mode != "catch-up":
                got = "testing.skip_catch_up" if testing.skip_catch_up else repr(self.draft_sync)
                raise ValueError(
                    f"{name} needs draft_sync='catch-up' (got {got}): the draft KV is "
                    "rebuilt by the catch-up"
                )

    @property
    def draft_sync_mode(self) -> DraftSyncMode:
        """What workers do with the draft on gamma = 0: ``draft_sync``, or "none" (no
        catch-up) under ``testing.skip_catch_up``."""
        return "none" if self.testing.skip_catch_up else self.draft_sync

    @property
    def offloads_draft(self) -> bool:
        """Whether the draft's weights may be offloaded (the controller or a chaos cycle);
        ``elastic_memory`` must be resolved (:attr:`ElasticMemoryConfig.on`)."""
        return self.elastic_memory.on or bool(self.testing.chaos_offload_steps)

    @property
    def moves_memory(self) -> bool:
        """Whether anything moves memory (the controller or a chaos cycle); ``elastic_memory``
        must be resolved (:attr:`ElasticMemoryConfig.on`)."""
        return self.elastic_memory.on or self.testing.moves_memory

    def build_policy(self) -> Policy:
        """The engine's policy (``testing.forced_gammas``' schedule when set), restored
        from ``policy_snapshot`` when one is set."""
        testing = self.testing
        if testing.forced_gammas is not None:
            steps = testing.forced_steps_per_gamma
            return ForcedSchedulePolicy(testing.forced_gammas, steps, self.num_speculative_tokens)
        table = None
        if self.policy in PRESETS and self.switch_cost_profile is not None:
            table = load_switch_cost(self.switch_cost_profile, 0.0)
        rng = random.Random(self.seed)
        policy = build_policy(self.policy, self.policy_config(), rng=rng, switch_cost=table)
        if self.policy_snapshot is not None:
            try:
                policy.restore(json.loads(Path(self.policy_snapshot).read_text()))
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise ValueError(f"policy_snapshot: {e!r}") from e
        return policy

    def policy_config(self) -> PolicyConfig:
        """The validated policy config (``testing.policy_overrides`` applied);
        ``ValueError`` names the bad field."""
        if self.policy not in policy_names():
            raise ValueError(f"unknown policy {self.policy!r}; choose from {policy_names()}")
        params = dict(self.policy_params)
        given = params.setdefault("gamma_max", self.num_speculative_tokens)
        if self.gamma_max is not None and given != self.gamma_max:
            raise ValueError(
                f"policy_params.gamma_max={given} differs from gamma_max={self.gamma_max}"
            )
        try:
            operator_policy_config(self.policy, params)
        except ValueError as e:
            hint = " (a nightjar preset takes only gamma_max)" if self.policy in PRESETS else ""
            raise ValueError(f"policy_params{hint}: {e}") from e
        overrides = self.testing.policy_overrides
        if not overrides:
            return policy_config(self.policy, params)
        if "gamma_max" in overrides:
            raise ValueError(
                "testing.policy_overrides cannot set gamma_max; set "
                "speculative_config.num_speculative_tokens"
            )
        try:
            return policy_config(self.policy, {**params, **overrides})
        except ValueError as e:
            raise ValueError(f"testing.policy_overrides: {e}") from e

    @property
    def num_speculative_tokens(self) -> int:
        """The largest gamma the policy may pick: ``policy_params``' gamma_max, else the
        deprecated ``gamma_max``, else :data:`DEFAULT_NUM_SPECULATIVE_TOKENS`. A config that
        went through ``engine.args.with_num_speculative_tokens`` holds vLLM's value there."""
        given = self.policy_params.get("gamma_max", self.gamma_max)
        return DEFAULT_NUM_SPECULATIVE_TOKENS if given is None else int(given)

    def to_additional_config(self) -> dict[str, Any]:
        """The ``additional_config`` entry the scheduler and workers read back."""
        return {ADDITIONAL_CONFIG_KEY: self.model_dump(mode="json")}

    @classmethod
    def from_additional_config(cls, additional_config: Any) -> NightjarConfig:
        """Inverse of :meth:`to_additional_config`; defaults when absent."""
        raw = (additional_config or {}).get(ADDITIONAL_CONFIG_KEY) or {}
        return cls.model_validate(raw)
