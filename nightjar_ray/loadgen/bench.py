"""The side-by-side benchmark: contenders, scenarios, interleaved paired rounds.

Every contender is its own Serve application (same model pair, a different ``nightjar.policy``)
under route ``/<name>``; only one is under load at a time. Each round draws one request list
per scenario (seed = round) and runs every contender on it, in a shuffled order; the report
divides each contender's throughput and mean E2E latency by ``off``'s of the same round.
``off-aa`` is a second ``off``: its ratios are the A/A control (what the machine's noise
alone produces).

More contenders than the host holds at once run in *waves* (``plan_waves``): each wave
deploys ``off`` and ``off-aa`` again next to a share of the others and runs its own rounds,
and every run is paired with the ``off`` run of its own wave and round, never another's.

A contender is an :class:`Endpoint`: the local apps' routes, or deployments the user
already runs (one URL and served model each; the one named ``off`` is the baseline).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from nightjar_ray.loadgen.client import RunResult, open_session, run_open_loop, served_models
from nightjar_ray.loadgen.summary import summarize
from nightjar_ray.loadgen.workload import (
    LengthRange,
    TraceScaling,
    mixed_requests,
    scale_segment,
    synthetic_requests,
    trace_requests,
)
from nightjar_ray.workload import RequestSpec
from nightjar_ray.workload.arrivals import Step, poisson
from nightjar_ray.workload.trace import read_trace

BASELINE = "off"
CONTROL = "off-aa"
CONTENDERS: dict[str, tuple[str, dict[str, Any]]] = {
    "nightjar": ("nightjar", {}),
    "nightjar-elastic": ("nightjar", {}),
    "nightjar-resident": ("nightjar", {}),
    "nightjar-paper": ("nightjar-paper", {}),
    "nightjar-step-gate": ("nightjar", {}),
    "off": ("off", {}),
    "fixed-1": ("fixed", {"gamma": 1}),
    "fixed-2": ("fixed", {"gamma": 2}),
    "fixed-3": ("fixed", {"gamma": 3}),
    "fixed-4": ("fixed", {"gamma": 4}),
    "vllm-static": ("vllm-static", {}),
    "dsd": ("dsd", {}),
    "ucbspec": ("ucbspec", {}),
    CONTROL: ("off", {}),
}
"""name -> (policy, policy_params) of the ``nightjar:`` block."""
CONTENDER_EXTRAS: dict[str, dict[str, Any]] = {
    "nightjar-elastic": {"elastic_memory": {"enabled": True}},
    "nightjar-resident": {"elastic_memory": {"enabled": False}},
    "nightjar-step-gate": {"testing": {"policy_overrides": {"draft_gate_scope": "step"}}},
}
"""name -> further ``nightjar:`` fields (the rest of the block is the main job's)."""


@dataclass(frozen=True)
class Scenario:
    """A named request generator; ``capacity_rps`` scales its rates to the machine."""

    name: str
    description: str
    build: Callable[[float, int, float, int], list[RequestSpec]]
    """(capacity_rps, seed, duration_s, vocab_size) -> requests."""


def _poisson(share: float, prompt: LengthRange, output: LengthRange) -> Callable[..., Any]:
    def build(capacity: float, seed: int, duration: float, vocab: int) -> list[RequestSpec]:
        rng = random.Random(seed)
        return synthetic_requests(poisson(share * capacity), duration, prompt, output, vocab, rng)

    return build


def _burst(capacity: float, seed: int, duration: float, vocab: int) -> list[RequestSpec]:
    phase = max(duration / 4, 1.0)
    arrivals = Step(((phase, 0.3 * capacity), (phase, 1.5 * capacity)))
    rng = random.Random(seed)
    return synthetic_requests(arrivals, duration, CHAT_PROMPT, CHAT_OUTPUT, vocab, rng)


def _mixed(capacity: float, seed: int, duration: float, vocab: int) -> list[RequestSpec]:
    rng = random.Random(seed)
    kinds = ((MIXED_LONG_PROMPT, MIXED_SHORT_OUTPUT), (CHAT_PROMPT, MIXED_LONG_OUTPUT))
    return mixed_requests(poisson(0.3 * capacity), duration, kinds, vocab, rng)


def _trace(path: Path) -> Callable[..., Any]:
    trace = read_trace(path)
    mean_rps = len(trace) / max(trace[-1].arrival_s, 1.0)

    def build(capacity: float, seed: int, duration: float, vocab: int) -> list[RequestSpec]:
        speedup = 4.0  # 4 trace-minutes per replay minute: the rate's swings show
        sample = min(1.0, 0.5 * capacity / (mean_rps * speedup))
        scaling = TraceScaling(600.0, duration, speedup, sample, 8.0, 256, 96)
        rng = random.Random(seed)
        return trace_requests(scale_segment(trace, scaling, rng), vocab, rng)

    return build


CHAT_PROMPT, CHAT_OUTPUT = LengthRange(32, 128), LengthRange(32, 96)
MIXED_LONG_PROMPT, MIXED_SHORT_OUTPUT = LengthRange(512, 1024), LengthRange(2, 8)
MIXED_LONG_OUTPUT = LengthRange(96, 192)


def scenarios(trace_path: Path | None = None) -> dict[str, Scenario]:
    """Every scenario; ``trace`` only when the trace CSV is given."""
    out = dict(SCENARIOS)
    if trace_path is not None:
        out["trace"] = Scenario(
            "trace",
            "conversation trace from 600 s, 4x faster, sampled to 0.5x capacity on average,"
            " tokens / 8",
            _trace(trace_path),
        )
    return out


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("low", "Poisson at 0.2x capacity", _poisson(0.2, CHAT_PROMPT, CHAT_OUTPUT)),
        Scenario("medium", "Poisson at 0.5x capacity", _poisson(0.5, CHAT_PROMPT, CHAT_OUTPUT)),
        Scenario("high", "Poisson at 0.9x capacity", _poisson(0.9, CHAT_PROMPT, CHAT_OUTPUT)),
        Scenario("burst", "on/off: 0.3x then 1.5x capacity", _burst),
        Scenario(
            "prefill-heavy",
            "Poisson at 0.2x capacity, prompts 512-1024, outputs 8-16",
            # NOTE: capacity is measured on the chat mix; prompts ~10x longer make a
            # request's prefill cost several chat requests', so 0.5x would overload.
            _poisson(0.2, LengthRange(512, 1024), LengthRange(8, 16)),
        ),
        Scenario(
            "mixed",
            "Poisson at 0.3x capacity, per request a coin: prompt 512-1024 with output 2-8,"
            " or prompt 32-128 with output 96-192",
            _mixed,
        ),
    )
}


WAVE, ROUND = "bench_wave", "bench_round"
"""Keys each run's summary is tagged with: the wave and the round it ran in."""


@dataclass
class BenchResult:
    """Per scenario, per contender: one summary per run (``vllm bench serve`` names), each
    tagged with its wave and round (``WAVE``, ``ROUND``)."""

    summaries: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)

    def add(
        self, scenario: str, contender: str, summary: dict[str, Any], wave: int = 0, rnd: int = 0
    ) -> None:
        tagged = {**summary, WAVE: wave, ROUND: rnd}
        self.summaries.setdefault(scenario, {}).setdefault(contender, []).append(tagged)

    def paired(self, scenario: str, contender: str, key: str) -> tuple[list[float], list[float]]:
        """``key`` of each run of ``contender`` and of the ``off`` run of the same wave and
        round (runs without an ``off`` partner are left out)."""
        base = {_run_id(s): float(s[key]) for s in self.summaries[scenario][BASELINE]}
        pairs = [
            (float(s[key]), base[_run_id(s)])
            for s in self.summaries[scenario].get(contender, [])
            if _run_id(s) in base
        ]
        return [c for c, _ in pairs], [b for _, b in pairs]

    def num_waves(self) -> int:
        """1 + the highest wave of any run (0 when empty)."""
        waves = [int(s[WAVE]) for by in self.summaries.values() for r in by.values() for s in r]
        return 1 + max(waves) if waves else 0

    def merge(self, other: BenchResult) -> None:
        """Append ``other``'s runs as further waves (its wave ``w`` becomes
        ``self.num_waves() + w``); its pairs stay its own."""
        offset = self.num_waves()
        for scenario, by in other.summaries.items():
            for contender, runs in by.items():
                for s in runs:
                    self.add(scenario, contender, s, offset + int(s[WAVE]), int(s[ROUND]))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchResult:
        """A saved ``bench-serve.json`` (``meta`` is skipped). A run without wave and
        round tags is wave 0, its round its position in the list."""
        out = cls()
        for scenario, by in data.items():
            if scenario == "meta":
                continue
            for contender, runs in by.items():
                for i, s in enumerate(runs):
                    out.add(scenario, contender, s, int(s.get(WAVE, 0)), int(s.get(ROUND, i)))
        return out


def _run_id(summary: dict[str, Any]) -> tuple[int, int]:
    return int(summary[WAVE]), int(summary[ROUND])


def plan_waves(contenders: list[str], max_resident: int) -> list[list[str]]:
    """Split ``contenders`` into waves of at most ``max_resident`` apps; ``off`` (and
    ``off-aa`` when asked for) are in every wave, the others in the given order."""
    fixed = [c for c in (BASELINE, CONTROL) if c in contenders]
    rest = [c for c in contenders if c not in fixed]
    share = max_resident - len(fixed)
    if BASELINE not in contenders:
        raise ValueError(f"contenders must include {BASELINE!r}")
    if share < 1 and rest:
        raise ValueError(
            f"max_resident={max_resident} leaves no room beside {fixed}: at least"
            f" {len(fixed) + 1} apps must be resident"
        )
    if not rest:
        return [fixed]
    return [fixed + rest[i : i + share] for i in range(0, len(rest), share)]


Runner = Callable[[str, list[RequestSpec]], RunResult]
"""(contender, requests) -> the run's result."""


@dataclass(frozen=True)
class Endpoint:
    """One contender's OpenAI-compatible server: ``url`` is the base the ``/v1/...`` paths
    go under (with a route prefix, if any); ``model`` the served model's name, ``None``
    until asked of ``/v1/models`` (:func:`with_served_models`)."""

    name: str
    url: str
    model: str | None = None


def parse_endpoint(value: str) -> Endpoint:
    """``NAME=URL`` or ``NAME=URL,MODEL``; a ``ValueError`` saying the form otherwise."""
    name, sep, rest = value.partition("=")
    url, _, model = rest.partition(",")
    if not sep or not name.strip() or not url.startswith(("http://", "https://")):
        raise ValueError(f"expected NAME=URL or NAME=URL,MODEL with an http(s) URL, got {value!r}")
    return Endpoint(name.strip(), url.rstrip("/"), model.strip() or None)


async def served_model(session: aiohttp.ClientSession, url: str) -> str:
    """The one model ``{url}/v1/models`` lists; a ``ValueError`` when it lists none or
    several (name one then) or does not answer with a model list."""
    ids = await served_models(session, url)
    if len(ids) != 1:
        raise ValueError(f"{url}/v1/models lists {ids}: name the model as NAME=URL,MODEL")
    return ids[0]


async def _with_served_models(
    endpoints: list[Endpoint], headers: Mapping[str, str]
) -> list[Endpoint]:
    out = []
    async with open_session(30.0, headers) as session:
        for e in endpoints:
            model = e.model or await served_model(session, e.url)
            out.append(Endpoint(e.name, e.url, model))
    return out


def with_served_models(
    endpoints: list[Endpoint], headers: Mapping[str, str] | None = None
) -> list[Endpoint]:
    """``endpoints`` with each missing model asked of its ``/v1/models``; a ``ValueError``
    naming the endpoint that cannot say."""
    return asyncio.run(_with_served_models(endpoints, headers or {}))


def endpoint_runner(
    endpoints: Mapping[str, Endpoint], headers: Mapping[str, str] | None = None
) -> Runner:
    """Runs a contender's requests against its endpoint, ``headers`` on each request."""

    def run(contender: str, requests: list[RequestSpec]) -> RunResult:
        e = endpoints[contender]
        if e.model is None:
            raise ValueError(f"endpoint {e.name}: no model (see with_served_models)")
        return asyncio.run(run_open_loop(e.url, e.model, requests, headers=headers))

    return run


def run_rounds(
    runner: Runner,
    contenders: list[str],
    scenarios: list[Scenario],
    num_rounds: int,
    capacity_rps: float,
    duration_s: float,
    vocab_size: int,
    on_run: Callable[[int, str, str, dict[str, Any]], None] = lambda *a: None,
    result: BenchResult | None = None,
    wave: int = 0,
) -> BenchResult:
    """Interleaved rounds: every contender runs each round's requests, in a shuffled order.
    Runs are added to ``result`` (a new one by default), tagged with ``wave``."""
    result = BenchResult() if result is None else result
    for rnd in range(num_rounds):
        order = random.Random(1000 + rnd).sample(contenders, len(contenders))
        for scenario in scenarios:
            requests = scenario.build(capacity_rps, rnd, duration_s, vocab_size)
            for contender in order:
                summary = summarize(runner(contender, requests))
                result.add(scenario.name, contender, summary, wave, rnd)
                on_run(rnd, scenario.name, contender, summary)
    return result
