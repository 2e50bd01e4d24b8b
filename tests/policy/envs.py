"""Synthetic stationary environments with a known optimum, for policy tests."""

from __future__ import annotations

import random
from collections.abc import Sequence

from nightjar_ray.policy.base import Policy
from nightjar_ray.sim.envs import StationaryEnv


def bowl_env(best: dict[int, int], noise_sigma: float = 0.05) -> StationaryEnv:
    """Latency per token is lowest at ``best[B]`` and rises 10% per arm away from it."""

    def latency(num_reqs: int, gamma: int) -> float:
        return 1e-3 / num_reqs * (1.0 + 0.10 * abs(gamma - best[num_reqs]))

    return StationaryEnv(latency, {g: 0.0 for g in range(9)}, noise_sigma)


class Trace:
    """Runs a policy step by step and records what a test needs to check."""

    def __init__(self, policy: Policy, env: StationaryEnv, seed: int) -> None:
        self.policy, self.env = policy, env
        self.rng = random.Random(seed)
        self.steps: list[tuple[int, int, bool]] = []  # (B, gamma, in exploration bin)
        self.bins: list[tuple[int, int, int, bool, int]] = []
        self._explore: dict[int, bool] = {}
        self._prev_gamma = 0
        policy.bin_listener = self._on_bin  # type: ignore[attr-defined]

    def _on_bin(self, key: int, j: int, b: int, explore: bool, gamma: int) -> None:
        self.bins.append((key, j, b, explore, gamma))
        self._explore[key] = explore

    def run(self, batches: Sequence[int], max_skip_tokens: int = 0) -> None:
        for num_reqs in batches:
            gamma = self.policy.choose(num_reqs, max_skip_tokens)
            self.steps.append((num_reqs, gamma, self._explore[num_reqs]))
            self.policy.observe(
                self.env.step(num_reqs, gamma, self._prev_gamma, max_skip_tokens, self.rng)
            )
            self._prev_gamma = gamma

    def pseudo_regret(self, gamma_max: int) -> float:
        """Sum over steps of expected latency/token minus the best arm's (per B)."""
        total = 0.0
        for num_reqs, gamma, _ in self.steps:
            best = self.env.best_gamma(num_reqs, gamma_max)
            total += self.env.expected_latency(num_reqs, gamma) - self.env.expected_latency(
                num_reqs, best
            )
        return total
