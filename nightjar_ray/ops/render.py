"""Draw the dashboard from a Prometheus server to PNG (no Grafana needed).

Each panel's targets run as ``query_range`` over a window with the dashboard's variables
expanded (:func:`nightjar_ray.ops.panels.expand`); memory events are drawn as vertical
lines on the draft-residency panel, as Grafana draws its annotations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from nightjar_ray.ops.panels import ANNOTATIONS, ROWS, Panel, expand

Series = list[tuple[str, list[float], list[float]]]
"""(legend, times since start in s, values) per series."""


@dataclass(frozen=True)
class Window:
    """The time range to draw: start/end (unix seconds) and the query step."""

    start_s: float
    end_s: float
    step_s: float


class PrometheusClient:
    """The two Prometheus HTTP API calls the renderer and the tests use."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self._http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout_s)

    def query(self, expr: str) -> list[dict[str, Any]]:
        """``/api/v1/query`` at now; raises ``ValueError`` on a PromQL error."""
        return self._get("/api/v1/query", {"query": expr})

    def query_range(self, expr: str, window: Window) -> list[dict[str, Any]]:
        params = {
            "query": expr,
            "start": window.start_s,
            "end": window.end_s,
            "step": window.step_s,
        }
        return self._get("/api/v1/query_range", params)

    def _get(self, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        body = self._http.get(path, params=params).json()
        if body.get("status") != "success":
            raise ValueError(f"{params['query']}: {body.get('error', body)}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def _legend(fmt: str, labels: dict[str, str]) -> str:
    out = fmt
    for key, value in labels.items():
        out = out.replace("{{" + key + "}}", value)
    return out


def panel_series(
    prom: PrometheusClient, panel: Panel, window: Window, rate_interval: str
) -> Series:
    """Every target's series over ``window`` (NaN samples dropped)."""
    out: Series = []
    for target in panel.targets:
        for item in prom.query_range(expand(target.expr, rate_interval), window):
            points = [(float(t), float(v)) for t, v in item["values"] if math.isfinite(float(v))]
            if points:
                times = [t - window.start_s for t, _ in points]
                out.append((_legend(target.legend, item["metric"]), times, [v for _, v in points]))
    return out


def _event_times(prom: PrometheusClient, window: Window) -> list[tuple[str, str, float]]:
    events = []
    for a in ANNOTATIONS:
        for item in prom.query_range(expand(a.expr), window):
            events += [(a.name, a.color, float(t) - window.start_s) for t, _ in item["values"]]
    return events


def render_dashboard(
    prom: PrometheusClient, window: Window, out_png: Path, rate_interval: str = "30s"
) -> dict[str, int]:
    """Draw every panel into one PNG; returns the number of series per panel title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for row in ROWS for p in row.panels]
    cols = 3
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.2 * rows), squeeze=False)
    events = _event_times(prom, window)
    counts = {}
    for ax, panel in zip(axes.flat, panels, strict=False):
        series = panel_series(prom, panel, window, rate_interval)
        counts[panel.title] = len(series)
        _draw(ax, panel, series)
        if panel.title == "Draft residency":
            for _name, color, t in events:
                ax.axvline(t, color=color, alpha=0.4, linewidth=0.8, label=None)
            ax.set_title(f"{panel.title} ({len(events)} events)", fontsize=10)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle("nightjar-ray dashboard (rendered from Prometheus)", fontsize=13)
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 0.97))
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=80)
    plt.close(fig)
    return counts


def _draw(ax: Any, panel: Panel, series: Series) -> None:
    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel("seconds since the window's start", fontsize=8)
    ax.tick_params(labelsize=7)
    if not series:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        return
    for legend, times, values in series[:12]:
        if panel.kind == "bars":
            ax.bar(times, values, width=1.0, label=legend, alpha=0.7)
        else:
            ax.plot(times, values, label=legend, linewidth=1.0)
    if all(v == 0 for _, _, values in series for v in values):
        ax.text(
            0.5, 0.5, "all zero in this window", ha="center", va="center", transform=ax.transAxes
        )
    ax.legend(fontsize=6, loc="upper left")
