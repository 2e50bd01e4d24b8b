"""Policies by name, each with its typed config.

>>> import random
>>> policy = build_policy("nightjar", {"gamma_max": 4}, rng=random.Random(0))
>>> policy.choose(num_reqs=8, max_skip_tokens=0) in range(5)
True
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from nightjar_ray.policy.base import Policy
from nightjar_ray.policy.config import (
    DsdPolicyConfig,
    Exp3SpecPolicyConfig,
    FixedPolicyConfig,
    NightjarPaperPolicyConfig,
    NightjarPolicyConfig,
    OffPolicyConfig,
    PolicyConfig,
    UcbSpecPolicyConfig,
    VllmStaticPolicyConfig,
)
from nightjar_ray.policy.cyclic import CyclicPolicy, CyclicPolicyConfig
from nightjar_ray.policy.dsd import DsdPolicy
from nightjar_ray.policy.exp3spec import Exp3SpecPolicy
from nightjar_ray.policy.nightjar import NightjarPaperPolicy, NightjarPolicy
from nightjar_ray.policy.static import FixedPolicy, OffPolicy, VllmStaticPolicy
from nightjar_ray.policy.switch_cost import SwitchCostTable
from nightjar_ray.policy.ucbspec import UcbSpecPolicy

BUILTIN_PREFIX = "builtin:"


@dataclass(frozen=True)
class PolicySpec:
    """How to build one registered policy."""

    config_cls: type[PolicyConfig]
    factory: Callable[[Any, random.Random], Policy]


def load_switch_cost(profile: str | None, constant_ms: float) -> SwitchCostTable:
    """The switch-cost table a Nightjar config names (see ``NightjarPolicyConfig``)."""
    if profile is None:
        return SwitchCostTable.constant(constant_ms / 1e3)
    if profile.startswith(BUILTIN_PREFIX):
        return SwitchCostTable.builtin(profile[len(BUILTIN_PREFIX) :])
    return SwitchCostTable.load(profile)


def _nightjar(config: NightjarPolicyConfig, rng: random.Random) -> Policy:
    table = load_switch_cost(config.switch_cost_profile, config.switch_cost_ms)
    cls = NightjarPaperPolicy if isinstance(config, NightjarPaperPolicyConfig) else NightjarPolicy
    return cls(config, rng, table)


REGISTRY: dict[str, PolicySpec] = {
    "nightjar": PolicySpec(NightjarPolicyConfig, _nightjar),
    "nightjar-paper": PolicySpec(NightjarPaperPolicyConfig, _nightjar),
    "fixed": PolicySpec(FixedPolicyConfig, lambda c, _rng: FixedPolicy(c)),
    "off": PolicySpec(OffPolicyConfig, lambda c, _rng: OffPolicy(c)),
    "vllm-static": PolicySpec(VllmStaticPolicyConfig, lambda c, _rng: VllmStaticPolicy(c)),
    "dsd": PolicySpec(DsdPolicyConfig, lambda c, _rng: DsdPolicy(c)),
    "ucbspec": PolicySpec(UcbSpecPolicyConfig, lambda c, _rng: UcbSpecPolicy(c)),
    "exp3spec": PolicySpec(Exp3SpecPolicyConfig, lambda c, rng: Exp3SpecPolicy(c, rng)),
    "cyclic": PolicySpec(CyclicPolicyConfig, lambda c, _rng: CyclicPolicy(c)),
}


def policy_names() -> list[str]:
    """Registered policy names."""
    return sorted(REGISTRY)


def policy_config(name: str, params: Mapping[str, Any] | None = None) -> PolicyConfig:
    """Validate ``params`` for policy ``name``; ``ValueError`` names the bad field."""
    spec = REGISTRY.get(name)
    if spec is None:
        raise ValueError(f"unknown policy {name!r}; choose from {policy_names()}")
    try:
        return spec.config_cls.model_validate(dict(params or {}))
    except ValidationError as e:
        fields = ", ".join(".".join(str(p) for p in err["loc"]) or "<root>" for err in e.errors())
        raise ValueError(f"invalid config for policy {name!r} (fields: {fields}): {e}") from e


def build_policy(
    name: str, params: Mapping[str, Any] | PolicyConfig | None = None, *, rng: random.Random
) -> Policy:
    """Build policy ``name`` from a config (or raw params) and an explicit RNG."""
    config = params if isinstance(params, PolicyConfig) else policy_config(name, params)
    spec = REGISTRY[name]
    if not isinstance(config, spec.config_cls):
        raise ValueError(f"policy {name!r} needs {spec.config_cls.__name__}")
    return spec.factory(config, rng)
