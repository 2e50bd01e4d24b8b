"""A small closed-loop streaming load for the main job (OpenAI ``/v1/completions``).

``concurrency`` workers each send one streaming request after another until the
phase's time is up, through the load generator's client
(:func:`nightjar_ray.loadgen.client.send`): every request records its time to first
token, its inter-token gaps and its output tokens. (The open-loop load generator with
trace replay is ``nightjar-ray loadgen``.)
"""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from nightjar_ray.loadgen.client import completions_url, open_session, send
from nightjar_ray.workload import Prompt, RequestRecord, RequestSpec

PROMPT_WORDS = ("def", "return", "value", "parser", "string", "import", "class", "self", "args")


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
        return _mean_p90([t * 1e3 for r in self.ok if (t := r.ttft_s) is not None])

    def tpot_ms(self) -> tuple[float, float]:
        """(mean, p90) time per output token after the first, in ms."""
        return _mean_p90([t * 1e3 for r in self.ok if (t := r.tpot_s) is not None])


def _mean_p90(values: list[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    ordered = sorted(values)
    return statistics.fmean(ordered), ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def make_prompt(rng: random.Random, num_words: int) -> str:
    return " ".join(rng.choice(PROMPT_WORDS) for _ in range(num_words))


def word_prompt(rng: random.Random) -> str:
    """8 to 48 words of :data:`PROMPT_WORDS` (the prompts when none are given)."""
    return make_prompt(rng, rng.randint(8, 48))


async def run_phase(
    base_url: str,
    model: str,
    phase: PhaseResult,
    seconds: float,
    max_tokens: int,
    on_record: Callable[[RequestRecord], None],
    seed: int = 0,
    prompts: Callable[[random.Random], Prompt] = word_prompt,
    headers: Mapping[str, str] | None = None,
) -> PhaseResult:
    """Closed loop: ``phase.concurrency`` workers until ``seconds`` have passed, each
    request's prompt from ``prompts`` (seeded per worker), each carrying ``headers``."""
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    url, req_ids = completions_url(base_url), itertools.count()
    async with open_session(headers=headers) as session:

        async def worker(i: int) -> None:
            rng = random.Random(seed * 1000 + i)
            while time.perf_counter() < deadline:
                prompt = prompts(rng)
                # NOTE: a text prompt's token count is the server's (the record has it).
                num_tokens = len(prompt) if isinstance(prompt, tuple) else 0
                spec = RequestSpec(
                    next(req_ids), time.perf_counter() - start, num_tokens, max_tokens, prompt
                )
                record = await send(session, url, model, spec, start)
                phase.records.append(record)
                on_record(record)

        await asyncio.gather(*(worker(i) for i in range(phase.concurrency)))
    phase.duration_s = time.perf_counter() - start
    return phase
