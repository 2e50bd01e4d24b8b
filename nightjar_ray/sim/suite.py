"""The workload suite: named workloads every setting runs, for choosing and checking defaults.

``simulate compare --workloads NAME,...`` runs any of them; ``simulate suite`` runs them
all over seeds and reports nightjar against the best static choice in hindsight.

=================  ==========================================================================
name               generator
=================  ==========================================================================
``low``            Poisson, ShareGPT lengths, at 1/4 of the setting's crossover rate
``crossover``      Poisson, ShareGPT lengths, at the crossover rate (``Setting.trace_qps``,
                   where SD and plain decoding meet in the ShareGPT sweep)
``high``           Poisson, ShareGPT lengths, at 2x the crossover rate
``trace``          the Azure conversation trace, its own lengths, replayed at the crossover
                   rate (shape kept)
``prefill-heavy``  prompts U(2k, 8k) tokens, outputs U(5, 50), Poisson at 0.4x capacity with a
                   4x burst (1.6x capacity) for the middle fifth of the requests
``long-output``    prompts LogNormal(median 100), outputs U(500, 2000), Poisson at 0.5x
                   capacity
``on-off``         ShareGPT lengths, alternating 60 s at 0.3x capacity and 60 s at 1.5x,
                   three cycles
``mixed``          per request, a fair coin: ``prefill-heavy``'s lengths or
                   ``long-output``'s, so long-prompt/short-output and short-prompt/
                   long-output requests share batches; Poisson at 0.5x capacity
=================  ==========================================================================

*Capacity* is what plain decoding (``off``, no draft loaded) completes per second on that
workload's lengths when all of ``CAPACITY_PROBE_REQUESTS`` requests arrive at once
(``capacity_qps``): a property of setting and lengths, measured by the simulator itself.
Prompts longer than a model's context are truncated to fit (``fit_to_model``; the 13B
model has a 4k context, so its prefill-heavy prompts are capped near 4k).

Lengths: ``SUITE_REQUESTS`` requests (half that for ``prefill-heavy``, ``long-output`` and
``mixed``),
the trace's first ``TRACE_WINDOW_S``, three on-off cycles; ``length_scale`` (``simulate
suite --length-scale``) multiplies each at the same rates, to tell a policy's cost of
learning (paid once per run) from what it loses for good.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nightjar_ray.sim.metrics import finish_s
from nightjar_ray.sim.presets import Setting, get_dataset, get_setting
from nightjar_ray.sim.workload import fit_to_model, trace_workload
from nightjar_ray.workload import RequestSpec
from nightjar_ray.workload.arrivals import poisson_gaps
from nightjar_ray.workload.trace import TRACE_ENV, read_trace

CAPACITY_PROBE_REQUESTS = 300
SUITE_REQUESTS = 480
"""Requests per synthetic workload (the trace replays its whole window)."""
TRACE_WINDOW_S = 400.0
"""Window of the Azure conversation trace replayed by ``trace``."""
MAX_LENGTH_SCALE = 8
"""Largest ``length_scale``: 8 x 400 s of the trace is within its 3,500 s."""

LengthFn = Callable[[random.Random], tuple[int, int]]


@dataclass(frozen=True)
class LengthMix:
    """Prompt and output lengths of a synthetic workload."""

    name: str
    sample: LengthFn


def _sharegpt(rng: random.Random) -> tuple[int, int]:
    lengths = get_dataset("sharegpt")
    return lengths.prompt.sample(rng), lengths.output.sample(rng)


def _prefill_heavy(rng: random.Random) -> tuple[int, int]:
    return rng.randint(2048, 8192), rng.randint(5, 50)


def _long_output(rng: random.Random) -> tuple[int, int]:
    prompt = max(8, min(400, round(rng.lognormvariate(4.6, 0.4))))  # median e^4.6 ~ 100
    return prompt, rng.randint(500, 2000)


def _mixed(rng: random.Random) -> tuple[int, int]:
    """Half long-prompt/short-output requests (``prefill-heavy``'s), half short-prompt/
    long-output ones (``long-output``'s), drawn independently per request, so both
    kinds share batches."""
    return _prefill_heavy(rng) if rng.random() < 0.5 else _long_output(rng)


SHAREGPT = LengthMix("sharegpt", _sharegpt)
PREFILL_HEAVY = LengthMix("prefill-heavy", _prefill_heavy)
LONG_OUTPUT = LengthMix("long-output", _long_output)
MIXED = LengthMix("mixed", _mixed)
MIXES = {m.name: m for m in (SHAREGPT, PREFILL_HEAVY, LONG_OUTPUT, MIXED)}


def arrivals(
    phases: Sequence[tuple[float, float]], mix: LengthMix, setting: Setting, seed: int
) -> tuple[RequestSpec, ...]:
    """Poisson arrivals in phases of (rate req/s, duration s), lengths from ``mix``."""
    rng = random.Random(seed)
    out: list[RequestSpec] = []
    t0 = 0.0
    for rate, duration_s in phases:
        t = t0 + rng.expovariate(rate)
        while t < t0 + duration_s:
            prompt, output = fit_to_model(*mix.sample(rng), setting.target.max_model_len)
            out.append(RequestSpec(len(out), t, prompt, output))
            t += rng.expovariate(rate)
        t0 += duration_s
    return tuple(out)


def poisson(
    rate: float, mix: LengthMix, setting: Setting, seed: int, n: int = SUITE_REQUESTS
) -> tuple[RequestSpec, ...]:
    """``n`` Poisson arrivals at ``rate`` with lengths from ``mix``."""
    return arrivals([(rate, n / rate)], mix, setting, seed)


def capacity_qps(setting: Setting, mix: LengthMix) -> float:
    """Requests/s ``off`` completes with ``CAPACITY_PROBE_REQUESTS`` arriving at once."""
    return _capacity_qps(setting.name, mix.name)


@functools.lru_cache(maxsize=64)
def _capacity_qps(setting_name: str, mix_name: str) -> float:
    from nightjar_ray.sim.experiments import Contender, run_contender

    setting, mix = get_setting(setting_name), MIXES[mix_name]
    rng = random.Random(12345)
    n = CAPACITY_PROBE_REQUESTS
    gaps = poisson_gaps(1e6, n, rng)
    specs, t = [], 0.0
    for i, gap in enumerate(gaps):
        t += gap
        specs.append(
            RequestSpec(i, t, *fit_to_model(*mix.sample(rng), setting.target.max_model_len))
        )
    result = run_contender(setting, Contender("off", "off", use_draft=False), specs, "sharegpt", 0)
    return n / max(finish_s(r) for r in result.records)


def _low(
    setting: Setting, seed: int, scale: int, trace_path: Path | None
) -> tuple[RequestSpec, ...]:
    return poisson(setting.trace_qps / 4, SHAREGPT, setting, seed, SUITE_REQUESTS * scale)


def _crossover(
    setting: Setting, seed: int, scale: int, trace_path: Path | None
) -> tuple[RequestSpec, ...]:
    return poisson(setting.trace_qps, SHAREGPT, setting, seed, SUITE_REQUESTS * scale)


def _high(
    setting: Setting, seed: int, scale: int, trace_path: Path | None
) -> tuple[RequestSpec, ...]:
    return poisson(2 * setting.trace_qps, SHAREGPT, setting, seed, SUITE_REQUESTS * scale)


def _trace(
    setting: Setting, seed: int, scale: int, trace_path: Path | None
) -> tuple[RequestSpec, ...]:
    del seed  # the trace is the trace; acceptance and policy RNGs still vary with the seed
    if trace_path is None:
        raise ValueError(
            f"the trace workload needs the Azure conversation trace: pass --trace PATH or set "
            f"{TRACE_ENV}; leave 'trace' out of --workloads without it"
        )
    return trace_at(trace_path, setting.trace_qps, setting.target.max_model_len, scale)


@functools.lru_cache(maxsize=8)
def trace_at(
    trace_path: Path, qps: float, max_model_len: int, scale: int = 1
) -> tuple[RequestSpec, ...]:
    """The first ``scale`` x ``TRACE_WINDOW_S`` of the conversation trace, its clock
    compressed so that the first window arrives at ``qps``; a longer replay keeps that
    compression, so it follows the trace's own changes of rate after the first window."""
    rows = read_trace(trace_path)
    window = trace_workload(rows, 0.0, TRACE_WINDOW_S, 1.0, max_model_len)
    time_scale = len(window) / TRACE_WINDOW_S / qps
    return trace_workload(rows, 0.0, TRACE_WINDOW_S * scale, time_scale, max_model_len)


def _prefill_heavy_burst(
    setting: Setting, seed: int, scale: int, trace_path: Path | None
) -> tuple[RequestSpec, ...]:
    rate = 0.4 * capacity_qps(setting, PREFILL_HEAVY)
    n = SUITE_REQUESTS // 2 * scale
    calm_s, burst_s = 0.4 * n / rate, 0.2 * n / (4 * rate)
    return arrivals(
        [(rate, calm_s), (4 * rate, burst_s), (rate, calm_s)], PREFILL_HEAVY, setting, seed
    )


def _long_output_load(
    setting: Setting, seed: int, scale: int, trace_path: Path | None
) -> tuple[RequestSpec, ...]:
    rate = 0.5 * capacity_qps(setting, LONG_OUTPUT)
    return poisson(rate, LONG_OUTPUT, setting, seed, SUITE_REQUESTS // 2 * scale)


def _on_off(
    setting: Setting, seed: int, scale: int, trace_path: Path | None
) -> tuple[RequestSpec, ...]:
    cap = capacity_qps(setting, SHAREGPT)
    return arrivals([(0.3 * cap, 60.0), (1.5 * cap, 60.0)] * 3 * scale, SHAREGPT, setting, seed)


def _mixed_load(
    setting: Setting, seed: int, scale: int, trace_path: Path | None
) -> tuple[RequestSpec, ...]:
    rate = 0.5 * capacity_qps(setting, MIXED)
    return poisson(rate, MIXED, setting, seed, SUITE_REQUESTS // 2 * scale)


SuiteGenerator = Callable[[Setting, int, int, Path | None], tuple[RequestSpec, ...]]
"""(setting, seed, length scale, trace CSV or None) -> the workload."""

SUITE: dict[str, SuiteGenerator] = {
    "low": _low,
    "crossover": _crossover,
    "high": _high,
    "trace": _trace,
    "prefill-heavy": _prefill_heavy_burst,
    "long-output": _long_output_load,
    "on-off": _on_off,
    "mixed": _mixed_load,
}


def suite_workload(
    name: str, setting: Setting, seed: int, length_scale: int = 1, trace_path: Path | None = None
) -> tuple[RequestSpec, ...]:
    """Workload ``name`` of the suite for ``setting`` (deterministic for ``seed``).

    ``length_scale`` multiplies its length at the same rates: ``length_scale`` x the
    requests of a Poisson workload, x the trace window, x the on-off cycles. A longer
    stationary workload (``low``, ``crossover``, ``high``, ``long-output``) starts with
    the shorter one: same seed, same draws. ``trace`` replays ``trace_path`` (the Azure
    conversation trace); the other workloads do not read it.
    """
    if not 1 <= length_scale <= MAX_LENGTH_SCALE:
        raise ValueError(f"length_scale must be in 1..{MAX_LENGTH_SCALE}, got {length_scale}")
    try:
        generate = SUITE[name]
    except KeyError:
        raise ValueError(f"unknown suite workload {name!r}; choose from {list(SUITE)}") from None
    return generate(setting, seed, length_scale, trace_path)
