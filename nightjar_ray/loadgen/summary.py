"""A run's summary, under ``vllm bench serve``'s names (its ``--save-result`` JSON keys).

Throughputs divide by the run's duration (first send to last response). Latency metrics
are over successful requests: ``ttft``, ``tpot`` (per request, after the first token),
``itl`` (every inter-chunk gap), ``e2el``; each with ``mean_``, ``median_``, ``std_``,
``p90_`` and ``p99_`` in milliseconds. ``request_goodput`` counts requests meeting every
SLO given (``ttft:500 tpot:100`` in ms, as ``vllm bench serve --goodput``; a request with
one output token meets any ``tpot``). Failed requests are counted in ``failed`` and listed
by status in ``failures``. Given the server's speculative-decoding counters over the run,
the summary adds :func:`nightjar_ray.loadgen.counters.spec_decode_figures`.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from nightjar_ray.loadgen.client import RunResult
from nightjar_ray.loadgen.counters import SpecDecodeCounts, spec_decode_figures
from nightjar_ray.workload import RequestRecord

SLO_METRICS = ("ttft", "tpot", "e2el")
PERCENTILES = (90, 99)


def parse_slos(spec: str | Sequence[str] | None) -> dict[str, float]:
    """``["ttft:500", "tpot:100"]`` (or ``"ttft:500,tpot:100"``) -> {"ttft": 500.0,
    "tpot": 100.0} (milliseconds)."""
    if not spec:
        return {}
    items = [spec] if isinstance(spec, str) else list(spec)
    out = {}
    for part in (p for item in items for p in item.split(",") if p):
        name, sep, value = part.partition(":")
        if name not in SLO_METRICS or not sep:
            raise ValueError(f"bad SLO {part!r}: use NAME:MS with NAME in {SLO_METRICS}")
        try:
            out[name] = float(value)
        except ValueError:
            raise ValueError(f"bad SLO value in {part!r}: not a number") from None
        if out[name] <= 0:
            raise ValueError(f"SLO {name} must be > 0 ms, got {value}")
    return out


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), ``q`` in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _stats(name: str, values_s: list[float]) -> dict[str, float]:
    ms = [v * 1e3 for v in values_s]
    out = {
        f"mean_{name}_ms": statistics.fmean(ms) if ms else 0.0,
        f"median_{name}_ms": statistics.median(ms) if ms else 0.0,
        f"std_{name}_ms": statistics.pstdev(ms) if ms else 0.0,
    }
    for q in PERCENTILES:
        out[f"p{q}_{name}_ms"] = percentile(ms, q)
    return out


def _latencies(ok: list[RequestRecord]) -> dict[str, list[float]]:
    return {
        "ttft": [r.ttft_s for r in ok if r.ttft_s is not None],
        "tpot": [t for r in ok if (t := r.tpot_s) is not None],
        "itl": [gap for r in ok for gap in r.itl_s],
        "e2el": [r.e2e_s for r in ok if r.e2e_s is not None],
    }


def _meets(record: RequestRecord, slos_ms: dict[str, float]) -> bool:
    values = {"ttft": record.ttft_s, "tpot": record.tpot_s, "e2el": record.e2e_s}
    return all((values[k] or 0.0) * 1e3 <= limit for k, limit in slos_ms.items())


def summarize(
    run: RunResult,
    slos_ms: dict[str, float] | None = None,
    spec_decode: SpecDecodeCounts | None = None,
) -> dict[str, Any]:
    """The summary dictionary (module docstring); ``spec_decode``: the server's counters
    over the run (after minus before)."""
    ok = [r for r in run.records if r.ok]
    duration = max(run.duration_s, 1e-9)
    tokens_in = sum(r.num_prompt_tokens for r in ok)
    tokens_out = sum(r.num_output_tokens for r in ok)
    out: dict[str, Any] = {
        "duration": run.duration_s,
        "num_prompts": len(run.records),
        "completed": len(ok),
        "failed": len(run.records) - len(ok),
        "failures": dict(Counter(r.status for r in run.records if not r.ok)),
        "total_input_tokens": tokens_in,
        "total_output_tokens": tokens_out,
        "request_throughput": len(ok) / duration,
        "output_throughput": tokens_out / duration,
        "total_token_throughput": (tokens_in + tokens_out) / duration,
    }
    if slos_ms:
        out["request_goodput"] = sum(_meets(r, slos_ms) for r in ok) / duration
    for name, values in _latencies(ok).items():
        out.update(_stats(name, values))
    if spec_decode is not None:
        out.update(spec_decode_figures(spec_decode))
    return out
