"""Every ``nightjar_*`` metric in one table (pure Python).

Names follow Prometheus conventions: base units (seconds, tokens), ``_total``
on counters. Ray's metrics pipeline prefixes ``ray_`` on export, as it does for
vLLM's ``ray_vllm_*``; :attr:`MetricSpec.exported_name` is the name a
Prometheus query uses. Every series carries :data:`COMMON_LABELS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricKind = Literal["counter", "gauge"]

COMMON_LABELS = ("deployment", "replica", "model")
"""Serve deployment name, Serve replica ID (vLLM's ``ReplicaId``), model ID."""

EXPORT_PREFIX = "ray_"


@dataclass(frozen=True)
class MetricSpec:
    """One metric: the name created in Ray, its kind, help text and extra labels."""

    name: str
    kind: MetricKind
    description: str
    labels: tuple[str, ...] = ()

    @property
    def exported_name(self) -> str:
        """The series name Prometheus sees (``ray_`` prefix, ``_total`` on counters)."""
        suffix = "_total" if self.kind == "counter" else ""
        return f"{EXPORT_PREFIX}{self.name}{suffix}"

    @property
    def label_names(self) -> tuple[str, ...]:
        return COMMON_LABELS + self.labels


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("nightjar_steps", "counter", "Decoding steps, by the gamma chosen.", ("gamma",)),
    MetricSpec(
        "nightjar_decisions",
        "counter",
        "Policy decisions, by mode (explore/exploit; queue: the queue-aware objective, "
        "requests waiting; gated: the draft gate ran gamma 0).",
        ("mode",),
    ),
    MetricSpec(
        "nightjar_drafted_requests",
        "counter",
        "Request-steps the draft ran over, in steps that speculated (eligible requests).",
    ),
    MetricSpec(
        "nightjar_undrafted_requests",
        "counter",
        "Request-steps the draft skipped in steps that speculated (ineligible requests: "
        "their speculation would not earn back the draft work they owe).",
    ),
    MetricSpec("nightjar_observed_steps", "counter", "Steps the policy learned from."),
    MetricSpec("nightjar_goodput_tokens", "counter", "Tokens emitted by observed steps."),
    MetricSpec("nightjar_goodput_seconds", "counter", "Wall time of observed steps."),
    MetricSpec(
        "nightjar_step_goodput_tokens_per_second",
        "gauge",
        "Goodput of the observed steps of the last report interval.",
    ),
    MetricSpec("nightjar_gamma", "gauge", "Gamma of the latest step (0 = speculation off)."),
    MetricSpec("nightjar_batch_size", "gauge", "Batch size B the policy saw at the latest step."),
    MetricSpec("nightjar_switches", "counter", "Switches from gamma=0 back to speculation."),
    MetricSpec("nightjar_catch_up_seconds", "counter", "Draft KV catch-up time after gamma=0."),
    MetricSpec("nightjar_catch_up_tokens", "counter", "Tokens the draft caught up over."),
    MetricSpec("nightjar_draft_resident", "gauge", "1 while the draft model is on the device."),
    MetricSpec("nightjar_kv_blocks", "gauge", "KV cache blocks in the block pool."),
    MetricSpec("nightjar_kv_free_blocks", "gauge", "Free KV cache blocks."),
    MetricSpec("nightjar_waiting_requests", "gauge", "Requests in the waiting queue."),
    MetricSpec("nightjar_running_requests", "gauge", "Requests running in the engine."),
    MetricSpec(
        "nightjar_memory_events",
        "counter",
        "Elastic-memory events (offload, reload, expand, contract).",
        ("kind",),
    ),
    MetricSpec(
        "nightjar_memory_event_seconds",
        "counter",
        "Time spent in elastic-memory events, by kind.",
        ("kind",),
    ),
    MetricSpec(
        "nightjar_policy_sync_age_seconds",
        "gauge",
        "Seconds since this replica last exchanged statistics with the policy actor.",
    ),
    MetricSpec(
        "nightjar_policy_syncs",
        "counter",
        "Exchanges with the policy actor, by result (ok/error).",
        ("result",),
    ),
)

METRICS_BY_NAME = {m.name: m for m in METRICS}
