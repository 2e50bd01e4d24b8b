"""Typed, user-facing configuration of each policy (pydantic, ``extra="forbid"``).

What an operator may set in a policy's ``policy_params`` (docs/policies.md,
"Configuration (`policy_params`)" and "Baselines"). Configs are validated where
users write them (engine args, Serve config, CLI), so a bad value fails before anything
starts, with pydantic naming the field. The nightjar presets take :class:`PolicyConfig`
alone; their research parameters are in :mod:`nightjar_ray.policy.presets`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class PolicyConfig(BaseModel):
    """Fields every policy has."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gamma_max: int = Field(
        4, ge=0, le=16, description="Largest speculative length (Gamma_max); arms are 0..gamma_max."
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
