"""Publish :class:`TelemetryReading` deltas through Ray's metrics pipeline.

Runs in whatever process holds the telemetry (the engine core, after it joined
the Ray cluster). Counters receive the difference to the previous reading, so
the exporter can run at any interval; gauges take the latest value.
"""

from __future__ import annotations

from typing import Any

from nightjar_ray.metrics.definitions import METRICS, METRICS_BY_NAME
from nightjar_ray.metrics.telemetry import TelemetryReading

SyncCounts = tuple[int, int]
"""(successful, failed) exchanges with the policy actor so far."""


class RayMetricsExporter:
    """Owns one ``ray.util.metrics`` object per :data:`METRICS` entry."""

    def __init__(self, tags: dict[str, str]) -> None:
        from ray.util import metrics

        kinds = {"counter": metrics.Counter, "gauge": metrics.Gauge}
        self._tags = dict(tags)
        self._metrics: dict[str, Any] = {}
        for spec in METRICS:
            metric = kinds[spec.kind](
                spec.name, description=spec.description, tag_keys=spec.label_names
            )
            metric.set_default_tags(self._tags)
            self._metrics[spec.name] = metric
        self._prev: TelemetryReading | None = None
        self._prev_syncs: SyncCounts = (0, 0)

    def _inc(self, name: str, value: float, **labels: str) -> None:
        if value > 0:
            assert METRICS_BY_NAME[name].kind == "counter"
            self._metrics[name].inc(value, tags=labels or None)

    def _set(self, name: str, value: float) -> None:
        self._metrics[name].set(value)

    def export(self, now: TelemetryReading, sync_age_s: float | None, syncs: SyncCounts) -> None:
        """Publish ``now`` (counters as deltas to the last call)."""
        prev = self._prev
        if prev is None:
            self._zero_counters(now)
        self._export_counters(now, prev)
        seconds = now.observed_seconds - (prev.observed_seconds if prev else 0.0)
        tokens = now.observed_tokens - (prev.observed_tokens if prev else 0)
        if seconds > 0:
            self._set("nightjar_step_goodput_tokens_per_second", tokens / seconds)
        self._set("nightjar_gamma", now.last_gamma)
        self._set("nightjar_batch_size", now.last_num_reqs)
        self._set("nightjar_draft_resident", 1.0 if now.draft_resident else 0.0)
        if now.load is not None:
            self._set("nightjar_kv_blocks", now.load.num_total_blocks)
            self._set("nightjar_kv_free_blocks", now.load.num_free_blocks)
            self._set("nightjar_waiting_requests", now.load.num_waiting_reqs)
            self._set("nightjar_running_requests", now.load.num_running_reqs)
        if sync_age_s is not None:
            self._set("nightjar_policy_sync_age_seconds", sync_age_s)
        self._inc("nightjar_policy_syncs", syncs[0] - self._prev_syncs[0], result="ok")
        self._inc("nightjar_policy_syncs", syncs[1] - self._prev_syncs[1], result="error")
        self._prev, self._prev_syncs = now, syncs

    def _zero_counters(self, now: TelemetryReading) -> None:
        """Create every counter series at 0, so queries see them before they first move.

        Prometheus practice (initialise labelled counters). ``Counter.inc`` refuses 0, so
        this records through the metric's ``_record`` (Ray 2.60 is pinned).
        """
        labelled = {
            "nightjar_steps": [{"gamma": str(g)} for g in range(len(now.steps_by_gamma))],
            "nightjar_decisions": [{"mode": m} for m in now.decisions_by_mode],
            "nightjar_memory_events": [{"kind": k} for k in now.memory_events],
            "nightjar_memory_event_seconds": [{"kind": k} for k in now.memory_events],
            "nightjar_policy_syncs": [{"result": "ok"}, {"result": "error"}],
        }
        for spec in METRICS:
            if spec.kind == "counter":
                for labels in labelled.get(spec.name, [{}]):
                    self._metrics[spec.name]._record(0.0, tags=labels or None)

    def _export_counters(self, now: TelemetryReading, prev: TelemetryReading | None) -> None:
        for gamma, count in enumerate(now.steps_by_gamma):
            before = prev.steps_by_gamma[gamma] if prev else 0
            self._inc("nightjar_steps", count - before, gamma=str(gamma))
        for mode, count in now.decisions_by_mode.items():
            before = prev.decisions_by_mode[mode] if prev else 0
            self._inc("nightjar_decisions", count - before, mode=mode)
        for kind, (count, seconds) in now.memory_events.items():
            n0, s0 = prev.memory_events[kind] if prev else (0, 0.0)
            self._inc("nightjar_memory_events", count - n0, kind=kind)
            self._inc("nightjar_memory_event_seconds", seconds - s0, kind=kind)
        for name, field in (
            ("nightjar_observed_steps", "num_observed_steps"),
            ("nightjar_goodput_tokens", "observed_tokens"),
            ("nightjar_goodput_seconds", "observed_seconds"),
            ("nightjar_switches", "num_switches"),
            ("nightjar_drafted_requests", "num_drafted_reqs"),
            ("nightjar_undrafted_requests", "num_undrafted_reqs"),
            ("nightjar_catch_up_seconds", "catch_up_seconds"),
            ("nightjar_catch_up_tokens", "catch_up_tokens"),
        ):
            before = getattr(prev, field) if prev else 0
            self._inc(name, getattr(now, field) - before)
