"""A small closed-loop streaming load for the main job (OpenAI ``/v1/completions``).

``concurrency`` workers each send one streaming request after another until the
phase's time is up; every request records its time to first token and its
inter-token gaps. (The open-loop load generator with trace replay and the
benchmark orchestration live in ``nightjar_ray.loadgen``.)
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

PROMPT_WORDS = ("def", "return", "value", "parser", "string", "import", "class", "self", "args")


@dataclass
class RequestRecord:
    """One request's outcome."""

    ok: bool
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    num_output_tokens: int = 0
    error: str = ""


@dataclass
class PhaseResult:
    """Every request of one phase and its wall time."""

    name: str
    concurrency: int
    duration_s: float = 0.0
    records: list[RequestRecord] = field(default_factory=list)

    @property
    def ok(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    @property
    def num_failed(self) -> int:
        return len(self.records) - len(self.ok)

    def output_tokens_per_s(self) -> float:
        tokens = sum(r.num_output_tokens for r in self.ok)
        return tokens / self.duration_s if self.duration_s > 0 else 0.0

    def ttft_ms(self) -> tuple[float, float]:
        """(mean, p90) time to first token in ms."""
        return _mean_p90([r.ttft_s * 1e3 for r in self.ok])

    def tpot_ms(self) -> tuple[float, float]:
        """(mean, p90) time per output token after the first, in ms."""
        values = [
            (r.e2e_s - r.ttft_s) / (r.num_output_tokens - 1) * 1e3
            for r in self.ok
            if r.num_output_tokens > 1
        ]
        return _mean_p90(values)


def _mean_p90(values: list[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    ordered = sorted(values)
    return statistics.fmean(ordered), ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def make_prompt(rng: random.Random, num_words: int) -> str:
    return " ".join(rng.choice(PROMPT_WORDS) for _ in range(num_words))


async def stream_completion(
    client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int
) -> RequestRecord:
    """One streaming greedy completion; tokens counted from the final usage chunk."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    start = time.perf_counter()
    ttft, tokens = 0.0, 0
    try:
        async with client.stream("POST", "/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                return RequestRecord(False, error=f"HTTP {resp.status_code}: {text[:200]}")
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("choices") and not ttft:
                    ttft = time.perf_counter() - start
                if chunk.get("usage"):
                    tokens = int(chunk["usage"]["completion_tokens"])
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        return RequestRecord(False, error=repr(e))
    return RequestRecord(True, ttft, time.perf_counter() - start, tokens)


async def run_phase(
    base_url: str,
    model: str,
    phase: PhaseResult,
    seconds: float,
    max_tokens: int,
    on_record: Callable[[RequestRecord], None],
    seed: int = 0,
) -> PhaseResult:
    """Closed loop: ``phase.concurrency`` workers until ``seconds`` have passed."""
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    timeout = httpx.Timeout(600.0)
    limits = httpx.Limits(max_connections=phase.concurrency + 4)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits) as client:

        async def worker(i: int) -> None:
            rng = random.Random(seed * 1000 + i)
            while time.perf_counter() < deadline:
                prompt = make_prompt(rng, rng.randint(8, 48))
                record = await stream_completion(client, model, prompt, max_tokens)
                phase.records.append(record)
                on_record(record)

        await asyncio.gather(*(worker(i) for i in range(phase.concurrency)))
    phase.duration_s = time.perf_counter() - start
    return phase
