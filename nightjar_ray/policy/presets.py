"""The nightjar policy's parameters and its named presets, in one place.

:class:`NightjarParams` holds every parameter of
:class:`~nightjar_ray.policy.nightjar.NightjarPolicy`; its defaults are what the
``nightjar`` preset runs. :data:`PRESETS` names each preset as overrides of those
defaults; ``nightjar-paper`` is the paper's Algorithm 1 exactly (§4.2, Eq. 4).

An operator picks a preset by policy name and sets no parameter of it (the product
config's ``policy_params`` for a preset holds ``gamma_max`` only). Research code sets
single parameters on top of a preset (the simulator's ``--nightjar-params``, the engine's
``testing.policy_overrides``); both build this one object, so a simulated and an engine
policy with the same settings are the same policy. This model is not part of the product
schema.

>>> nightjar_params("nightjar-paper", {"gamma_max": 2}).bucketing
'exact'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import Field, model_validator

from nightjar_ray.policy.config import PolicyConfig

Bucketing = Literal["exact", "pow2"]
LatencyEstimator = Literal["step-mean", "token-weighted", "factored"]
Exploration = Literal["uniform", "local"]
DraftGateScope = Literal["request", "step"]


class NightjarParams(PolicyConfig):
    """Every parameter of the nightjar policy (research knobs; see module docstring)."""

    bucketing: Bucketing = Field(
        "pow2",
        description=(
            "Batch-size keys: 'exact' (one per B) or 'pow2' (B rounded up to a power of 2)."
        ),
    )
    switch_cost_ms: float = Field(
        0.0,
        ge=0.0,
        description="Constant C_switch in ms, used when no switch-cost table is given.",
    )
    switch_cost_weight: float = Field(
        0.0,
        ge=0.0,
        description=(
            "Multiplier on Eq. 4's switch penalty C_switch(L_max, B) / gamma (1.0 = the "
            "paper; 0 = no penalty, a catch-up's price is left to the draft gate)."
        ),
    )
    latency_estimator: LatencyEstimator = Field(
        "factored",
        description=(
            "l~[B, gamma]: 'step-mean' = mean of per-step duration/tokens (paper §4.2); "
            "'token-weighted' = sum(duration)/sum(tokens); 'factored' = token-weighted step "
            "time over tokens per request shrunk toward their mean over every batch size."
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
    paired_acceptance: bool = Field(
        True,
        description=(
            "'factored' only: learn tokens per request at each gamma from every drafted "
            "request's acceptance depth in steps at that gamma or above (the same requests "
            "price the shorter arms); False: from steps at that gamma only."
        ),
    )
    batch_curve: bool = Field(
        True,
        description=(
            "Rank arms at the step's exact batch size: step time interpolated between "
            "neighbouring keys' mean (batch size, step time) points; False: the key's mean. "
            "Needs latency_estimator 'factored'."
        ),
    )
    exploration: Exploration = Field(
        "local",
        description=(
            "Arm of an exploration bin: 'uniform' over 0..gamma_max (Algorithm 1 line 11), "
            "or 'local': once the key ranks every arm, uniform over the exploited gamma "
            "and its two neighbours."
        ),
    )
    explore_bin_steps: int | None = Field(
        2,
        ge=2,
        description=(
            "Steps an exploration bin plays its probe before exploiting for the rest of "
            "the bin; None probes for the whole bin (sqrt(H) steps). At least 2: a step "
            "verifies the drafts the step before proposed, so a one-step probe is always "
            "a transition, never a sample, and no arm would learn."
        ),
    )
    share_across_keys: bool = Field(
        False,
        description=(
            "Rank a key's untried arms from the nearest key that tried every arm (rescaled "
            "to this key), instead of playing each untried arm once."
        ),
    )
    untried_arm_bound: bool = Field(
        True,
        description=(
            "Price each arm a key has not tried by a lower bound (a smaller key's step "
            "time over B requests; the nearest tried arm below it times their ratio at "
            "the nearest smaller key; unimodality) and play it only if that bound ranks "
            "best; gamma = 0 so only up to gamma_zero_bound_max_reqs. False: a key tries "
            "every arm before trusting any estimate."
        ),
    )
    gamma_zero_bound_max_reqs: int = Field(
        16,
        ge=0,
        description=(
            "With untried_arm_bound: at batch sizes whose key is at most this, gamma = 0 "
            "too is priced before it is tried, by the nearest smaller key's step time "
            "over B requests (step time does not fall as B grows), so a new key plays "
            "the arm those bounds rank best; larger keys try gamma = 0 first, the "
            "evidence the draft gate and elastic memory's gain read. 0: every key tries "
            "gamma = 0 first."
        ),
    )
    min_arm_tokens_per_req: float = Field(
        1.0,
        ge=0.0,
        le=64.0,
        description=(
            "Tokens per request of the key (its largest B) an arm must have observed "
            "before the key trusts its estimate; 0 trusts one sample. Needs a "
            "token-counting latency_estimator."
        ),
    )
    draft_gate: bool = Field(
        True,
        description=(
            "Run gamma = 0 in a step whose speculation cannot earn back the draft work it "
            "owes (new prompts' draft prefill, catch-up of skipped tokens)."
        ),
    )
    draft_gate_scope: DraftGateScope = Field(
        "request",
        description=(
            "What the draft gate decides: 'request' = which requests the draft runs over "
            "this step (the others decode with gamma 0 while the rest speculate); 'step' = "
            "whether the whole step speculates. Engines whose drafter cannot run over part "
            "of a batch use 'step'."
        ),
    )
    queue_aware: bool = Field(
        True,
        description=(
            "While requests wait, play Eq. 4 at the batch size the queue will produce "
            "(the gamma that drains outstanding work fastest) every step; exploration "
            "bins then probe only the exploited arm or the one below, and untried arms "
            "are tried only in exploration bins."
        ),
    )
    price_draft_memory: bool = Field(
        True,
        description=(
            "Report speculation's estimated gain at the current B to the memory triggers "
            "(Policy.speculation_gain), so an outvalued draft is offloaded while "
            "speculating; False: only speculation off counts."
        ),
    )

    @model_validator(mode="after")
    def _min_arm_tokens_needs_token_counts(self) -> NightjarParams:
        if self.min_arm_tokens_per_req > 0.0 and self.latency_estimator == "step-mean":
            raise ValueError(
                "min_arm_tokens_per_req > 0 needs latency_estimator 'token-weighted' or "
                f"'factored', got {self.latency_estimator!r}"
            )
        return self


PRESETS: Final[Mapping[str, Mapping[str, Any]]] = {
    "nightjar": {},
    "nightjar-paper": {
        "bucketing": "exact",
        "switch_cost_weight": 1.0,
        "latency_estimator": "step-mean",
        "paired_acceptance": False,
        "batch_curve": False,
        "exploration": "uniform",
        "explore_bin_steps": None,
        "share_across_keys": False,
        "untried_arm_bound": False,
        "gamma_zero_bound_max_reqs": 0,
        "min_arm_tokens_per_req": 0.0,
        "draft_gate": False,
        "queue_aware": False,
        "price_draft_memory": False,
    },
}
"""Preset name -> overrides of :class:`NightjarParams`' defaults. ``nightjar``: the
defaults (their evidence: docs/benchmarks.md, "Summary"); ``nightjar-paper``: the paper's
exact settings, for reproduction."""


def nightjar_params(preset: str, overrides: Mapping[str, Any] | None = None) -> NightjarParams:
    """Preset ``preset`` with ``overrides`` on top; pydantic's error names a bad field."""
    if preset not in PRESETS:
        raise ValueError(f"unknown nightjar preset {preset!r}; choose from {sorted(PRESETS)}")
    return NightjarParams.model_validate({**PRESETS[preset], **(overrides or {})})
