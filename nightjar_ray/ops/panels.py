"""The Nightjar dashboard as data: rows of panels, each a list of PromQL targets.

Queries use Grafana's variables: ``$namespace`` and ``$ray_io_cluster`` (the Kubernetes
namespace and KubeRay cluster a PodMonitor labels every series with; ``.*`` matches
series without them, as a local Prometheus scrapes), ``$deployment`` and ``$replica``
(label values of the ``ray_nightjar_*`` series), ``$tau_low`` (the KV low-water
fraction, 0.1 by default, §7.3.3) and ``$__rate_interval``. :func:`expand` substitutes
them so the same queries run against a Prometheus server directly (the tests and
``nightjar-ray dashboards render`` do).

vLLM's ``ray_vllm_*`` series carry ``model_name`` and ``ReplicaId`` but no deployment;
:func:`of_deployment` keeps those of the selected deployments' replicas by joining them
with ours (``model``, ``replica``) through ``label_replace``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PanelKind = Literal["timeseries", "bars"]

SCOPE = 'namespace=~"$namespace", ray_io_cluster=~"$ray_io_cluster"'
"""Selector of the namespace and Ray cluster (every series)."""
NJ = f'{SCOPE}, deployment=~"$deployment", replica=~"$replica"'
"""Selector of the ``ray_nightjar_*`` series."""
VL = f'{SCOPE}, ReplicaId=~"$replica"'
"""Selector of vLLM's ``ray_vllm_*`` series (labelled by Serve replica ID)."""
RATE = "[$__rate_interval]"
VLLM_JOIN = "namespace, ray_io_cluster, ReplicaId, model_name"
"""Labels a vLLM series shares with the replica it belongs to."""
OUR_REPLICAS = (
    "label_replace(label_replace(group by (namespace, ray_io_cluster, replica, model) "
    f'(ray_nightjar_steps_total{{{NJ}}}), "ReplicaId", "$1", "replica", "(.+)"), '
    '"model_name", "$1", "model", "(.+)")'
)
"""The selected deployments' replicas, labelled as vLLM labels them."""

TOKENS_PER_S = "count:tokens/s"
"""Grafana custom unit (``count:`` scales by 1000: K, M)."""


@dataclass(frozen=True)
class Target:
    """One PromQL query of a panel, its legend (Grafana's ``legendFormat``) and its unit
    where it differs from the panel's (a Grafana field override)."""

    expr: str
    legend: str
    unit: str | None = None


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


def of_deployment(vector: str) -> str:
    """``vector`` (of ``ray_vllm_*`` series) restricted to the selected deployments."""
    return f"({vector} and on ({VLLM_JOIN}) {OUR_REPLICAS})"


def _vllm_rate(metric: str, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} ({of_deployment(f'rate({metric}{{{VL}}}{RATE})')})"


def _quantiles(metric: str) -> tuple[Target, ...]:
    return tuple(
        Target(
            f"histogram_quantile({q}, {_vllm_rate(f'ray_vllm_{metric}_bucket', 'le')})",
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
            "count:tokens",
            "Speculative length of each replica's latest step; 0 = speculation off.",
        ),
        Panel(
            "Steps by gamma",
            (Target(_sum_rate("ray_nightjar_steps_total", "gamma"), "gamma={{gamma}}"),),
            "count:steps/s",
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
            TOKENS_PER_S,
            "Tokens per second of the steps the policy learned from (its reward, tokens/s).",
        ),
        Panel(
            "Policy decisions",
            (Target(_sum_rate("ray_nightjar_decisions_total", "mode"), "{{mode}}"),),
            "count:decisions/s",
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
            "count:requests/step",
            "Requests per step the draft ran over (eligible) and skipped (ineligible: their "
            "speculation would not earn back the draft prefill or catch-up they owe).",
        ),
        Panel(
            "Draft acceptance rate",
            (
                Target(
                    f"{_vllm_rate('ray_vllm_spec_decode_num_accepted_tokens_total')} / "
                    f"{_vllm_rate('ray_vllm_spec_decode_num_draft_tokens_total')}",
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
                    f"1 + {_vllm_rate('ray_vllm_spec_decode_num_accepted_tokens_total')} / "
                    f"{_vllm_rate('ray_vllm_spec_decode_num_drafts_total')}",
                    "tokens per speculative step",
                ),
            ),
            "count:tokens/step",
            "Mean tokens emitted per speculative step (1 + accepted per draft).",
        ),
        Panel(
            "Acceptance by draft position",
            (
                Target(
                    _vllm_rate("ray_vllm_spec_decode_num_accepted_tokens_per_pos_total", "position")
                    + " / ignoring (position) group_left "
                    + _vllm_rate("ray_vllm_spec_decode_num_drafts_total"),
                    "position {{position}}",
                ),
            ),
            "percentunit",
            "Accepted tokens at each draft position per draft (vLLM's per-position counter). "
            "Drafts shorter than a position count as not accepted there, so the late "
            "positions also fall when the policy picks a smaller gamma.",
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
                    "percentunit",
                ),
            ),
            "count:switches/s",
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
            "count:requests",
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
            "count:blocks",
            "Free KV blocks against the tau_low line; below it the draft may be offloaded.",
        ),
        Panel(
            "Draft residency",
            (Target(f"max by (replica) (ray_nightjar_draft_resident{{{NJ}}})", "{{replica}}"),),
            "bool_yes_no",
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
                    "percentunit",
                ),
            ),
            "count:events",
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
                    _vllm_rate("ray_vllm_request_success_total", "finished_reason"),
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
                    _vllm_rate("ray_vllm_generation_tokens_total", "ReplicaId"),
                    "{{ReplicaId}}",
                ),
            ),
            TOKENS_PER_S,
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
            "count:syncs/s",
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

VARIABLE_DEFAULTS = {
    "namespace": ".*",
    "ray_io_cluster": ".*",
    "deployment": ".+",
    "replica": ".+",
    "tau_low": "0.1",
}
"""Every variable's "All" value (``.*`` where a local scrape lacks the label)."""


def all_panels() -> tuple[Panel, ...]:
    return tuple(p for row in ROWS for p in row.panels)


def expand(expr: str, rate_interval: str = "1m", **values: str) -> str:
    """``expr`` with the dashboard's variables replaced (defaults: every series, 0.1)."""
    merged = {**VARIABLE_DEFAULTS, **values}
    out = expr.replace("$__rate_interval", rate_interval)
    for name in sorted(merged, key=len, reverse=True):
        out = out.replace(f"${name}", merged[name])
    return out
