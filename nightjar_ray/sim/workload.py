"""The simulator's workloads: request lengths, synthetic arrivals, and trace windows.

A workload is a tuple of :class:`~nightjar_ray.workload.RequestSpec` sorted by arrival
time, with lengths only (no prompts). Arrival gaps come from
:mod:`nightjar_ray.workload.arrivals`; traces are read by
:func:`nightjar_ray.workload.trace.read_trace`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nightjar_ray.workload import RequestSpec


@dataclass(frozen=True)
class LogNormalLength:
    """Token length ~ round(LogNormal(ln(median), sigma)), clamped to [min, max]."""

    median_tokens: float
    sigma: float
    min_tokens: int
    max_tokens: int

    def sample(self, rng: random.Random) -> int:
        x = rng.lognormvariate(math.log(self.median_tokens), self.sigma)
        return max(self.min_tokens, min(self.max_tokens, round(x)))


@dataclass(frozen=True)
class DatasetLengths:
    """Prompt and output length distributions of one dataset (see docs/simulator.md)."""

    name: str
    prompt: LogNormalLength
    output: LogNormalLength


def synthetic_workload(
    gaps: Iterable[float], lengths: DatasetLengths, max_model_len: int, rng: random.Random
) -> tuple[RequestSpec, ...]:
    """Requests arriving after ``gaps`` with lengths sampled from ``lengths``."""
    out, t = [], 0.0
    for i, gap in enumerate(gaps):
        t += gap
        prompt = lengths.prompt.sample(rng)
        output = lengths.output.sample(rng)
        out.append(RequestSpec(i, t, *fit_to_model(prompt, output, max_model_len)))
    return tuple(out)


def fit_to_model(prompt: int, output: int, max_model_len: int) -> tuple[int, int]:
    """Clamp lengths so prompt + output <= max_model_len (the prompt is truncated first)."""
    output = max(1, min(output, max_model_len // 2))
    prompt = max(1, min(prompt, max_model_len - output))
    return prompt, output


def trace_workload(
    trace: Sequence[RequestSpec],
    start_s: float,
    duration_s: float,
    time_scale: float,
    max_model_len: int,
) -> tuple[RequestSpec, ...]:
    """Requests of the window ``[start_s, start_s + duration_s)`` of ``trace`` (sorted by
    arrival, as ``read_trace`` returns it), replayed from t=0 and fitted to the model.

    ``time_scale`` stretches (>1) or compresses (<1) the gaps: replay at a lower or higher
    rate than recorded while keeping the trace's shape and lengths.
    """
    if time_scale <= 0 or duration_s <= 0:
        raise ValueError("trace time_scale and duration_s must be > 0")
    window = [r for r in trace if start_s <= r.arrival_s < start_s + duration_s]
    if not window:
        raise ValueError(f"no trace requests in [{start_s}, {start_s + duration_s}) s")
    return tuple(
        RequestSpec(
            i,
            (r.arrival_s - start_s) * time_scale,
            *fit_to_model(max(1, r.num_prompt_tokens), max(1, r.num_output_tokens), max_model_len),
        )
        for i, r in enumerate(window)
    )


def rate_timeline(workload: tuple[RequestSpec, ...], window_s: float) -> list[tuple[float, float]]:
    """(window start, requests per second) over the workload, for plots and docs."""
    if not workload:
        return []
    counts: dict[int, int] = {}
    for req in workload:
        k = int(req.arrival_s // window_s)
        counts[k] = counts.get(k, 0) + 1
    last = int(workload[-1].arrival_s // window_s)
    return [(k * window_s, counts.get(k, 0) / window_s) for k in range(last + 1)]
