"""UCBSpec (BanditSpec, Hou et al. 2025, Algorithm 4) over arms gamma = 0..L.

BanditSpec's reward is the accepted length Y in [1, L+1]. Serving needs step
goodput instead (as BanditSpec's own throughput experiment, §6.2). Reward
normalization (docs/policies.md, "Baselines")::

    r_t = g_t / G             G = largest step goodput observed so far (running max)
    Y_t = 1 + L * r_t         so r in [0, 1] maps onto BanditSpec's [1, L+1] range

and then the formulas are applied exactly as written::

    n_i      = pulls of arm i;  mu_i = mean Y of arm i = 1 + L * (mean goodput_i / G)
    cr_i     = (L/2) * sqrt((1 + n_i)/n_i^2 * (1 + 2*log(K * t^2 * (1 + n_i)^(1/2) / delta)))
    I_{t+1}  = argmax_i mu_i + cr_i          (arms 1..K round-robin first)

with K = L + 1 arms and t the number of observed rounds. G is recomputed
from the statistics at each decision, so every r_t is in (0, 1]. UCBSpec is
context-free: the batch size is ignored (the paper's criticism, §1).
"""

from __future__ import annotations

import math
from typing import Any

from nightjar_ray.policy.base import Policy, StepResult, validate_context, validate_result
from nightjar_ray.policy.config import UcbSpecPolicyConfig
from nightjar_ray.policy.stats import ArmTable, PolicyStats

GOODPUT_TABLE = "goodput_tokens_per_s"
MAX_GOODPUT = "max_goodput_tokens_per_s"


class UcbSpecPolicy(Policy):
    """See module docstring."""

    name = "ucbspec"

    def __init__(self, config: UcbSpecPolicyConfig) -> None:
        self.config = config
        self._gamma_max = config.gamma_max
        self._goodput = ArmTable(config.gamma_max + 1)
        self._max_goodput = 0.0
        self._num_chosen = 0

    @property
    def gamma_max(self) -> int:
        return self._gamma_max

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        validate_context(num_reqs, max_skip_tokens)
        num_arms = self._gamma_max + 1
        self._num_chosen += 1
        if self._num_chosen <= num_arms:
            return self._num_chosen - 1
        scores = self.ucb_scores()
        return max(range(num_arms), key=lambda i: scores[i])

    def ucb_scores(self) -> list[float]:
        """UCB_i in Y units; +inf for an arm never observed."""
        counts, means = self._goodput.row(0)
        big_l = self._gamma_max
        num_arms = big_l + 1
        t = sum(counts)
        scores = []
        for n, g in zip(counts, means, strict=True):
            if n == 0.0:
                scores.append(math.inf)
                continue
            mu = 1.0 + big_l * (g / self._max_goodput)
            log_term = math.log(num_arms * t * t * math.sqrt(1.0 + n) / self.config.delta)
            cr = (big_l / 2.0) * math.sqrt((1.0 + n) / (n * n) * (1.0 + 2.0 * log_term))
            scores.append(mu + cr)
        return scores

    def observe(self, result: StepResult) -> None:
        validate_result(result, self._gamma_max)
        goodput = result.num_tokens / result.duration_s
        self._max_goodput = max(self._max_goodput, goodput)
        self._goodput.update(0, result.gamma, goodput)

    def export_stats(self) -> PolicyStats:
        return PolicyStats(
            self.name, {GOODPUT_TABLE: self._goodput.export()}, {MAX_GOODPUT: self._max_goodput}
        )

    def load_stats(self, stats: PolicyStats) -> None:
        self.check_stats_owner(stats)
        self._goodput.load(stats.tables.get(GOODPUT_TABLE, {}))
        self._max_goodput = stats.maxima.get(MAX_GOODPUT, 0.0)

    def local_state(self) -> dict[str, Any]:
        return {"num_chosen": self._num_chosen}

    def load_local_state(self, state: dict[str, Any]) -> None:
        self._num_chosen = int(state.get("num_chosen", 0))
