"""What each request asks for: arrival time, prompt (token IDs) and output length.

Prompts are token IDs (the OpenAI completions API accepts them) of exactly the requested
length, from a :class:`~nightjar_ray.loadgen.dataset.PromptSource`: dataset text cut to
length with the served model's tokenizer, or random IDs (an int ``prompts`` is the
vocabulary size of :class:`~nightjar_ray.loadgen.dataset.RandomTokens`). Outputs are
forced to their length with ``ignore_eos`` (vLLM's extension), as ``vllm bench serve``
does. Requests are synthetic (an arrival process, uniform lengths) or a segment of a
production trace (read by :func:`nightjar_ray.workload.trace.read_trace`) fitted to this
machine in three independent ways:

- **time**: ``speedup`` divides the trace's clock (2 = a 20-minute segment replays in 10);
- **rate**: ``sample`` keeps each request with that probability (seeded), which lowers the
  rate but keeps the trace's shape (its bursts and lulls) over time;
- **tokens**: ``token_scale`` divides prompt and output lengths, then clamps them to
  ``[1, max_*_tokens]``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from nightjar_ray.loadgen.dataset import PromptSource, RandomTokens
from nightjar_ray.workload import RequestSpec
from nightjar_ray.workload.arrivals import ArrivalProcess


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


@dataclass(frozen=True)
class TraceScaling:
    """How a trace segment is fitted to this machine (module docstring)."""

    offset_s: float = 0.0
    duration_s: float = 600.0
    speedup: float = 1.0
    sample: float = 1.0
    token_scale: float = 1.0
    max_prompt_tokens: int = 4096
    max_output_tokens: int = 1024

    def __post_init__(self) -> None:
        for name in ("duration_s", "speedup", "token_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"trace {name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.sample <= 1:
            raise ValueError(f"trace sample must be in (0, 1], got {self.sample}")
        if self.offset_s < 0:
            raise ValueError(f"trace offset_s must be >= 0, got {self.offset_s}")


def _source(prompts: PromptSource | int) -> PromptSource:
    return RandomTokens(prompts) if isinstance(prompts, int) else prompts


def synthetic_requests(
    arrivals: ArrivalProcess,
    duration_s: float,
    prompt_len: LengthRange,
    output_len: LengthRange,
    prompts: PromptSource | int,
    rng: random.Random,
) -> list[RequestSpec]:
    """Arrivals from ``arrivals``; lengths uniform in their ranges; prompts from
    ``prompts`` (module docstring)."""
    source, out = _source(prompts), []
    for i, t in enumerate(arrivals.times(duration_s, rng)):
        prompt = source.prompt(prompt_len.draw(rng), rng)
        out.append(RequestSpec(i, t, len(prompt), output_len.draw(rng), prompt))
    return out


def mixed_requests(
    arrivals: ArrivalProcess,
    duration_s: float,
    kinds: Sequence[tuple[LengthRange, LengthRange]],
    prompts: PromptSource | int,
    rng: random.Random,
) -> list[RequestSpec]:
    """As :func:`synthetic_requests`, each request's (prompt, output) ranges one of
    ``kinds`` drawn uniformly: kinds with different shapes share batches."""
    if not kinds:
        raise ValueError("mixed_requests needs at least one (prompt, output) kind")
    source, out = _source(prompts), []
    for i, t in enumerate(arrivals.times(duration_s, rng)):
        prompt_len, output_len = kinds[rng.randrange(len(kinds))]
        prompt = source.prompt(prompt_len.draw(rng), rng)
        out.append(RequestSpec(i, t, len(prompt), output_len.draw(rng), prompt))
    return out


def scale_segment(
    trace: Sequence[RequestSpec], scaling: TraceScaling, rng: random.Random
) -> list[RequestSpec]:
    """The replayed requests (no prompts yet): arrivals in replay seconds, lengths scaled
    and clamped, ``req_id`` renumbered from 0."""
    s = scaling
    end_s = s.offset_s + s.duration_s * s.speedup
    out: list[RequestSpec] = []
    for req in trace:
        if not s.offset_s <= req.arrival_s < end_s or rng.random() >= s.sample:
            continue
        out.append(
            RequestSpec(
                len(out),
                (req.arrival_s - s.offset_s) / s.speedup,
                _clamp(req.num_prompt_tokens / s.token_scale, s.max_prompt_tokens),
                _clamp(req.num_output_tokens / s.token_scale, s.max_output_tokens),
            )
        )
    return out


def _clamp(value: float, upper: int) -> int:
    return max(1, min(upper, round(value)))


def trace_requests(
    segment: Sequence[RequestSpec], prompts: PromptSource | int, rng: random.Random
) -> list[RequestSpec]:
    """A scaled trace segment (:func:`scale_segment`) with a prompt drawn for each request
    from ``prompts`` (module docstring)."""
    source = _source(prompts)
    return [replace(r, prompt=source.prompt(r.num_prompt_tokens, rng)) for r in segment]
