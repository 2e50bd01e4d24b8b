"""What each request asks for: arrival time, prompt (token IDs) and output length.

Prompts are lists of token IDs (the OpenAI completions API accepts them), so prompt
lengths are exact for any model without loading its tokenizer; outputs are forced to
their length with ``ignore_eos`` (vLLM's extension), as ``vllm bench serve`` does for its
random dataset.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from nightjar_ray.loadgen.arrivals import ArrivalProcess
from nightjar_ray.loadgen.trace import TraceRequest

FIRST_TOKEN_ID = 10
"""Token IDs are drawn from ``[FIRST_TOKEN_ID, vocab_size)`` (skips special tokens)."""


@dataclass(frozen=True)
class RequestSpec:
    """One request of a run."""

    index: int
    arrival_s: float
    prompt_token_ids: tuple[int, ...]
    max_tokens: int


@dataclass(frozen=True)
class LengthRange:
    """Uniform integer lengths in ``[low, high]``."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError(f"need 1 <= low <= high, got [{self.low}, {self.high}]")

    def draw(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)


def _prompt(rng: random.Random, num_tokens: int, vocab_size: int) -> tuple[int, ...]:
    return tuple(rng.randrange(FIRST_TOKEN_ID, vocab_size) for _ in range(num_tokens))


def synthetic_requests(
    arrivals: ArrivalProcess,
    duration_s: float,
    prompt_len: LengthRange,
    output_len: LengthRange,
    vocab_size: int,
    rng: random.Random,
) -> list[RequestSpec]:
    """Arrivals from ``arrivals``; lengths uniform in their ranges."""
    return [
        RequestSpec(i, t, _prompt(rng, prompt_len.draw(rng), vocab_size), output_len.draw(rng))
        for i, t in enumerate(arrivals.times(duration_s, rng))
    ]


def trace_requests(
    segment: list[TraceRequest], vocab_size: int, rng: random.Random
) -> list[RequestSpec]:
    """A scaled trace segment (:func:`nightjar_ray.loadgen.trace.scale_segment`)."""
    return [
        RequestSpec(
            i, r.arrival_s, _prompt(rng, r.num_prompt_tokens, vocab_size), r.num_output_tokens
        )
        for i, r in enumerate(segment)
    ]
