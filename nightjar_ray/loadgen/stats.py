"""Paired statistics for interleaved benchmark rounds (pure Python, seeded).

Each round runs every contender on the same arrivals; a contender's per-round ratio to the
baseline of the *same round* cancels the machine's drift between rounds. The report gives
the median ratio, its spread (min..max) and a percentile bootstrap interval of the mean.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class RatioSummary:
    """Paired per-round ratios of a contender's metric to the baseline's."""

    ratios: tuple[float, ...]
    median: float
    low: float
    high: float
    ci_low: float
    ci_high: float

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies inside the bootstrap interval."""
        return self.ci_low <= value <= self.ci_high


def bootstrap_ci(
    values: list[float], rng: random.Random, num_resamples: int = 2000, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean."""
    if not values:
        raise ValueError("bootstrap of no values")
    means = sorted(
        statistics.fmean(rng.choices(values, k=len(values))) for _ in range(num_resamples)
    )
    tail = (1 - level) / 2
    return means[int(tail * num_resamples)], means[
        min(num_resamples - 1, int((1 - tail) * num_resamples))
    ]


def paired_ratios(
    contender: list[float], baseline: list[float], rng: random.Random
) -> RatioSummary:
    """Per-round ``contender[i] / baseline[i]``; rounds with a zero baseline are skipped."""
    if len(contender) != len(baseline):
        raise ValueError("paired ratios need one value per round for both")
    ratios = [c / b for c, b in zip(contender, baseline, strict=True) if b > 0]
    if not ratios:
        raise ValueError("no round with a positive baseline")
    ci = bootstrap_ci(ratios, rng)
    return RatioSummary(
        tuple(ratios), statistics.median(ratios), min(ratios), max(ratios), ci[0], ci[1]
    )


def resolution(aa: RatioSummary) -> float:
    """The smallest difference the run can tell from noise: the A/A interval's half-width
    around 1 (at least the distance of its farther end from 1)."""
    return max(abs(aa.ci_low - 1.0), abs(aa.ci_high - 1.0))
