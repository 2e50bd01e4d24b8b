"""The main job under a real Prometheus server: every dashboard panel has data, every
alert rule evaluates, the dashboard renders, and the job's own report is complete.

One run for the module: Debian's ``prometheus`` scrapes Ray's metrics port every second
(with the chart's alert rules loaded) while ``nightjar-ray demo --exit-after-report``
starts a local Ray cluster, deploys the app on the tiny pair and drives low -> high -> low
load through the OpenAI endpoint, with an API key required (``NIGHTJAR_API_KEY``: the
job's own load sends it; Prometheus scrapes Ray's metrics port without it). Queries then
run over the window of that run.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.loadgen.client import API_KEY_ENV
from nightjar_ray.ops.panels import ANNOTATIONS, all_panels, expand
from nightjar_ray.ops.render import PrometheusClient, Window, render_dashboard
from nightjar_ray.serve.config import CACHE_ENV
from tests.support import free_port, wait_until

from .conftest import render
from .prometheus import prometheus_server

pytestmark = pytest.mark.engine

RATE_INTERVAL = "20s"
POD_LABELS = {"namespace": "llm", "ray_io_cluster": "nj-raycluster-abcde"}
"""What the chart's PodMonitors add to every series (``render()`` installs in "llm")."""


@dataclass
class MainJobRun:
    stdout: str
    prom: PrometheusClient
    window: Window
    rule_groups: list[dict[str, Any]]


def _demo_cmd(metrics_port: int) -> list[str]:
    return [
        sys.executable, "-m", "nightjar_ray.cli.main", "demo", "--pair", "tiny",
        "--phase-seconds", "12", "--high-concurrency", "6", "--max-tokens", "24",
        "--http-port", str(free_port()), "--metrics-port", str(metrics_port),
        "--exit-after-report",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def main_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MainJobRun]:
    workdir = tmp_path_factory.mktemp("prometheus")
    cache = tmp_path_factory.mktemp("nightjar-cache")
    metrics_port = free_port()
    (rule,) = render()["PrometheusRule"]
    groups = rule["spec"]["groups"]
    with prometheus_server(workdir, [f"127.0.0.1:{metrics_port}"], groups, POD_LABELS) as url:
        start = time.time()
        env = {**os.environ, CACHE_ENV: str(cache), API_KEY_ENV: "main-job-key"}
        proc = subprocess.run(
            _demo_cmd(metrics_port), capture_output=True, text=True, timeout=900, env=env
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        prom = PrometheusClient(url)
        # the job's metrics port is closed now: a scrape that finds it down ends the run's
        # series (instant queries at now come back empty) and bounds the window
        wait_until(lambda: prom.query("up == 0"), 60, 0.5, "a scrape after the main job exited")
        window = Window(start, time.time(), 2.0)
        yield MainJobRun(proc.stdout, prom, window, groups)


def test_main_job_reports_all_three_phases(main_job: MainJobRun) -> None:
    out = main_job.stdout
    table = out[out.index("Per phase") :].splitlines()
    rows = [line.split() for line in table if re.match(r"^(low|high) ", line)]
    assert [r[0] for r in rows] == ["low", "high", "low"]
    for row in rows:
        requests, failed, tokens_per_s = int(row[2]), int(row[3]), float(row[4])
        assert requests > 0 and failed == 0 and tokens_per_s > 0
        assert "1/1" in row and any(re.fullmatch(r"\d:\d+%", cell) for cell in row)
    # acceptance rate / tokens per step from vLLM's counters (no rate: nothing drafted)
    acceptance = [next(c for c in r if re.fullmatch(r"(\d+%|-)/\d\.\d\d", c)) for r in rows]
    assert acceptance[0][0].isdigit(), acceptance  # the low phase speculates
    assert int(rows[1][1]) == 6  # the high phase ran at the requested concurrency
    for step in ("[1/4]", "[2/4]", "[3/4]", "[4/4]"):
        assert step in out


def _finite_points(result: list[dict[str, Any]]) -> int:
    return sum(1 for s in result for _, v in s["values"] if math.isfinite(float(v)))


def test_every_panel_query_returns_data(main_job: MainJobRun) -> None:
    empty = []
    for panel in all_panels():
        for target in panel.targets:
            expr = expand(target.expr, RATE_INTERVAL)
            if _finite_points(main_job.prom.query_range(expr, main_job.window)) == 0:
                empty.append(f"{panel.title}: {expr}")
    assert empty == [], "\n".join(empty)


def test_nightjar_series_match_the_load(main_job: MainJobRun) -> None:
    """Values, not just presence: steps were counted, the queue filled at high load."""
    at = {"time": main_job.window.end_s}
    steps = main_job.prom.query("sum(ray_nightjar_steps_total)") or []
    assert not steps  # the cluster is gone: instant queries at now are empty
    q = main_job.prom.query_range
    total = q("sum(max_over_time(ray_nightjar_steps_total[5m]))", main_job.window)
    assert max(float(v) for _, v in total[0]["values"]) > 50, at
    running = q("max(max_over_time(ray_nightjar_running_requests[5m]))", main_job.window)
    assert max(float(v) for _, v in running[0]["values"]) >= 2
    resident = q("min(ray_nightjar_draft_resident)", main_job.window)
    assert {float(v) for _, v in resident[0]["values"]} == {1.0}


def test_every_alert_rule_evaluates(main_job: MainJobRun) -> None:
    for group in main_job.rule_groups:
        for rule in group["rules"]:
            # Raises on a PromQL error; an alert need not fire on a healthy run.
            main_job.prom.query_range(rule["expr"], main_job.window)
    rules = main_job.prom._http.get("/api/v1/rules").json()["data"]["groups"]
    health = {r["name"]: (r["health"], r.get("lastError", "")) for g in rules for r in g["rules"]}
    assert len(health) == 6
    assert all(h == ("ok", "") for h in health.values()), health
    for a in ANNOTATIONS:
        main_job.prom.query_range(expand(a.expr), main_job.window)


def test_render_draws_every_panel(main_job: MainJobRun, tmp_path: Path) -> None:
    png = tmp_path / "dashboard.png"
    counts = render_dashboard(main_job.prom, main_job.window, png, RATE_INTERVAL)
    assert len(counts) == len(all_panels())
    assert [title for title, n in counts.items() if n == 0] == []
    assert png.stat().st_size > 50_000


def _label_sets(result: list[dict[str, Any]], names: tuple[str, ...]) -> set[tuple[str, ...]]:
    return {tuple(item["metric"].get(n, "") for n in names) for item in result}


def test_metrics_absent_alert_joins_the_real_series(main_job: MainJobRun) -> None:
    """NightjarMetricsAbsent's serving side (Serve's request counter of a replica with
    vLLM series) finds exactly the replicas that export nightjar_* series: the labels
    join as the rule assumes, so the alert can fire, and the ingress is left out."""
    (rule,) = [
        r for g in main_job.rule_groups for r in g["rules"] if r["alert"] == "NightjarMetricsAbsent"
    ]
    serving, unless, _ = rule["expr"].partition("\nunless")
    assert unless
    labels = ("namespace", "ray_io_cluster", "deployment", "replica")
    found = _label_sets(main_job.prom.query_range(serving, main_job.window), labels)
    ours = main_job.prom.query_range(
        f"group by ({', '.join(labels)}) (ray_nightjar_steps_total)", main_job.window
    )
    assert found and found == _label_sets(ours, labels)
    assert {f[:2] for f in found} == {tuple(POD_LABELS.values())}
