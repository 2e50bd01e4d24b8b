"""Speculative-length policies (pure Python: imports neither vllm nor ray).

Public API::

    from nightjar_ray.policy import build_policy, StepResult
    policy = build_policy("nightjar", {"gamma_max": 4}, rng=random.Random(0))
    gamma = policy.choose(num_reqs=B, max_skip_tokens=L_max)
    policy.observe(StepResult(num_reqs=B, gamma=gamma, num_tokens=n, duration_s=dt))
"""

from nightjar_ray.policy.base import Policy, StepResult
from nightjar_ray.policy.config import PolicyConfig
from nightjar_ray.policy.forced import ForcedSchedulePolicy
from nightjar_ray.policy.presets import PRESETS, NightjarParams
from nightjar_ray.policy.registry import (
    build_policy,
    operator_policy_config,
    policy_config,
    policy_names,
)
from nightjar_ray.policy.stats import PolicyStats
from nightjar_ray.policy.switch_cost import SwitchCostTable

__all__ = [
    "PRESETS",
    "ForcedSchedulePolicy",
    "NightjarParams",
    "Policy",
    "PolicyConfig",
    "PolicyStats",
    "StepResult",
    "SwitchCostTable",
    "build_policy",
    "operator_policy_config",
    "policy_config",
    "policy_names",
]
