"""Arrival processes (the load generator's) and gap sequences (the simulator's)."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from nightjar_ray.workload.arrivals import (
    Gamma,
    Ramp,
    Step,
    build_arrivals,
    gamma_gaps,
    poisson,
    poisson_gaps,
)


def _cv(times: list[float]) -> float:
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return statistics.pstdev(gaps) / statistics.fmean(gaps)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_has_the_rate_and_the_burstiness_asked(burstiness: float) -> None:
    times = Gamma(2.0, burstiness).times(5000.0, random.Random(1))
    assert len(times) / 5000.0 == pytest.approx(2.0, rel=0.05)
    # gaps ~ Gamma(k, .): coefficient of variation 1/sqrt(k)
    assert _cv(times) == pytest.approx(burstiness**-0.5, rel=0.08)
    assert times == sorted(times) and times[0] >= 0 and times[-1] < 5000.0


def test_arrivals_are_deterministic_for_a_seed() -> None:
    a = poisson(1.0).times(100.0, random.Random(7))
    assert a == poisson(1.0).times(100.0, random.Random(7))
    assert a != poisson(1.0).times(100.0, random.Random(8))


def test_step_alternates_its_phases() -> None:
    times = Step(((10.0, 0.5), (10.0, 5.0))).times(2000.0, random.Random(0))
    low = sum(1 for t in times if (t // 10) % 2 == 0)
    high = len(times) - low
    assert low / 1000.0 == pytest.approx(0.5, rel=0.15)
    assert high / 1000.0 == pytest.approx(5.0, rel=0.05)


def test_ramp_rises_linearly() -> None:
    times = Ramp(1.0, 9.0).times(1000.0, random.Random(0))
    first = sum(1 for t in times if t < 100.0) / 100.0  # rate ~1.4 over the first tenth
    last = sum(1 for t in times if t >= 900.0) / 100.0  # ~8.6
    assert first == pytest.approx(1.4, rel=0.2) and last == pytest.approx(8.6, rel=0.1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("poisson", 0.0), "positive rate"),
        (("gamma", 1.0, 0.0), "burstiness"),
        (("step", 1.0, 1.0, "10-0.5"), "SECONDS:RATE"),
        (("ramp", 1.0), "end rate"),
        (("zipf", 1.0), "unknown arrival"),
    ],
)
def test_bad_arrivals_are_named(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_arrivals(*args)  # type: ignore[arg-type]


def test_poisson_and_gamma_gaps_have_the_right_mean_and_spread() -> None:
    rng = random.Random(0)
    p = poisson_gaps(4.0, 20_000, rng)
    g = gamma_gaps(4.0, 3.0, 20_000, rng)
    assert abs(statistics.fmean(p) - 0.25) < 0.01
    assert abs(statistics.fmean(g) - 0.25) < 0.02
    assert statistics.pstdev(g) / statistics.fmean(g) > 2.5
    with pytest.raises(ValueError, match="arrival rate must be > 0"):
        poisson_gaps(0.0, 3, rng)
    with pytest.raises(ValueError, match="gamma arrivals need rate > 0 and cv > 0"):
        gamma_gaps(1.0, 0.0, 3, rng)
