"""vLLM's speculative-decoding counters over a run, read from a Prometheus endpoint.

vLLM exports ``vllm:spec_decode_num_drafts``, ``vllm:spec_decode_num_draft_tokens``,
``vllm:spec_decode_num_accepted_tokens`` (and ``..._per_pos`` by ``position``) and
``vllm:generation_tokens``, each labelled with ``model_name``. Under Ray Serve LLM the
same counters reach Ray's metrics export port as ``ray_vllm_*``, one series per replica.
:func:`parse_counts` accepts both spellings and sums the series of one model; the
figures over a run (:func:`spec_decode_figures`) are the differences between a scrape
before and one after it. Ray exports on an interval (``metrics_report_interval_ms``), so
:func:`counts_after_run` scrapes until the generated tokens cover the run's.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, fields
from urllib.parse import urlsplit

import aiohttp

COUNTER_NAMES = {
    "vllm_spec_decode_num_drafts": "num_drafts",
    "vllm_spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm_spec_decode_num_accepted_tokens": "num_accepted_tokens",
    "vllm_generation_tokens": "num_generation_tokens",
}
"""Normalised sample name (no ``ray_`` prefix, ``_`` for ``:``, no ``_total``) -> field."""
PER_POSITION = "vllm_spec_decode_num_accepted_tokens_per_pos"
MODEL_LABEL = "model_name"


@dataclass(frozen=True)
class SpecDecodeCounts:
    """Cumulative counters of one model (summed over replicas and engines), or their
    difference over a run."""

    num_drafts: float = 0.0
    """Request-steps that ran the draft (vLLM: drafts)."""
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    num_generation_tokens: float = 0.0
    """Output tokens the engines generated."""
    accepted_by_position: dict[int, float] = field(default_factory=dict)
    found: bool = False
    """Whether any spec-decode series of the model was present."""

    def minus(self, before: SpecDecodeCounts) -> SpecDecodeCounts:
        """The counts since ``before`` (a counter reset shows as a negative value)."""
        scalars = {
            f.name: getattr(self, f.name) - getattr(before, f.name)
            for f in fields(self)
            if f.name.startswith("num_")
        }
        positions = set(self.accepted_by_position) | set(before.accepted_by_position)
        by_position = {
            p: self.accepted_by_position.get(p, 0.0) - before.accepted_by_position.get(p, 0.0)
            for p in sorted(positions)
        }
        return SpecDecodeCounts(**scalars, accepted_by_position=by_position, found=self.found)


def _normalise(sample_name: str) -> str | None:
    name = sample_name.replace(":", "_")
    name = name.removeprefix("ray_")
    if name.endswith("_created") or not name.startswith("vllm_"):
        return None
    return name.removesuffix("_total")


def parse_counts(text: str, model: str | None) -> SpecDecodeCounts:
    """The counters in a Prometheus exposition ``text`` (parsed with
    ``prometheus_client``), summed over the series whose ``model_name`` is ``model``
    (every series when ``model`` is None)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals = dict.fromkeys(COUNTER_NAMES.values(), 0.0)
    by_position: dict[int, float] = {}
    found = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = _normalise(sample.name)
            if name is None or (model is not None and sample.labels.get(MODEL_LABEL) != model):
                continue
            if name == PER_POSITION:
                position = int(sample.labels["position"])
                by_position[position] = by_position.get(position, 0.0) + sample.value
            elif name in COUNTER_NAMES:
                totals[COUNTER_NAMES[name]] += sample.value
                found = found or name != "vllm_generation_tokens"
    return SpecDecodeCounts(**totals, accepted_by_position=by_position, found=found)


def spec_decode_figures(delta: SpecDecodeCounts) -> dict[str, float | int | list[float]]:
    """The summary's speculative-decoding keys for the counts over a run.

    ``vllm bench serve``'s names and definitions: ``spec_decode_acceptance_rate`` (percent
    of draft tokens accepted), ``spec_decode_acceptance_length`` (1 + accepted per draft:
    tokens a drafted request-step emits), the raw counts and the per-position rates
    (accepted at position ``k`` per draft). Ours: ``spec_decode_tokens_per_step``, output
    tokens per request-step over every step, drafted or not: each request-step emits one
    token plus the drafts it accepted, so steps = generated - accepted; steps with gamma 0
    count, which the acceptance length leaves out. No key when the model exported no
    spec-decode series; no rates when nothing was drafted over the run.
    """
    if not delta.found:
        return {}
    out: dict[str, float | int | list[float]] = {
        "spec_decode_num_drafts": int(delta.num_drafts),
        "spec_decode_draft_tokens": int(delta.num_draft_tokens),
        "spec_decode_accepted_tokens": int(delta.num_accepted_tokens),
        "server_generation_tokens": int(delta.num_generation_tokens),
    }
    if delta.num_draft_tokens > 0 and delta.num_drafts > 0:
        out["spec_decode_acceptance_rate"] = (
            100.0 * delta.num_accepted_tokens / delta.num_draft_tokens
        )
        out["spec_decode_acceptance_length"] = 1.0 + delta.num_accepted_tokens / delta.num_drafts
        out["spec_decode_per_position_acceptance_rates"] = [
            v / delta.num_drafts for _, v in sorted(delta.accepted_by_position.items())
        ]
    steps = delta.num_generation_tokens - delta.num_accepted_tokens
    if steps > 0:
        out["spec_decode_tokens_per_step"] = delta.num_generation_tokens / steps
    return out


def metrics_endpoint(url: str) -> str:
    """``url`` with ``/metrics`` appended when it names no path."""
    return url.rstrip("/") + "/metrics" if urlsplit(url).path in ("", "/") else url


async def fetch_counts(
    session: aiohttp.ClientSession, metrics_url: str, model: str | None
) -> SpecDecodeCounts:
    """One scrape of ``metrics_url`` (:func:`parse_counts`); ``ValueError`` saying what
    failed."""
    try:
        async with session.get(metrics_url) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise ValueError(f"GET {metrics_url}: HTTP {resp.status}")
    except (TimeoutError, aiohttp.ClientError) as e:
        raise ValueError(f"GET {metrics_url}: {e!r}") from None
    try:
        return parse_counts(text, model)
    except ValueError as e:
        raise ValueError(f"GET {metrics_url}: not Prometheus text ({e})") from None


async def counts_after_run(
    session: aiohttp.ClientSession,
    metrics_url: str,
    model: str | None,
    before: SpecDecodeCounts,
    num_generated_tokens: int,
    timeout_s: float,
    poll_s: float = 1.0,
) -> SpecDecodeCounts:
    """Scrape every ``poll_s`` until the model's generated tokens grew by at least
    ``num_generated_tokens`` (the run's, as its responses counted them) since ``before``,
    or until ``timeout_s`` passed; returns the last scrape."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        after = await fetch_counts(session, metrics_url, model)
        grown = after.num_generation_tokens - before.num_generation_tokens
        if grown >= num_generated_tokens or loop.time() >= deadline:
            return after
        await asyncio.sleep(poll_s)
