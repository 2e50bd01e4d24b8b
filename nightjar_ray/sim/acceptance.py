"""Per-request acceptance processes.

Each request gets its own base acceptance rate ``alpha_r`` drawn once from a Beta
distribution (mean ``mean``, concentration ``concentration``): some prompts are easy for the
draft, some hard. Draft position ``i`` (1-based) of a step is accepted with probability::

    p_i = alpha_r * position_decay ** (i - 1)

and a step accepts the run of successes before the first rejection (chain drafts: a
rejected token invalidates the rest), so a step with length gamma accepts
``0..gamma`` tokens and emits ``accepted + 1`` (the bonus token).

The request's random stream comes from ``(seed, req_id)``, so every policy run on the same
workload sees the same request difficulties and, while it plays the same gammas, the same
draws (common random numbers: policy comparisons have less noise).
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class AcceptanceProfile:
    """Distribution of per-request acceptance for one (draft pair, dataset)."""

    mean: float
    """Mean per-token acceptance rate of the first draft position."""
    concentration: float = 8.0
    """Beta concentration a + b: lower means more spread between requests."""
    position_decay: float = 0.95
    """Multiplier per later draft position (drafts drift further from the target)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.mean < 1.0:
            raise ValueError(f"acceptance mean must be in (0, 1), got {self.mean}")
        if self.concentration <= 0.0 or not 0.0 < self.position_decay <= 1.0:
            raise ValueError("acceptance concentration must be > 0 and decay in (0, 1]")

    def expected_accepted(self, gamma: int) -> float:
        """E[accepted] for a request at the mean rate (ignores the Beta spread)."""
        total, run = 0.0, 1.0
        for i in range(gamma):
            run *= self.mean * self.position_decay**i
            total += run
        return total


class AcceptanceProcess:
    """The acceptance draws of one request (see module docstring)."""

    __slots__ = ("_decay", "_rng", "alpha")

    def __init__(self, profile: AcceptanceProfile, seed: int, req_id: int) -> None:
        self._rng = random.Random(seed * 1_000_003 + req_id)
        a = profile.mean * profile.concentration
        b = (1.0 - profile.mean) * profile.concentration
        self.alpha = self._rng.betavariate(a, b)
        self._decay = profile.position_decay

    def accepted(self, gamma: int) -> int:
        """Accepted drafts of one verification of ``gamma`` draft tokens."""
        p = self.alpha
        n = 0
        while n < gamma and self._rng.random() < p:
            n += 1
            p *= self._decay
        return n
