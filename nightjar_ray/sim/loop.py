"""Drive a policy against a step-level environment (no queueing)."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nightjar_ray.policy.base import Policy
from nightjar_ray.sim.envs import StationaryEnv


@dataclass(frozen=True)
class LoopResult:
    """Totals of a run: emitted tokens, busy seconds, and the gammas played."""

    num_tokens: int
    duration_s: float
    gammas: tuple[int, ...]

    @property
    def tokens_per_s(self) -> float:
        return self.num_tokens / self.duration_s


class PolicyLoop:
    """Runs steps of a policy against an environment, tracking gamma_prev and L_max.

    L_max grows by one token per gamma=0 step (every request falls one more
    token behind on the draft) and resets when a step speculates.
    """

    def __init__(self, policy: Policy, env: StationaryEnv, rng: random.Random) -> None:
        self.policy, self.env, self.rng = policy, env, rng
        self.prev_gamma = 0
        self.lag_tokens = 0
        self.gammas: list[int] = []

    def step(self, num_reqs: int) -> tuple[int, float]:
        """One step at batch size ``num_reqs``; returns (tokens, seconds)."""
        gamma = self.policy.choose(num_reqs, self.lag_tokens)
        result = self.env.step(num_reqs, gamma, self.prev_gamma, self.lag_tokens, self.rng)
        self.policy.observe(result)
        self.lag_tokens = self.lag_tokens + 1 if gamma == 0 else 0
        self.prev_gamma = gamma
        self.gammas.append(gamma)
        return result.num_tokens, result.duration_s


def run_steps(
    policy: Policy, env: StationaryEnv, batch_sizes: Iterable[int], rng: random.Random
) -> LoopResult:
    """One step per entry of ``batch_sizes``."""
    loop = PolicyLoop(policy, env, rng)
    num_tokens, duration = 0, 0.0
    for num_reqs in batch_sizes:
        tokens, seconds = loop.step(num_reqs)
        num_tokens += tokens
        duration += seconds
    return LoopResult(num_tokens, duration, tuple(loop.gammas))


def run_phases(
    policy: Policy, env: StationaryEnv, phases: Sequence[tuple[int, int]], rng: random.Random
) -> list[LoopResult]:
    """Fixed work per phase: phase ``(B, n)`` steps at batch size B until n tokens are out.

    Fixed work (not a fixed step count) keeps the comparison fair: a policy
    that emits more tokens per step must not weigh its phase more.
    """
    loop = PolicyLoop(policy, env, rng)
    results = []
    for num_reqs, target_tokens in phases:
        start = len(loop.gammas)
        num_tokens, duration = 0, 0.0
        while num_tokens < target_tokens:
            tokens, seconds = loop.step(num_reqs)
            num_tokens += tokens
            duration += seconds
        results.append(LoopResult(num_tokens, duration, tuple(loop.gammas[start:])))
    return results
