"""Soak: a long trace replay while the server's memory and KV block accounting are sampled.

A leak shows as a trend, not as a failure: resident memory that keeps growing, or KV blocks
that do not come back once the load is gone. The run samples, every ``interval_s``:

- the resident set size of the serving processes (Serve replicas and the vLLM engine-core
  and worker processes they spawn), summed per kind, read from ``/proc`` through psutil;
- the engine's KV block gauges (``ray_nightjar_kv_blocks``, ``ray_nightjar_kv_free_blocks``)
  and running/waiting requests from Ray's metrics endpoint.

The report fits a least-squares slope to total RSS over the second half of the run (the
first half includes warm-up: allocator pools and compiled graphs fill once) and compares the
free KV blocks when the server is idle before the load with those idle after it. Sampling
is injected (:data:`Sampler`), so this module stays free of Ray.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nightjar_ray.loadgen.client import RunResult, run_open_loop
from nightjar_ray.workload import RequestSpec

PROCESS_KINDS: dict[str, str] = {
    "ray::ServeReplica": "serve_replica",
    "VLLM::EngineCore": "engine_core",
    "VLLM::Worker": "worker",
}
"""Process-title prefix -> kind, for the serving processes whose RSS is summed."""

GAUGES = (
    "ray_nightjar_kv_blocks",
    "ray_nightjar_kv_free_blocks",
    "ray_nightjar_running_requests",
    "ray_nightjar_waiting_requests",
)


@dataclass(frozen=True)
class SoakSample:
    """One reading (``t_s`` from the start of the load)."""

    t_s: float
    rss_bytes: dict[str, int]
    gauges: dict[str, float]
    num_done: int

    @property
    def total_rss_bytes(self) -> int:
        return sum(self.rss_bytes.values())


Sampler = Callable[[], tuple[dict[str, int], dict[str, float]]]
"""() -> (RSS bytes per process kind, gauge values by name)."""


def rss_by_kind(kinds: dict[str, str] = PROCESS_KINDS) -> dict[str, int]:
    """Summed RSS of this machine's processes whose title starts with a key of ``kinds``."""
    import psutil

    out = dict.fromkeys(kinds.values(), 0)
    for proc in psutil.process_iter(["name", "cmdline", "memory_info"]):
        title = " ".join(proc.info["cmdline"] or []) or (proc.info["name"] or "")
        kind = next((k for prefix, k in kinds.items() if title.startswith(prefix)), None)
        if kind is not None and proc.info["memory_info"] is not None:
            out[kind] += int(proc.info["memory_info"].rss)
    return out


def parse_gauges(text: str, names: tuple[str, ...] = GAUGES) -> dict[str, float]:
    """Sum each named series over its label sets in a Prometheus text exposition."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def metrics_sampler(metrics_url: str) -> Sampler:
    """RSS from /proc and the gauges from Ray's metrics endpoint at ``metrics_url``."""
    import httpx

    def sample() -> tuple[dict[str, int], dict[str, float]]:
        try:
            gauges = parse_gauges(httpx.get(metrics_url, timeout=10.0).text)
        except httpx.HTTPError:
            gauges = {}
        return rss_by_kind(), gauges

    return sample


def wait_for_gauges(sampler: Sampler, timeout_s: float = 120.0, poll_s: float = 2.0) -> bool:
    """Wait until the KV gauges are exported (a new replica reports after a few seconds),
    so the idle reading before the load has them. False on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if "ray_nightjar_kv_free_blocks" in sampler()[1]:
            return True
        time.sleep(poll_s)
    return False


def slope_per_hour(ts: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``ts`` (seconds), per hour; 0 for < 2 points."""
    if len(ts) < 2:
        return 0.0
    mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return 0.0
    return 3600.0 * sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / var


@dataclass
class SoakRecorder:
    """Samples on a background thread until stopped."""

    sampler: Sampler
    interval_s: float
    samples: list[SoakSample] = field(default_factory=list)
    num_done: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def take(self, t0: float) -> SoakSample:
        rss, gauges = self.sampler()
        sample = SoakSample(time.monotonic() - t0, rss, gauges, self.num_done)
        self.samples.append(sample)
        return sample

    def loop(self, t0: float, on_sample: Callable[[SoakSample], None]) -> None:
        while not self._stop.wait(self.interval_s):
            on_sample(self.take(t0))

    def stop(self) -> None:
        self._stop.set()


def run_soak(
    url: str,
    model: str,
    requests: list[RequestSpec],
    sampler: Sampler,
    interval_s: float = 30.0,
    settle_s: float = 10.0,
    on_sample: Callable[[SoakSample], None] = lambda s: None,
    headers: Mapping[str, str] | None = None,
) -> tuple[list[SoakSample], SoakSample, SoakSample, RunResult]:
    """Idle reading, the open-loop run (``headers`` on each request) with periodic
    samples, idle reading after a settle.

    Returns (samples under load, idle before, idle after, the run's records).
    """
    recorder = SoakRecorder(sampler, interval_s)
    t0 = time.monotonic()
    before = recorder.take(t0)
    thread = threading.Thread(target=recorder.loop, args=(t0, on_sample), daemon=True)
    thread.start()

    def done(_: Any) -> None:
        recorder.num_done += 1

    run = asyncio.run(run_open_loop(url, model, requests, on_record=done, headers=headers))
    recorder.stop()
    thread.join()
    time.sleep(settle_s)  # the gauges are exported every few seconds
    after = recorder.take(t0)
    return recorder.samples[1:-1], before, after, run


@dataclass(frozen=True)
class SoakReport:
    """What the soak found (module docstring). ``ok``: no request failed, every KV block
    came back once idle, and the RSS trend is within ``max_trend_fraction``."""

    duration_s: float
    num_requests: int
    num_failed: int
    num_samples: int
    rss_first_bytes: int
    rss_last_bytes: int
    rss_max_bytes: int
    rss_slope_bytes_per_hour: float
    """Of total RSS, over the samples in the run's second half."""
    rss_trend_fraction: float
    """That slope times the second half's length, over the second half's mean RSS."""
    kv_total_blocks: float | None
    kv_free_idle_before: float | None
    kv_free_idle_after: float | None
    kv_min_free_blocks: float | None
    max_trend_fraction: float

    @property
    def kv_returned(self) -> bool:
        return self.kv_free_idle_before is not None and (
            self.kv_free_idle_after == self.kv_free_idle_before
        )

    @property
    def ok(self) -> bool:
        stable = abs(self.rss_trend_fraction) <= self.max_trend_fraction
        return self.num_failed == 0 and stable and self.kv_returned


def summarize_soak(
    samples: list[SoakSample],
    before: SoakSample,
    after: SoakSample,
    run: RunResult,
    max_trend_fraction: float = 0.02,
) -> SoakReport:
    """The report of one :func:`run_soak`."""
    if not samples:
        raise ValueError("soak: no samples under load (run longer than the interval)")
    half = [s for s in samples if s.t_s >= samples[-1].t_s / 2] or samples[-1:]
    slope = slope_per_hour([s.t_s for s in half], [float(s.total_rss_bytes) for s in half])
    span_h = (half[-1].t_s - half[0].t_s) / 3600.0
    mean_rss = sum(s.total_rss_bytes for s in half) / len(half)
    frees = [s.gauges["ray_nightjar_kv_free_blocks"] for s in samples if _has_kv(s)]
    return SoakReport(
        duration_s=run.duration_s,
        num_requests=len(run.records),
        num_failed=sum(1 for r in run.records if not r.ok),
        num_samples=len(samples),
        rss_first_bytes=samples[0].total_rss_bytes,
        rss_last_bytes=samples[-1].total_rss_bytes,
        rss_max_bytes=max(s.total_rss_bytes for s in samples),
        rss_slope_bytes_per_hour=slope,
        rss_trend_fraction=slope * span_h / mean_rss if mean_rss else 0.0,
        kv_total_blocks=after.gauges.get("ray_nightjar_kv_blocks"),
        kv_free_idle_before=before.gauges.get("ray_nightjar_kv_free_blocks"),
        kv_free_idle_after=after.gauges.get("ray_nightjar_kv_free_blocks"),
        kv_min_free_blocks=min(frees) if frees else None,
        max_trend_fraction=max_trend_fraction,
    )


def _has_kv(sample: SoakSample) -> bool:
    return "ray_nightjar_kv_free_blocks" in sample.gauges
