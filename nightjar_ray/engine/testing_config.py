"""``TestingConfig``: switches for tests, benchmarks and chaos runs (``NightjarConfig.testing``).

Not part of the product schema: the Helm chart's schema and the docs leave this block out,
and nothing an operator deploys needs it. It forces the engine's paths on a schedule
(memory events, a gamma schedule), checks them more expensively (``self_check``), runs a
control without the draft KV catch-up, or overrides research parameters (a policy's,
the batch-size and observation rules).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nightjar_ray.driver.observation import DEFAULT_OBSERVATION_RULE, ObservationRuleName

BatchSizeRule = Literal["decode", "scheduled"]


class TestingConfig(BaseModel):
    """Test-only switches; every default leaves the engine as an operator runs it."""

    __test__ = False  # not a pytest test class
    model_config = ConfigDict(extra="forbid", frozen=True)

    chaos_cycle_steps: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description=(
            "Every N scheduling steps give the top chaos_region_blocks KV blocks back "
            "(compacting the live ones below the boundary, as a contraction does) and N "
            "steps later hand them out again. None: off."
        ),
    )
    chaos_offload_steps: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description=(
            "Every N scheduling steps offload the draft's weights (and release its KV "
            "pages), N steps later reload them; speculation is off while the draft is "
            "away and its KV is rebuilt by the catch-up. Needs draft_sync='catch-up'. "
            "None: off."
        ),
    )
    chaos_reload_delay_s: float = Field(
        default=0.0,
        ge=0.0,
        le=60.0,
        description=(
            "Hold every draft reload this long in its background thread (the step loop "
            "goes on without speculation meanwhile)."
        ),
    )
    chaos_region_blocks: int = Field(
        default=8, ge=1, description="Blocks the chaos cycle takes away and gives back."
    )
    self_check: bool = Field(
        default=False,
        description=(
            "Check every reloaded draft weight against a digest and measure the committed "
            "KV + draft bytes after every step (costs time)."
        ),
    )
    fault_wrong_block_remap: bool = Field(
        default=False,
        description=(
            "A fault that breaks losslessness, for the self-check's own tests: every "
            "contraction copies the moved KV pages but leaves the block tables on the old "
            "ids, in the region it gives back, so requests read KV that is not theirs."
        ),
    )
    skip_catch_up: bool = Field(
        default=False,
        description=(
            "A control: gamma = 0 runs no draft forward and the draft KV is never caught "
            "up (acceptance collapses). Needs draft_sync='catch-up'."
        ),
    )
    forced_gammas: list[int] | None = Field(
        default=None,
        min_length=1,
        description=(
            "Play this gamma schedule instead of the policy (each entry "
            "forced_steps_per_gamma steps, then the next, wrapping around); entries in "
            "[0, gamma_max]. None: the policy decides."
        ),
    )
    forced_steps_per_gamma: int = Field(
        default=4, ge=1, description="Consecutive steps per entry of forced_gammas."
    )
    forced_undrafted_cycle: int | None = Field(
        default=None,
        ge=2,
        le=1000,
        description=(
            "Replace the draft gate's per-request verdict in steps that speculate: the "
            "request that arrived i-th (from 0) is undrafted in scheduling step t iff "
            "(i + t // forced_undrafted_steps) % forced_undrafted_cycle == 0, so every "
            "request switches in and out of eligibility. A step whose requests are all "
            "undrafted plays gamma 0 (its decision-log entry keeps the policy's gamma). "
            "Needs draft_sync='catch-up' and the draft_model method. None: off."
        ),
    )
    forced_undrafted_steps: int = Field(
        default=3, ge=1, le=100_000, description="Steps per phase of forced_undrafted_cycle."
    )
    count_draft_slots: bool = Field(
        default=False,
        description=(
            "Count, per request, the draft KV slots every draft forward writes "
            "(DraftSyncStats.num_draft_kv_slots; a host copy of the slot mapping per "
            "forward)."
        ),
    )
    batch_size_rule: BatchSizeRule = Field(
        default="decode",
        description=(
            "Research: what counts toward B. 'decode' = requests verifying drafts this "
            "step (the product's rule); 'scheduled' = every scheduled request, prefills "
            "included (vLLM's dynamic-SD rule)."
        ),
    )
    observation_rule: ObservationRuleName = Field(
        default=DEFAULT_OBSERVATION_RULE,
        description=(
            "Research: which steps the policy learns from (the simulator's "
            "--observed-time): 'prefill-corrected' (the product's rule), 'pure' (only "
            "steps without prefill chunks) or 'step' (wall time)."
        ),
    )
    draft_gate_price_s_per_token: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description=(
            "Pins c, the target's prefill seconds per prompt token that the draft gate "
            "prices owed draft work with, instead of the one learned from the engine's "
            "steps (samples are still corrected with the learned one): tests of the "
            "gate's per-request plumbing that must not depend on a tiny model's step "
            "timings. None: learned."
        ),
    )
    policy_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Research parameters applied over the policy's preset and policy_params "
            "(the nightjar presets: any field of nightjar_ray.policy.NightjarParams), as "
            "the simulator's --nightjar-params; gamma_max stays the engine's."
        ),
    )

    def forced_undrafted(self, arrival_index: int, step: int) -> bool:
        """Whether ``forced_undrafted_cycle`` skips the ``arrival_index``-th request in
        scheduling step ``step`` (False when the cycle is off)."""
        cycle = self.forced_undrafted_cycle
        if cycle is None:
            return False
        return (arrival_index + step // self.forced_undrafted_steps) % cycle == 0

    @property
    def moves_memory(self) -> bool:
        """Whether a chaos cycle moves memory."""
        return bool(self.chaos_cycle_steps or self.chaos_offload_steps)
