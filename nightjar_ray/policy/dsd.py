"""DSD: the goodput-model policy of Liu et al. (SmartSpec), as the paper's §7.1 summarizes it.

Each step, for every gamma in 0..Gamma_max::

    expected tokens  E[B, gamma] = B * (1 - alpha^(gamma+1)) / (1 - alpha)   (accepted + bonus)
    step time        T[B, gamma] = th0 + th1*gamma + th2*B*(gamma+1) + th3*B*gamma
    goodput          E / T            -> play the argmax

* ``alpha`` (token acceptance rate) comes from history: accepted / proposed
  draft tokens over all speculative steps so far.
* ``T`` is a linear model of the step time fitted by least squares: verify
  cost grows with the B*(gamma+1) verified tokens, draft cost with gamma
  passes over B*gamma tokens. It is fitted from per-(B, gamma) mean step times
  weighted by their counts, which equals least squares over every step.
* DSD profiles step time offline; the online stand-in here is a warm-up that
  plays gamma round-robin for ``warmup_steps_per_arm`` steps per arm.

NOTE (faithful "decision deadlock", paper §1/§8.1): alpha is only updated by
steps that speculate. Once the model prefers gamma = 0, no new acceptance data
arrives, so a pessimistic alpha is never corrected. This is deliberate.
"""

from __future__ import annotations

from typing import Any

from nightjar_ray.policy.base import Policy, StepResult, validate_context, validate_result
from nightjar_ray.policy.config import DsdPolicyConfig
from nightjar_ray.policy.stats import ArmTable, PolicyStats

STEP_TIME_TABLE = "step_time_s"
ACCEPTANCE_TABLE = "acceptance_rate"
NUM_FEATURES = 4


def step_features(num_reqs: int, gamma: int) -> tuple[float, float, float, float]:
    """Regressors of the step-time model: (1, gamma, B*(gamma+1), B*gamma)."""
    return 1.0, float(gamma), float(num_reqs * (gamma + 1)), float(num_reqs * gamma)


def expected_tokens(num_reqs: int, gamma: int, alpha: float) -> float:
    """Expected emitted tokens of a step: B * (1 + alpha + ... + alpha^gamma)."""
    if alpha >= 1.0:
        return float(num_reqs * (gamma + 1))
    return num_reqs * (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def solve_linear(matrix: list[list[float]], rhs: list[float]) -> list[float] | None:
    """Solve ``matrix @ x = rhs`` by Gaussian elimination; ``None`` if singular."""
    n = len(rhs)
    a = [[*row, rhs[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-300:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                f = a[r][col] / a[col][col]
                for c in range(col, n + 1):
                    a[r][c] -= f * a[col][c]
    return [a[i][n] / a[i][i] for i in range(n)]


class DsdPolicy(Policy):
    """See module docstring."""

    name = "dsd"

    def __init__(self, config: DsdPolicyConfig) -> None:
        self.config = config
        self._gamma_max = config.gamma_max
        self._step_time = ArmTable(config.gamma_max + 1)
        self._acceptance = ArmTable(config.gamma_max + 1)
        self._num_chosen = 0
        self._since_fit = 0
        self._theta: list[float] | None = None
        self._warmup_steps = config.warmup_steps_per_arm * (config.gamma_max + 1)

    @property
    def gamma_max(self) -> int:
        return self._gamma_max

    @property
    def theta(self) -> list[float] | None:
        """Fitted step-time coefficients (th0..th3), ``None`` before the first fit."""
        return self._theta

    def alpha(self) -> float:
        """Token acceptance rate over all speculative steps so far (0 if none)."""
        total = weighted = 0.0
        for _key, _gamma, count, mean in self._acceptance.cells():
            total += count
            weighted += count * mean
        return weighted / total if total > 0 else 0.0

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        validate_context(num_reqs, max_skip_tokens)
        self._num_chosen += 1
        if self._num_chosen <= self._warmup_steps:
            return (self._num_chosen - 1) % (self._gamma_max + 1)
        if self._theta is None or self._since_fit >= self.config.refit_interval:
            self.refit()
        if self._theta is None:
            return 0
        return self.best_gamma(num_reqs, self.alpha())

    def best_gamma(self, num_reqs: int, alpha: float) -> int:
        """argmax over gamma of expected tokens / predicted step time."""
        assert self._theta is not None
        best_gamma, best_goodput = 0, float("-inf")
        for gamma in range(self._gamma_max + 1):
            t = sum(c * x for c, x in zip(self._theta, step_features(num_reqs, gamma), strict=True))
            if t <= 0.0:
                continue
            goodput = expected_tokens(num_reqs, gamma, alpha) / t
            if goodput > best_goodput:
                best_gamma, best_goodput = gamma, goodput
        return best_gamma

    def refit(self) -> None:
        """Weighted least squares of step time on ``step_features`` (ridge-regularized)."""
        xtx = [[0.0] * NUM_FEATURES for _ in range(NUM_FEATURES)]
        xty = [0.0] * NUM_FEATURES
        for key, gamma, count, mean in self._step_time.cells():
            x = step_features(key, gamma)
            for i in range(NUM_FEATURES):
                xty[i] += count * x[i] * mean
                for j in range(NUM_FEATURES):
                    xtx[i][j] += count * x[i] * x[j]
        for i in range(NUM_FEATURES):
            xtx[i][i] += self.config.ridge
        self._since_fit = 0
        if any(xtx[0]):
            self._theta = solve_linear(xtx, xty)

    def observe(self, result: StepResult) -> None:
        validate_result(result, self._gamma_max)
        self._step_time.update(result.num_reqs, result.gamma, result.duration_s)
        if result.gamma > 0 and result.num_draft_tokens > 0:
            self._acceptance.update(
                0,
                result.gamma,
                result.num_accepted_tokens / result.num_draft_tokens,
                weight=float(result.num_draft_tokens),
            )
        self._since_fit += 1

    def export_stats(self) -> PolicyStats:
        return PolicyStats(
            self.name,
            {
                STEP_TIME_TABLE: self._step_time.export(),
                ACCEPTANCE_TABLE: self._acceptance.export(),
            },
        )

    def load_stats(self, stats: PolicyStats) -> None:
        self.check_stats_owner(stats)
        self._step_time.load(stats.tables.get(STEP_TIME_TABLE, {}))
        self._acceptance.load(stats.tables.get(ACCEPTANCE_TABLE, {}))
        self._theta = None

    def local_state(self) -> dict[str, Any]:
        return {"num_chosen": self._num_chosen}

    def load_local_state(self, state: dict[str, Any]) -> None:
        self._num_chosen = int(state.get("num_chosen", 0))
        self._theta = None
