"""The Nightjar dashboard as data: rows of panels, each a list of PromQL targets.

Queries use Grafana's variables: ``$deployment`` and ``$replica`` (label values of the
``ray_nightjar_*`` series; vLLM's ``ray_vllm_*`` series carry the same replica ID as
``ReplicaId``), ``$tau_low`` (the KV low-water fraction, 0.1 by default, §7.3.3) and
``$__rate_interval``. :func:`expand` substitutes them so the same queries run against a
Prometheus server directly (the tests and ``nightjar-ray dashboards render`` do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PanelKind = Literal["timeseries", "bars"]

NJ = 'deployment=~"$deployment", replica=~"$replica"'
"""Selector of the ``ray_nightjar_*`` series."""
VL = 'ReplicaId=~"$replica"'
"""Selector of vLLM's ``ray_vllm_*`` series (labelled by Serve replica ID)."""
RATE = "[$__rate_interval]"


@dataclass(frozen=True)
class Target:
    """One PromQL query of a panel and its legend (Grafana's ``legendFormat``)."""

    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    """One panel: title, targets, unit (Grafana unit ID) and what it tells the operator."""

    title: str
    targets: tuple[Target, ...]
    unit: str
    description: str
    kind: PanelKind = "timeseries"
    stacked: bool = False


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Annotation:
    """Events drawn on every time series panel (Grafana annotation from Prometheus)."""

    name: str
    expr: str
    color: str


def _quantiles(metric: str) -> tuple[Target, ...]:
    return tuple(
        Target(
            f"histogram_quantile({q}, sum by (le) (rate(ray_vllm_{metric}_bucket{{{VL}}}{RATE})))",
            f"p{round(q * 100)}",
        )
        for q in (0.5, 0.9, 0.99)
    )


def _sum_rate(metric: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}{{{NJ}}}{RATE}))"


SPECULATION = Row(
    "Speculation",
    (
        Panel(
            "Gamma (latest step)",
            (Target(f"max by (replica) (ray_nightjar_gamma{{{NJ}}})", "{{replica}}"),),
            "short",
            "Speculative length of each replica's latest step; 0 = speculation off.",
        ),
        Panel(
            "Steps by gamma",
            (Target(_sum_rate("ray_nightjar_steps_total", "gamma"), "gamma={{gamma}}"),),
            "short",
            "Decoding steps per second by the gamma the policy chose (its distribution).",
            stacked=True,
        ),
        Panel(
            "Step goodput",
            (
                Target(
                    f"{_sum_rate('ray_nightjar_goodput_tokens_total', 'replica')} / "
                    f"{_sum_rate('ray_nightjar_goodput_seconds_total', 'replica')}",
                    "{{replica}}",
                ),
            ),
            "short",
            "Tokens per second of the steps the policy learned from (its reward, tokens/s).",
        ),
        Panel(
            "Policy decisions",
            (Target(_sum_rate("ray_nightjar_decisions_total", "mode"), "{{mode}}"),),
            "short",
            "Decisions per second: exploring arms, exploiting the best one at the current "
            "batch, the queue-aware objective (requests waiting), or gated by the draft gate.",
            stacked=True,
        ),
        Panel(
            "Draft eligibility",
            (
                Target(
                    f"{_sum_rate('ray_nightjar_drafted_requests_total', 'replica')} / "
                    f"{_sum_rate('ray_nightjar_steps_total', 'replica')}",
                    "eligible {{replica}}",
                ),
                Target(
                    f"{_sum_rate('ray_nightjar_undrafted_requests_total', 'replica')} / "
                    f"{_sum_rate('ray_nightjar_steps_total', 'replica')}",
                    "ineligible {{replica}}",
                ),
            ),
            "short",
            "Requests per step the draft ran over (eligible) and skipped (ineligible: their "
            "speculation would not earn back the draft prefill or catch-up they owe).",
        ),
        Panel(
            "Draft acceptance rate",
            (
                Target(
                    "sum (rate(ray_vllm_spec_decode_num_accepted_tokens_total"
                    f"{{{VL}}}{RATE})) / sum (rate(ray_vllm_spec_decode_num_draft_tokens_total"
                    f"{{{VL}}}{RATE}))",
                    "accepted / drafted",
                ),
            ),
            "percentunit",
            "Share of drafted tokens the target accepted (vLLM's spec-decode counters).",
        ),
        Panel(
            "Acceptance length",
            (
                Target(
                    "1 + sum (rate(ray_vllm_spec_decode_num_accepted_tokens_total"
                    f"{{{VL}}}{RATE})) / sum (rate(ray_vllm_spec_decode_num_drafts_total"
                    f"{{{VL}}}{RATE}))",
                    "tokens per speculative step",
                ),
            ),
            "short",
            "Mean tokens emitted per speculative step (1 + accepted per draft).",
        ),
        Panel(
            "Switches and catch-up",
            (
                Target(
                    _sum_rate("ray_nightjar_switches_total", "replica"), "switches/s {{replica}}"
                ),
                Target(
                    _sum_rate("ray_nightjar_catch_up_seconds_total", "replica"),
                    "catch-up s/s {{replica}}",
                ),
            ),
            "short",
            "Returns from gamma=0 to speculation, and the draft KV catch-up time they cost.",
        ),
    ),
)

LOAD_AND_MEMORY = Row(
    "Load and memory",
    (
        Panel(
            "Queue",
            (
                Target(
                    f"sum by (replica) (ray_nightjar_waiting_requests{{{NJ}}})",
                    "waiting {{replica}}",
                ),
                Target(
                    f"sum by (replica) (ray_nightjar_running_requests{{{NJ}}})",
                    "running {{replica}}",
                ),
            ),
            "short",
            "Requests waiting for admission and running, per replica (what the triggers read).",
        ),
        Panel(
            "Free KV blocks",
            (
                Target(
                    f"sum by (replica) (ray_nightjar_kv_free_blocks{{{NJ}}})", "free {{replica}}"
                ),
                Target(
                    f"$tau_low * sum by (replica) (ray_nightjar_kv_blocks{{{NJ}}})",
                    "tau_low {{replica}}",
                ),
                Target(f"sum by (replica) (ray_nightjar_kv_blocks{{{NJ}}})", "total {{replica}}"),
            ),
            "short",
            "Free KV blocks against the tau_low line; below it the draft may be offloaded.",
        ),
        Panel(
            "Draft residency",
            (Target(f"max by (replica) (ray_nightjar_draft_resident{{{NJ}}})", "{{replica}}"),),
            "short",
            "1 while the draft is on the device; offload/reload/contraction events annotate it.",
        ),
        Panel(
            "Memory events",
            (
                Target(
                    f"sum by (kind) (increase(ray_nightjar_memory_events_total{{{NJ}}}{RATE}))",
                    "{{kind}}",
                ),
                Target(
                    _sum_rate("ray_nightjar_memory_event_seconds_total", "kind"),
                    "{{kind}} s/s",
                ),
            ),
            "short",
            "Offload, reload, expand and contract events, and the time spent in them.",
            kind="bars",
        ),
    ),
)

REQUESTS = Row(
    "Requests",
    (
        Panel(
            "Request rate",
            (
                Target(
                    "sum by (finished_reason) (rate(ray_vllm_request_success_total"
                    f"{{{VL}}}{RATE}))",
                    "{{finished_reason}}",
                ),
            ),
            "reqps",
            "Finished requests per second by reason (vLLM).",
            stacked=True,
        ),
        Panel(
            "Output tokens by replica",
            (
                Target(
                    f"sum by (ReplicaId) (rate(ray_vllm_generation_tokens_total{{{VL}}}{RATE}))",
                    "{{ReplicaId}}",
                ),
            ),
            "short",
            "Generated tokens per second, per replica.",
            stacked=True,
        ),
        Panel("TTFT", _quantiles("time_to_first_token_seconds"), "s", "Time to first token."),
        Panel(
            "TPOT",
            _quantiles("request_time_per_output_token_seconds"),
            "s",
            "Time per output token after the first, per request.",
        ),
        Panel(
            "End-to-end latency", _quantiles("e2e_request_latency_seconds"), "s", "Request latency."
        ),
    ),
)

POLICY_POOL = Row(
    "Policy pool",
    (
        Panel(
            "Policy sync age",
            (
                Target(
                    f"max by (replica) (ray_nightjar_policy_sync_age_seconds{{{NJ}}})",
                    "{{replica}}",
                ),
            ),
            "s",
            "Seconds since each replica exchanged statistics with the policy actor.",
        ),
        Panel(
            "Policy syncs",
            (Target(_sum_rate("ray_nightjar_policy_syncs_total", "result"), "{{result}}"),),
            "short",
            "Exchanges with the policy actor per second, ok or error.",
            stacked=True,
        ),
    ),
)

ROWS: tuple[Row, ...] = (SPECULATION, LOAD_AND_MEMORY, REQUESTS, POLICY_POOL)

ANNOTATIONS: tuple[Annotation, ...] = tuple(
    Annotation(
        kind,
        "sum by (replica) (increase("
        f'ray_nightjar_memory_events_total{{{NJ}, kind="{kind}"}}[1m])) > 0',
        color,
    )
    for kind, color in (
        ("offload", "red"),
        ("reload", "green"),
        ("expand", "orange"),
        ("contract", "blue"),
    )
)

VARIABLE_DEFAULTS = {"deployment": ".+", "replica": ".+", "tau_low": "0.1"}


def all_panels() -> tuple[Panel, ...]:
    return tuple(p for row in ROWS for p in row.panels)


def expand(expr: str, rate_interval: str = "1m", **values: str) -> str:
    """``expr`` with the dashboard's variables replaced (defaults: every series, 0.1)."""
    merged = {**VARIABLE_DEFAULTS, **values}
    out = expr.replace("$__rate_interval", rate_interval)
    for name in sorted(merged, key=len, reverse=True):
        out = out.replace(f"${name}", merged[name])
    return out
