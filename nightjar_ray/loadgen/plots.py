"""PNG plots of a run: throughput over time with gamma and draft residency overlaid (the
paper's Fig. 11), and latency CDFs.

Throughput over time spreads each request's output tokens evenly between its first and
last token (per-chunk token counts are not in the stream), in ``bin_s`` bins. Gamma (the
mean gamma per step, from ``ray_nightjar_steps_total{gamma}``) and draft residency come
from a Prometheus server that scraped the run, when one is given.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from nightjar_ray.loadgen.client import RunResult
from nightjar_ray.workload import RequestRecord


def throughput_series(
    records: list[RequestRecord], bin_s: float
) -> tuple[list[float], list[float]]:
    """(bin start times, output tokens/s per bin) over the run."""
    ok = [
        (r.first_token_s, r.finish_s, r.num_output_tokens)
        for r in records
        if r.ok and r.first_token_s is not None and r.finish_s is not None
    ]
    end = max((last for _, last, _ in ok), default=0.0)
    bins = [0.0] * (int(end / bin_s) + 1)
    for first, last, num_output_tokens in ok:
        for k in range(num_output_tokens):
            t = first + (last - first) * (k / max(1, num_output_tokens - 1))
            bins[min(int(t / bin_s), len(bins) - 1)] += 1
    return [i * bin_s for i in range(len(bins))], [b / bin_s for b in bins]


def _mean_gamma(by_gamma: list[dict[str, Any]]) -> dict[float, float]:
    steps: dict[float, float] = {}
    weighted: dict[float, float] = {}
    for series in by_gamma:
        gamma = float(series["metric"].get("gamma", 0))
        for t, v in series["values"]:
            value = float(v)
            if math.isfinite(value):
                steps[float(t)] = steps.get(float(t), 0.0) + value
                weighted[float(t)] = weighted.get(float(t), 0.0) + gamma * value
    return {t: weighted[t] / steps[t] for t in sorted(steps) if steps[t] > 0}


def overlay_series(prom: Any, run: RunResult, step_s: float = 2.0) -> dict[str, dict[float, float]]:
    """Mean gamma per step and min draft residency over the run, keyed by run seconds."""
    from nightjar_ray.ops.render import Window

    window = Window(run.start_unix_s, run.start_unix_s + run.duration_s, step_s)
    gamma = _mean_gamma(
        prom.query_range("sum by (gamma) (rate(ray_nightjar_steps_total[20s]))", window)
    )
    resident: dict[float, float] = {}
    for series in prom.query_range("min(ray_nightjar_draft_resident)", window):
        resident = {float(t): float(v) for t, v in series["values"]}
    shift = run.start_unix_s
    return {
        "gamma": {t - shift: v for t, v in gamma.items()},
        "draft_resident": {t - shift: v for t, v in resident.items()},
    }


def plot_run(
    run: RunResult,
    out_dir: Path,
    overlay: dict[str, dict[float, float]] | None = None,
    bin_s: float = 5.0,
    title: str = "",
) -> list[Path]:
    """Write ``throughput.png`` and ``latency_cdf.png`` into ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "throughput.png", out_dir / "latency_cdf.png"]
    fig, ax = plt.subplots(figsize=(10, 4))
    times, tput = throughput_series(run.records, bin_s)
    ax.plot(times, tput, color="tab:blue", label="output tokens/s")
    ax.set_xlabel("seconds since the run's start")
    ax.set_ylabel("output tokens/s")
    if overlay:
        twin = ax.twinx()
        for name, color in (("gamma", "tab:orange"), ("draft_resident", "tab:green")):
            points = sorted(overlay.get(name, {}).items())
            twin.step([t for t, _ in points], [v for _, v in points], color=color, label=name)
        twin.set_ylabel("mean gamma per step / draft resident")
        twin.legend(loc="upper right", fontsize=8)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title or "throughput over time")
    fig.tight_layout()
    fig.savefig(paths[0], dpi=90)
    plt.close(fig)
    _plot_cdfs(plt, run.records, paths[1], title)
    return paths


def _plot_cdfs(plt: Any, records: list[RequestRecord], path: Path, title: str) -> None:
    ok = [r for r in records if r.ok]
    metrics = {
        "TTFT": [r.ttft_s for r in ok if r.ttft_s is not None],
        "TPOT": [t for r in ok if (t := r.tpot_s) is not None],
        "E2E": [r.e2e_s for r in ok if r.e2e_s is not None],
    }
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
    for ax, (name, values) in zip(axes, metrics.items(), strict=True):
        ordered = sorted(v * 1e3 for v in values)
        ax.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))])
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
    fig.suptitle(title or "latency CDFs")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
