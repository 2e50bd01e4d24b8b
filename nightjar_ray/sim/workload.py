"""Workloads: request lengths, arrival processes, and Azure trace replay.

A workload is a tuple of :class:`RequestSpec` sorted by arrival time. Arrivals are
Poisson (exponential gaps), gamma (gaps with a chosen coefficient of variation, for
burstier-than-Poisson load), or replayed from the Azure LLM inference trace
(``TIMESTAMP,ContextTokens,GeneratedTokens``; "Azure LLM inference trace 2023, Microsoft
Azure Public Dataset, CC BY 4.0.").
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

TRACE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
DEFAULT_TRACE = Path("..") / "shared" / "data" / "azure_llm_inference_trace_conv_2023.csv"
TRACE_ATTRIBUTION = "Azure LLM inference trace 2023, Microsoft Azure Public Dataset, CC BY 4.0."


@dataclass(frozen=True)
class RequestSpec:
    """One request of a workload."""

    req_id: int
    arrival_s: float
    num_prompt_tokens: int
    num_output_tokens: int


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


def poisson_gaps(rate_per_s: float, count: int, rng: random.Random) -> list[float]:
    """Exponential inter-arrival gaps (Poisson process)."""
    if rate_per_s <= 0:
        raise ValueError(f"arrival rate must be > 0, got {rate_per_s}")
    return [rng.expovariate(rate_per_s) for _ in range(count)]


def gamma_gaps(rate_per_s: float, cv: float, count: int, rng: random.Random) -> list[float]:
    """Gamma-distributed gaps with mean 1/rate and coefficient of variation ``cv``."""
    if rate_per_s <= 0 or cv <= 0:
        raise ValueError(f"gamma arrivals need rate > 0 and cv > 0, got {rate_per_s}, {cv}")
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate_per_s * shape)
    return [rng.gammavariate(shape, scale) for _ in range(count)]


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


def _parse_timestamp(text: str) -> float:
    # NOTE: the trace has 7 fractional digits; datetime takes at most 6.
    head, _, frac = text.strip().partition(".")
    return datetime.fromisoformat(head).timestamp() + (float("0." + frac) if frac else 0.0)


def read_trace(path: str | Path) -> list[tuple[float, int, int]]:
    """Rows of the Azure trace as (seconds since the first request, context, generated)."""
    rows: list[tuple[float, int, int]] = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != TRACE_COLUMNS:
            raise ValueError(f"{path}: trace header must be {','.join(TRACE_COLUMNS)}")
        for line_no, r in enumerate(reader, start=2):
            try:
                rows.append(
                    (
                        _parse_timestamp(r["TIMESTAMP"]),
                        int(r["ContextTokens"]),
                        int(r["GeneratedTokens"]),
                    )
                )
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}:{line_no}: bad trace row: {e}") from e
    if not rows:
        raise ValueError(f"{path}: trace has no requests")
    rows.sort(key=lambda row: row[0])
    t0 = rows[0][0]
    return [(t - t0, c, g) for t, c, g in rows]


def trace_workload(
    rows: list[tuple[float, int, int]],
    start_s: float,
    duration_s: float,
    time_scale: float,
    max_model_len: int,
) -> tuple[RequestSpec, ...]:
    """Requests of the window ``[start_s, start_s + duration_s)``, replayed from t=0.

    ``time_scale`` stretches (>1) or compresses (<1) the gaps: replay at a lower or higher
    rate than recorded while keeping the trace's shape and lengths.
    """
    if time_scale <= 0 or duration_s <= 0:
        raise ValueError("trace time_scale and duration_s must be > 0")
    window = [r for r in rows if start_s <= r[0] < start_s + duration_s]
    if not window:
        raise ValueError(f"no trace requests in [{start_s}, {start_s + duration_s}) s")
    return tuple(
        RequestSpec(
            i, (t - start_s) * time_scale, *fit_to_model(max(1, c), max(1, g), max_model_len)
        )
        for i, (t, c, g) in enumerate(window)
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
