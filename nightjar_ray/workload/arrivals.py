"""Arrivals: a seeded RNG turned into request arrival times (seconds from 0) or gaps.

Processes over a duration (the load generator's), built by name with
:func:`build_arrivals` (``poisson``, ``gamma``, ``step``, ``ramp``). The gamma process
follows ``vllm bench serve --burstiness``: inter-arrival gaps are
Gamma(shape=burstiness, scale=1/(rate*burstiness)), so the mean rate is ``rate`` and
burstiness 1 is Poisson; below 1 is burstier, above 1 more regular.

Gap sequences of a given count (the simulator's): :func:`poisson_gaps` and
:func:`gamma_gaps` (gamma parametrised by its coefficient of variation).
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass


class ArrivalProcess(ABC):
    """Arrival times over ``[0, duration_s)``; deterministic for a given RNG state."""

    @abstractmethod
    def times(self, duration_s: float, rng: random.Random) -> list[float]:
        """Sorted arrival offsets in seconds."""


def _check_rate(name: str, rate: float) -> None:
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"{name} must be a positive rate (requests/s), got {rate}")


@dataclass(frozen=True)
class Gamma(ArrivalProcess):
    """Gamma-distributed gaps; ``burstiness`` 1 = Poisson (see module docstring)."""

    rate_rps: float
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        _check_rate("rate_rps", self.rate_rps)
        if not self.burstiness > 0:
            raise ValueError(f"burstiness must be > 0, got {self.burstiness}")

    def times(self, duration_s: float, rng: random.Random) -> list[float]:
        scale = 1.0 / (self.rate_rps * self.burstiness)
        out, t = [], rng.gammavariate(self.burstiness, scale)
        while t < duration_s:
            out.append(t)
            t += rng.gammavariate(self.burstiness, scale)
        return out


def poisson(rate_rps: float) -> Gamma:
    """Exponential gaps at ``rate_rps``."""
    return Gamma(rate_rps, 1.0)


@dataclass(frozen=True)
class Step(ArrivalProcess):
    """Poisson phases: ``((duration_s, rate_rps), ...)`` repeated to fill the run."""

    phases: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.phases:
            raise ValueError("step needs at least one (duration_s, rate_rps) phase")
        for seconds, rate in self.phases:
            _check_rate("phase rate", rate)
            if not seconds > 0:
                raise ValueError(f"phase duration must be > 0 s, got {seconds}")

    def times(self, duration_s: float, rng: random.Random) -> list[float]:
        out: list[float] = []
        start = 0.0
        while start < duration_s:
            for seconds, rate in self.phases:
                end = min(start + seconds, duration_s)
                out += [start + t for t in Gamma(rate).times(end - start, rng)]
                start = end
                if start >= duration_s:
                    break
        return out


@dataclass(frozen=True)
class Ramp(ArrivalProcess):
    """Rate moving linearly from ``start_rps`` to ``end_rps`` over the run (thinning)."""

    start_rps: float
    end_rps: float

    def __post_init__(self) -> None:
        _check_rate("start_rps", self.start_rps)
        _check_rate("end_rps", self.end_rps)

    def times(self, duration_s: float, rng: random.Random) -> list[float]:
        peak = max(self.start_rps, self.end_rps)
        out = []
        for t in Gamma(peak).times(duration_s, rng):
            rate = self.start_rps + (self.end_rps - self.start_rps) * t / duration_s
            if rng.random() < rate / peak:
                out.append(t)
        return out


def parse_steps(spec: str) -> tuple[tuple[float, float], ...]:
    """``"60:0.3,60:1.5"`` -> ((60, 0.3), (60, 1.5)); ``ValueError`` names the bad part."""
    phases = []
    for part in spec.split(","):
        seconds, sep, rate = part.partition(":")
        try:
            if not sep:
                raise ValueError
            phases.append((float(seconds), float(rate)))
        except ValueError:
            raise ValueError(f"bad step phase {part!r}: use SECONDS:RATE, e.g. 60:0.5") from None
    return tuple(phases)


ARRIVAL_NAMES = ("poisson", "gamma", "step", "ramp")


def build_arrivals(
    name: str,
    rate_rps: float = 1.0,
    burstiness: float = 1.0,
    steps: str = "",
    ramp_end_rps: float | None = None,
) -> ArrivalProcess:
    """The arrival process ``name`` (``ARRIVAL_NAMES``); ``ValueError`` on bad input."""
    if name == "poisson":
        return poisson(rate_rps)
    if name == "gamma":
        return Gamma(rate_rps, burstiness)
    if name == "step":
        return Step(parse_steps(steps))
    if name == "ramp":
        if ramp_end_rps is None:
            raise ValueError("ramp needs an end rate (--ramp-end-rps)")
        return Ramp(rate_rps, ramp_end_rps)
    raise ValueError(f"unknown arrival process {name!r}; one of {ARRIVAL_NAMES}")


def poisson_gaps(rate_per_s: float, count: int, rng: random.Random) -> list[float]:
    """``count`` exponential inter-arrival gaps (a Poisson process at ``rate_per_s``)."""
    if rate_per_s <= 0:
        raise ValueError(f"arrival rate must be > 0, got {rate_per_s}")
    return [rng.expovariate(rate_per_s) for _ in range(count)]


def gamma_gaps(rate_per_s: float, cv: float, count: int, rng: random.Random) -> list[float]:
    """``count`` gamma-distributed gaps with mean ``1/rate_per_s`` and coefficient of
    variation ``cv``."""
    if rate_per_s <= 0 or cv <= 0:
        raise ValueError(f"gamma arrivals need rate > 0 and cv > 0, got {rate_per_s}, {cv}")
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate_per_s * shape)
    return [rng.gammavariate(shape, scale) for _ in range(count)]
