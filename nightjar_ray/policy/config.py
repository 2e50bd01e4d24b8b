"""Typed, user-facing configuration of each policy (pydantic, ``extra="forbid"``).

Configs are validated where users write them (engine args, Serve config, CLI),
so a bad value fails before anything starts, with pydantic naming the field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class PolicyConfig(BaseModel):
    """Fields every policy has."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gamma_max: int = Field(
        4, ge=0, le=16, description="Largest speculative length (Gamma_max); arms are 0..gamma_max."
    )


class NightjarPolicyConfig(PolicyConfig):
    """Nightjar: the paper's Algorithm 1 and Eq. 4, with the defaults measured best.

    Every default below was chosen on evidence (docs/policies.md, "Defaults and the paper
    preset"); :class:`NightjarPaperPolicyConfig` holds the paper's exact settings.
    """

    bucketing: Literal["exact", "pow2"] = Field(
        "pow2",
        description="Batch-size keys: 'exact' (paper) or 'pow2' (neighbours share samples).",
    )
    switch_cost_profile: str | None = Field(
        None,
        description=(
            "C_switch(L_max, B) profile: a CSV path, or 'builtin:<name>' "
            "(e.g. builtin:paper-rtx4090-7b). None uses switch_cost_ms everywhere."
        ),
    )
    switch_cost_ms: float = Field(
        0.0, ge=0.0, description="Constant C_switch in ms when no profile is given."
    )
    switch_cost_weight: float = Field(
        0.0,
        ge=0.0,
        description=(
            "Multiplier on the Eq. 4 penalty (1.0 = paper). The penalty is charged to one "
            "step's latency per token although the catch-up it stands for is paid once, "
            "and the draft gate already prices each step's catch-up from the tokens "
            "actually owed; 0 (the default) leaves the catch-up to the gate."
        ),
    )
    latency_estimator: Literal["step-mean", "token-weighted", "factored"] = Field(
        "factored",
        description=(
            "How l~[B, gamma] averages steps: 'step-mean' is the mean of per-step "
            "duration/tokens (paper §4.2); 'token-weighted' is sum(duration)/sum(tokens), "
            "the long-run latency per token, unbiased when tokens per step vary (small B); "
            "'factored' is the token-weighted step time with each key's tokens per "
            "request shrunk toward their mean over every batch size (acceptance does not "
            "depend on B), so one unlucky acceptance draw cannot retire an arm."
        ),
    )
    tokens_prior_req_steps: float = Field(
        16.0,
        ge=0.0,
        le=1e6,
        description=(
            "'factored' only: weight, in request-steps (B per step), of the pooled tokens "
            "per request in a key's estimate; 0 is 'token-weighted' exactly."
        ),
    )
    exploration: Literal["uniform", "local"] = Field(
        "local",
        description=(
            "Arm of an exploration bin: 'uniform' over 0..gamma_max (paper, Algorithm 1 "
            "line 11), or 'local': once the key can rank every arm, uniform over the "
            "exploited gamma and its two neighbours (cheap probes at high load)."
        ),
    )
    explore_bin_steps: int | None = Field(
        2,
        ge=1,
        description=(
            "Cap on the steps an exploration bin plays its probe; the rest of the bin "
            "exploits. None (paper) probes for the whole bin, sqrt(H) steps, which late "
            "in a key's schedule is tens of steps of a possibly bad arm."
        ),
    )
    share_across_keys: bool = Field(
        False,
        description=(
            "Rank the arms a batch-size key has not tried yet from the nearest key that has "
            "tried every arm (its estimates rescaled to this key's), instead of playing each "
            "untried arm once (paper). Lowers regret early but lost on bursty loads in the "
            "simulator's suite (docs/policies.md), so off by default."
        ),
    )
    min_arm_tokens_per_req: float = Field(
        1.0,
        ge=0.0,
        le=64.0,
        description=(
            "Tokens per request of the key (its largest batch size) an arm must have "
            "observed before the key trusts its estimate; until then exploitation plays "
            "the arm again, as it plays an untried arm. 0 (paper) trusts one sample, so "
            "one step that rejected every draft token can retire an arm for good. Needs "
            "latency_estimator 'token-weighted' (its counts are tokens)."
        ),
    )

    draft_gate: bool = Field(
        True,
        description=(
            "Run gamma = 0 in a step whose speculation cannot earn back the draft work it "
            "owes (prefill of new prompts, catch-up of skipped tokens): remaining output "
            "tokens x the estimated saving per token vs owed tokens x the learned draft "
            "cost per token (docs/policies.md, 'The draft gate'). False (paper) "
            "speculates whenever the bandit's gamma is > 0."
        ),
    )

    price_draft_memory: bool = Field(
        True,
        description=(
            "Tell the memory triggers how much speculation gains at the current batch "
            "size (Policy.speculation_gain), so that with elastic memory a draft whose "
            "memory is worth more as KV cache is offloaded even while speculating "
            "(docs/memory.md, 'Outvalued'). False (paper): only speculation off counts."
        ),
    )

    @model_validator(mode="after")
    def _min_arm_tokens_needs_token_counts(self) -> NightjarPolicyConfig:
        if self.min_arm_tokens_per_req > 0.0 and self.latency_estimator == "step-mean":
            raise ValueError(
                "min_arm_tokens_per_req > 0 needs latency_estimator 'token-weighted' or "
                "'factored', "
                f"got {self.latency_estimator!r}"
            )
        return self


class NightjarPaperPolicyConfig(NightjarPolicyConfig):
    """The paper's exact Algorithm 1 (preset ``nightjar-paper``, for reproduction)."""

    bucketing: Literal["exact", "pow2"] = Field("exact", description="Paper: one key per B.")
    switch_cost_weight: float = Field(1.0, ge=0.0, description="Paper: Eq. 4 as written.")
    latency_estimator: Literal["step-mean", "token-weighted", "factored"] = Field(
        "step-mean", description="Paper §4.2: incremental mean of per-step duration/tokens."
    )
    exploration: Literal["uniform", "local"] = Field(
        "uniform", description="Paper, Algorithm 1 line 11: uniform over 0..gamma_max."
    )
    explore_bin_steps: int | None = Field(
        None, ge=1, description="Paper: an exploration bin probes for all its sqrt(H) steps."
    )
    share_across_keys: bool = Field(
        False, description="Paper: every key tries each arm once on its own."
    )
    min_arm_tokens_per_req: float = Field(
        0.0, ge=0.0, le=64.0, description="Paper: one sample of an arm is trusted."
    )
    draft_gate: bool = Field(False, description="Paper: gamma is the bandit's, every step.")
    price_draft_memory: bool = Field(
        False, description="Paper §6.1: offload only once speculation is off."
    )


class FixedPolicyConfig(PolicyConfig):
    """A static speculative length."""

    gamma: int = Field(3, ge=0, le=16, description="Speculative length played every step.")

    @model_validator(mode="after")
    def _gamma_in_range(self) -> FixedPolicyConfig:
        if self.gamma > self.gamma_max:
            raise ValueError(f"gamma={self.gamma} exceeds gamma_max={self.gamma_max}")
        return self


class OffPolicyConfig(PolicyConfig):
    """Speculation always off (gamma = 0)."""

    gamma_max: int = Field(0, ge=0, le=16, description="Kept for uniformity; gamma is always 0.")


class VllmStaticPolicyConfig(PolicyConfig):
    """vLLM's ``num_speculative_tokens_per_batch_size`` table."""

    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] = Field(
        default_factory=lambda: [(1, 4, 2), (5, 12, 1), (13, 1 << 20, 0)],
        min_length=1,
        description="[[bs_lo, bs_hi, k], ...]; ranges sorted, disjoint, first starts at 1.",
    )

    @field_validator("num_speculative_tokens_per_batch_size")
    @classmethod
    def _check_table(cls, table: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        prev_hi = 0
        for lo, hi, k in sorted(table):
            if lo <= 0 or lo > hi:
                raise ValueError(f"range ({lo}, {hi}) must satisfy 1 <= bs_lo <= bs_hi")
            if k < 0:
                raise ValueError(f"k must be >= 0 in ({lo}, {hi}, {k})")
            if lo <= prev_hi:
                raise ValueError("batch-size ranges must be non-overlapping")
            prev_hi = hi
        if min(lo for lo, _, _ in table) != 1:
            raise ValueError("the first batch-size range must start at 1")
        return sorted(table)


class DsdPolicyConfig(PolicyConfig):
    """DSD (Liu et al.): acceptance from history, fitted step time, argmax goodput."""

    warmup_steps_per_arm: int = Field(
        4,
        ge=1,
        description=(
            "Profiling warm-up: the first (gamma_max+1) * this many steps play gamma "
            "round-robin so the step-time model sees every gamma (DSD profiles offline)."
        ),
    )
    refit_interval: int = Field(
        32, ge=1, description="Observed steps between refits of the step-time model."
    )
    ridge: float = Field(
        1e-6, ge=0.0, description="Ridge term of the step-time least squares (numerical only)."
    )


class UcbSpecPolicyConfig(PolicyConfig):
    """UCBSpec (BanditSpec Algorithm 4) over gamma, reward = normalized goodput."""

    delta: float = Field(0.1, gt=0.0, lt=1.0, description="Confidence parameter delta.")


class Exp3SpecPolicyConfig(PolicyConfig):
    """EXP3Spec (BanditSpec Algorithm 5) over gamma, reward = normalized goodput."""
