"""EXP3Spec (BanditSpec, Hou et al. 2025, Algorithm 5) over arms gamma = 0..L.

Reward normalization as in ``ucbspec``: ``r_t = g_t / G`` with ``G`` the
running maximum step goodput (including the step itself), ``Y_t = 1 + L*r_t``.
The formulas, exactly::

    Z_hat[i, t] = 1{i = I_t} * (L + 1 - Y_t) / (L * p[t, i])      ( = (1 - r_t) / p[t, I_t] )
    eta_t       = sqrt(log K / (t * K))
    p[t, i]     = exp(-eta_t * sum_{s<t} Z_hat[i, s]) / sum_j exp(-eta_t * sum_{s<t} Z_hat[j, s])
    I_t ~ p[t]

``t`` counts rounds from 1. The probability used in ``Z_hat`` is the one the
arm was drawn with: ``choose`` remembers (gamma, p) and ``observe`` takes the
oldest pending entry (steps are observed in the order they were chosen).
Pooled statistics are per-arm (pulls, mean Z_hat), whose product is the
cumulative Z_hat sum, so merging replicas adds their sums exactly.
"""

from __future__ import annotations

import math
import random
from collections import deque

from nightjar_ray.policy.base import Policy, StepResult, validate_context, validate_result
from nightjar_ray.policy.config import Exp3SpecPolicyConfig
from nightjar_ray.policy.stats import ArmTable, PolicyStats

LOSS_TABLE = "loss_estimate"
MAX_GOODPUT = "max_goodput_tokens_per_s"
MAX_PENDING = 64


class Exp3SpecPolicy(Policy):
    """See module docstring."""

    name = "exp3spec"

    def __init__(self, config: Exp3SpecPolicyConfig, rng: random.Random) -> None:
        self.config = config
        self._rng = rng
        self._gamma_max = config.gamma_max
        self._loss = ArmTable(config.gamma_max + 1)
        self._max_goodput = 0.0
        self._pending: deque[tuple[int, float]] = deque(maxlen=MAX_PENDING)

    @property
    def gamma_max(self) -> int:
        return self._gamma_max

    def probabilities(self) -> list[float]:
        """p[t] for the next round t = (observed rounds) + 1."""
        counts = self._loss.counts_row(0)
        num_arms = self._gamma_max + 1
        if num_arms == 1:
            return [1.0]
        t = sum(counts) + 1.0
        eta = math.sqrt(math.log(num_arms) / (t * num_arms))
        sums = self._loss.sums[0]
        low = min(sums)
        weights = [math.exp(-eta * (s - low)) for s in sums]
        total = sum(weights)
        return [w / total for w in weights]

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        validate_context(num_reqs, max_skip_tokens)
        probs = self.probabilities()
        gamma = self._rng.choices(range(len(probs)), weights=probs)[0]
        self._pending.append((gamma, probs[gamma]))
        return gamma

    def _prob_of(self, gamma: int) -> float:
        """Probability ``gamma`` was drawn with (oldest pending choice, else current)."""
        while self._pending:
            pending_gamma, prob = self._pending.popleft()
            if pending_gamma == gamma:
                return prob
        return self.probabilities()[gamma]

    def observe(self, result: StepResult) -> None:
        validate_result(result, self._gamma_max)
        if self._gamma_max == 0:
            return
        goodput = result.num_tokens / result.duration_s
        self._max_goodput = max(self._max_goodput, goodput)
        reward = goodput / self._max_goodput
        y = 1.0 + self._gamma_max * reward
        z_hat = (self._gamma_max + 1 - y) / (self._gamma_max * self._prob_of(result.gamma))
        self._loss.update(0, result.gamma, z_hat)

    def export_stats(self) -> PolicyStats:
        return PolicyStats(
            self.name, {LOSS_TABLE: self._loss.export()}, {MAX_GOODPUT: self._max_goodput}
        )

    def load_stats(self, stats: PolicyStats) -> None:
        self.check_stats_owner(stats)
        self._loss.load(stats.tables.get(LOSS_TABLE, {}))
        self._max_goodput = stats.maxima.get(MAX_GOODPUT, 0.0)
