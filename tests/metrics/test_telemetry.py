"""Telemetry counters, their JSON form, and the metric table's naming rules."""

from __future__ import annotations

import re

import pytest

from nightjar_ray.metrics.definitions import COMMON_LABELS, METRICS
from nightjar_ray.metrics.telemetry import (
    MEMORY_EVENT_KINDS,
    EngineTelemetry,
    LoadSnapshot,
    TelemetryReading,
)


def test_memory_events_are_counted_with_durations_and_unknown_kinds_refused() -> None:
    t = EngineTelemetry(4)
    t.record_memory_event("offload", 0.5)
    t.record_memory_event("offload", 0.25)
    t.record_memory_event("contract", 0.01)
    events = t.read().memory_events
    assert events["offload"] == (2, 0.75) and events["contract"] == (1, 0.01)
    assert set(events) == set(MEMORY_EVENT_KINDS)
    with pytest.raises(ValueError, match="unknown memory event"):
        t.record_memory_event("swap", 1.0)
    with pytest.raises(ValueError, match=">= 0"):
        t.record_memory_event("reload", -1.0)


def test_reading_round_trips_through_json() -> None:
    t = EngineTelemetry(3)
    t.on_step(2, 5, explored=True, consulted=True)
    t.on_observed(7, 0.1)
    t.on_catch_up(0.02, 12)
    t.set_load(LoadSnapshot(3, 5, 100, 400))
    reading = t.read()
    assert TelemetryReading.from_json(reading.to_json()) == reading
    assert reading.load == LoadSnapshot(3, 5, 100, 400)
    assert reading.num_switches == 1 and reading.catch_up_tokens == 12


def test_metric_names_follow_prometheus_conventions() -> None:
    names = [m.name for m in METRICS]
    assert len(set(names)) == len(names)
    for m in METRICS:
        assert re.fullmatch(r"nightjar_[a-z_]+", m.name), m.name
        assert not m.name.endswith("_total"), "Ray adds _total to counters"
        assert m.exported_name.startswith("ray_nightjar_")
        assert m.exported_name.endswith("_total") == (m.kind == "counter")
        assert m.label_names[: len(COMMON_LABELS)] == COMMON_LABELS
        assert m.description.endswith(".")
