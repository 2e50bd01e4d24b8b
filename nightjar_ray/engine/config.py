"""``NightjarConfig``: what the engine adapter needs, validated before vLLM starts.

It travels inside vLLM's ``additional_config`` (key ``"nightjar"``) to the
scheduler (engine-core process) and to every worker, which re-validate it
(cheap) on their side. Importing this module does not import vLLM.

>>> cfg = NightjarConfig(policy="fixed", policy_params={"gamma": 2}, gamma_max=3)
>>> cfg.policy_config().gamma_max
3
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from nightjar_ray.driver.observation import DEFAULT_OBSERVATION_RULE, ObservationRuleName
from nightjar_ray.policy import Policy, PolicyConfig, build_policy, policy_config
from nightjar_ray.policy.registry import load_switch_cost

ADDITIONAL_CONFIG_KEY = "nightjar"

DraftSyncMode = Literal["catch-up", "stock", "none"]
BatchSizeRule = Literal["decode", "scheduled"]


class PoolingConfig(BaseModel):
    """Pooling of learned statistics across a Serve deployment's replicas."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        default=True,
        description=(
            "Under Ray Serve, push this replica's observations to the deployment's policy "
            "actor and load the pooled table back (replicas learn together; a new replica "
            "starts from the pool). Ignored outside Serve."
        ),
    )
    sync_interval_s: float = Field(
        default=2.0, gt=0.0, le=300.0, description="Seconds between exchanges with the actor."
    )
    snapshot_dir: str = Field(
        default="/tmp/nightjar-ray/policy-pool",
        min_length=1,
        description=(
            "Directory where the policy actor snapshots the pool after every exchange "
            "and restores it from when it restarts (mount a volume here on Kubernetes)."
        ),
    )


class ElasticMemoryConfig(BaseModel):
    """Elastic draft memory (paper §6; docs/memory.md): under KV scarcity with speculation
    off, offload the draft and grow the KV cache into its memory; when the queue drains,
    compact the KV cache and reload the draft. The chaos options force the same paths
    on a schedule for tests and chaos runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        default=False,
        description=(
            "Run the §6.1 memory controller: offload the draft and hand its weights' and "
            "KV share's memory to the KV cache under scarcity; compact and reload when "
            "load drops. Needs draft_sync='catch-up' and a CPU engine (the GPU arena is "
            "not built yet)."
        ),
    )
    tau_low_fraction: float = Field(
        default=0.10,
        ge=0.0,
        le=0.9,
        description="tau_low as a fraction of the stock pool's blocks (paper §7.3.3: 10%).",
    )
    expand_persist_steps: int = Field(
        default=8,
        ge=1,
        le=100_000,
        description="T_persist: steps speculation must be off with N_free < tau_low.",
    )
    contract_persist_steps: int = Field(
        default=8,
        ge=1,
        le=100_000,
        description=(
            "Steps the queue must stay empty with N_free > N_region + tau_low before a "
            "contraction (the paper: 1)."
        ),
    )
    offload_outvalued: bool = Field(
        default=True,
        description=(
            "Also offload when requests wait for blocks and the draft's memory, as KV "
            "cache, would grow the batch by more than speculation speeds it up by the "
            "policy's estimates (docs/memory.md, 'Outvalued'). False: the paper's "
            "condition alone (speculation off)."
        ),
    )
    self_check: bool = Field(
        default=False,
        description=(
            "Tests and debugging: check every reloaded draft weight against a digest and "
            "measure the committed KV + draft bytes after every step (costs time)."
        ),
    )

    chaos_cycle_steps: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description=(
            "Testing and chaos runs: every N scheduling steps give the top "
            "chaos_region_blocks KV blocks back (compacting the live ones below the "
            "boundary, as a contraction does) and N steps later hand them out again. "
            "None (default): off."
        ),
    )
    chaos_offload_steps: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description=(
            "Testing and chaos runs: every N scheduling steps offload the draft's weights "
            "(and release its KV pages), N steps later reload them; speculation is off "
            "while the draft is away and the draft KV is rebuilt by the catch-up. "
            "Needs draft_sync='catch-up'. None (default): off."
        ),
    )
    chaos_reload_delay_s: float = Field(
        default=0.0,
        ge=0.0,
        le=60.0,
        description=(
            "Testing and chaos runs: hold every draft reload this long in its background "
            "thread (the step loop goes on without speculation meanwhile)."
        ),
    )
    chaos_region_blocks: int = Field(
        default=8,
        ge=1,
        description="Blocks the chaos cycle takes away and gives back (the region).",
    )
    block_mover: Literal["torch", "triton"] = Field(
        default="torch",
        description=(
            "How workers move KV blocks: 'torch' (gather/scatter, CPU and GPU) or "
            "'triton' (one program per block and layer; GPU)."
        ),
    )

    @model_validator(mode="after")
    def _check_modes(self) -> ElasticMemoryConfig:
        if self.enabled and (self.chaos_cycle_steps or self.chaos_offload_steps):
            raise ValueError(
                "elastic_memory.enabled and the chaos_* cycles drive the same memory; "
                "set one of them"
            )
        return self

    @property
    def any_enabled(self) -> bool:
        """Whether anything moves memory (the controller or a chaos cycle)."""
        return self.enabled or bool(self.chaos_cycle_steps or self.chaos_offload_steps)


class NightjarConfig(BaseModel):
    """Per-engine Nightjar settings (user-facing; unknown fields are errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str = Field(default="nightjar", description="Policy name (see nightjar_ray.policy).")
    policy_params: dict[str, Any] = Field(
        default_factory=dict,
        description="Policy parameters; gamma_max and switch_cost_profile are filled in.",
    )
    gamma_max: int = Field(
        default=4,
        ge=1,
        le=16,
        description="Largest speculative length (Gamma_max); vLLM's num_speculative_tokens.",
    )
    switch_cost_profile: str | None = Field(
        default=None,
        description=(
            "C_switch(L_max, B) profile CSV written by `nightjar-ray profile-switch-cost` "
            "(or builtin:NAME); used by the nightjar policy."
        ),
    )
    draft_sync: DraftSyncMode = Field(
        default="catch-up",
        description=(
            "'catch-up': gamma=0 runs no draft forward, the draft KV is caught up when "
            "speculation resumes (default). 'stock': vLLM's K=0, which still runs the draft "
            "to keep its KV in sync. 'none': skip without catch-up (acceptance collapses; "
            "a control for tests and benchmarks only)."
        ),
    )
    batch_size_rule: BatchSizeRule = Field(
        default="decode",
        description=(
            "What counts toward B: 'decode' = requests verifying drafts this step "
            "(default); 'scheduled' = every scheduled request, prefills included "
            "(vLLM's dynamic-SD rule)."
        ),
    )
    observation_rule: ObservationRuleName = Field(
        default=DEFAULT_OBSERVATION_RULE,
        description=(
            "Which steps the policy learns from (the simulator uses the same rule): "
            "'prefill-corrected' (default): steps with prefill chunks count, less the "
            "target's prefill cost learned at gamma=0, so the draft's prefill stays "
            "charged to speculation; 'pure': only steps without prefill; 'step': wall time."
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

    @model_validator(mode="after")
    def _check_policy(self) -> NightjarConfig:
        self.policy_config()
        elastic = self.elastic_memory
        for name in ("enabled", "chaos_offload_steps"):
            if getattr(elastic, name) and self.draft_sync != "catch-up":
                raise ValueError(
                    f"elastic_memory.{name} needs draft_sync='catch-up' "
                    f"(got {self.draft_sync!r}): the draft KV is rebuilt by the catch-up"
                )
        if self.switch_cost_profile is not None:
            try:
                load_switch_cost(self.switch_cost_profile, 0.0)
            except (OSError, ValueError) as e:
                raise ValueError(f"switch_cost_profile: {e}") from e
        if self.policy_snapshot is not None:
            self.build_policy()
        return self

    def build_policy(self) -> Policy:
        """The engine's policy, restored from ``policy_snapshot`` when one is set."""
        policy = build_policy(self.policy, self.policy_config(), rng=random.Random(self.seed))
        if self.policy_snapshot is not None:
            try:
                policy.restore(json.loads(Path(self.policy_snapshot).read_text()))
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise ValueError(f"policy_snapshot: {e!r}") from e
        return policy

    def policy_config(self) -> PolicyConfig:
        """The validated policy config; ``ValueError`` names the bad field."""
        params = dict(self.policy_params)
        given = params.setdefault("gamma_max", self.gamma_max)
        if given != self.gamma_max:
            raise ValueError(
                f"policy_params.gamma_max={given} differs from gamma_max={self.gamma_max}"
            )
        if self.switch_cost_profile is not None and self.policy in ("nightjar", "nightjar-paper"):
            params.setdefault("switch_cost_profile", self.switch_cost_profile)
        return policy_config(self.policy, params)

    def to_additional_config(self) -> dict[str, Any]:
        """The ``additional_config`` entry the scheduler and workers read back."""
        return {ADDITIONAL_CONFIG_KEY: self.model_dump(mode="json")}

    @classmethod
    def from_additional_config(cls, additional_config: Any) -> NightjarConfig:
        """Inverse of :meth:`to_additional_config`; defaults when absent."""
        raw = (additional_config or {}).get(ADDITIONAL_CONFIG_KEY) or {}
        return cls.model_validate(raw)
