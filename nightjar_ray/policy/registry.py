"""Policies by name, each with its typed config.

>>> import random
>>> policy = build_policy("nightjar", {"gamma_max": 4}, rng=random.Random(0))
>>> policy.choose(num_reqs=8, max_skip_tokens=0) in range(5)
True

``nightjar`` and ``nightjar-paper`` are presets of one policy (``policy/presets.py``):
:func:`policy_config` accepts every research parameter on top of the preset, while
:func:`operator_policy_config` checks what an operator may write (``gamma_max`` only).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from nightjar_ray.policy.base import Policy
from nightjar_ray.policy.config import (
    DsdPolicyConfig,
    Exp3SpecPolicyConfig,
    FixedPolicyConfig,
    OffPolicyConfig,
    PolicyConfig,
    UcbSpecPolicyConfig,
    VllmStaticPolicyConfig,
)
from nightjar_ray.policy.dsd import DsdPolicy
from nightjar_ray.policy.exp3spec import Exp3SpecPolicy
from nightjar_ray.policy.nightjar import NightjarPaperPolicy, NightjarPolicy
from nightjar_ray.policy.presets import PRESETS, NightjarParams
from nightjar_ray.policy.static import FixedPolicy, OffPolicy, VllmStaticPolicy
from nightjar_ray.policy.switch_cost import SwitchCostTable
from nightjar_ray.policy.ucbspec import UcbSpecPolicy

BUILTIN_PREFIX = "builtin:"

Factory = Callable[[Any, random.Random, SwitchCostTable | None], Policy]
"""(validated config, RNG, switch-cost table or None) -> policy."""


@dataclass(frozen=True)
class PolicySpec:
    """How to build one registered policy."""

    config_cls: type[PolicyConfig]
    """Every parameter of the policy (what :func:`policy_config` validates)."""
    factory: Factory
    operator_cls: type[PolicyConfig] | None = None
    """What an operator may set in ``policy_params``; None: all of ``config_cls``."""
    preset: Mapping[str, Any] = field(default_factory=dict)
    """Overrides of ``config_cls``'s defaults that the name stands for."""


def load_switch_cost(profile: str | None, constant_ms: float) -> SwitchCostTable:
    """The switch-cost table of a profile (CSV path or ``builtin:NAME``), else a constant."""
    if profile is None:
        return SwitchCostTable.constant(constant_ms / 1e3)
    if profile.startswith(BUILTIN_PREFIX):
        return SwitchCostTable.builtin(profile[len(BUILTIN_PREFIX) :])
    return SwitchCostTable.load(profile)


def _preset(name: str, cls: type[NightjarPolicy]) -> PolicySpec:
    def factory(
        config: NightjarParams, rng: random.Random, table: SwitchCostTable | None
    ) -> Policy:
        return cls(config, rng, table)

    return PolicySpec(NightjarParams, factory, PolicyConfig, PRESETS[name])


REGISTRY: dict[str, PolicySpec] = {
    "nightjar": _preset("nightjar", NightjarPolicy),
    "nightjar-paper": _preset("nightjar-paper", NightjarPaperPolicy),
    "fixed": PolicySpec(FixedPolicyConfig, lambda c, _rng, _t: FixedPolicy(c)),
    "off": PolicySpec(OffPolicyConfig, lambda c, _rng, _t: OffPolicy(c)),
    "vllm-static": PolicySpec(VllmStaticPolicyConfig, lambda c, _rng, _t: VllmStaticPolicy(c)),
    "dsd": PolicySpec(DsdPolicyConfig, lambda c, _rng, _t: DsdPolicy(c)),
    "ucbspec": PolicySpec(UcbSpecPolicyConfig, lambda c, _rng, _t: UcbSpecPolicy(c)),
    "exp3spec": PolicySpec(Exp3SpecPolicyConfig, lambda c, rng, _t: Exp3SpecPolicy(c, rng)),
}


def policy_names() -> list[str]:
    """Registered policy names."""
    return sorted(REGISTRY)


def _spec(name: str) -> PolicySpec:
    spec = REGISTRY.get(name)
    if spec is None:
        raise ValueError(f"unknown policy {name!r}; choose from {policy_names()}")
    return spec


def _validate(name: str, cls: type[PolicyConfig], params: Mapping[str, Any]) -> PolicyConfig:
    try:
        return cls.model_validate(dict(params))
    except ValidationError as e:
        fields = ", ".join(".".join(str(p) for p in err["loc"]) or "<root>" for err in e.errors())
        raise ValueError(f"invalid config for policy {name!r} (fields: {fields}): {e}") from e


def policy_config(name: str, params: Mapping[str, Any] | None = None) -> PolicyConfig:
    """Validate ``params`` (over the name's preset) for policy ``name``; ``ValueError``
    names the bad field."""
    spec = _spec(name)
    return _validate(name, spec.config_cls, {**spec.preset, **(params or {})})


def operator_policy_config(name: str, params: Mapping[str, Any] | None = None) -> PolicyConfig:
    """Validate what an operator wrote in ``policy_params`` for ``name`` (the product
    config); ``ValueError`` names the bad field."""
    spec = _spec(name)
    return _validate(name, spec.operator_cls or spec.config_cls, params or {})


def build_policy(
    name: str,
    params: Mapping[str, Any] | PolicyConfig | None = None,
    *,
    rng: random.Random,
    switch_cost: SwitchCostTable | None = None,
) -> Policy:
    """Build policy ``name`` from a config (or raw params) and an explicit RNG.

    ``switch_cost``: the C_switch(L_max, B) table of the nightjar presets (default: the
    constant ``switch_cost_ms``); other policies ignore it.
    """
    config = params if isinstance(params, PolicyConfig) else policy_config(name, params)
    spec = _spec(name)
    if not isinstance(config, spec.config_cls):
        raise ValueError(f"policy {name!r} needs {spec.config_cls.__name__}")
    return spec.factory(config, rng, switch_cost)
