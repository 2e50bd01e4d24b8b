"""Replay of a timestamped production trace (Azure LLM inference trace format).

The CSV has ``TIMESTAMP, ContextTokens, GeneratedTokens`` per request
(``../shared/data/azure_llm_inference_trace_conv_2023.csv``: 19,366 conversation
requests over 58 minutes, 5.5 req/s on average, 37-507 per minute; median 1,020 prompt and
129 output tokens). A GPU-sized trace does not fit a small machine as is; a segment is
scaled in three documented ways, each independent:

- **time**: ``speedup`` divides the trace's clock (2 = a 20-minute segment replays in 10);
- **rate**: ``sample`` keeps each request with that probability (seeded), which lowers the
  rate but keeps the trace's shape (its bursts and lulls) over time;
- **tokens**: ``token_scale`` divides prompt and output lengths, then clamps them to
  ``[1, max_*_tokens]``.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


@dataclass(frozen=True)
class TraceRequest:
    """One trace row: arrival (seconds from the trace's start) and token counts."""

    arrival_s: float
    num_prompt_tokens: int
    num_output_tokens: int


@dataclass(frozen=True)
class TraceScaling:
    """How a segment is fitted to this machine (module docstring)."""

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


def load_trace(path: Path) -> list[TraceRequest]:
    """Every row of an Azure-format CSV, arrivals relative to the first row."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= set(rows[0]):
        raise ValueError(f"{path}: expected columns TIMESTAMP, ContextTokens, GeneratedTokens")
    stamps = [datetime.fromisoformat(r["TIMESTAMP"][:26]) for r in rows]
    t0 = stamps[0]
    return [
        TraceRequest((t - t0).total_seconds(), int(r["ContextTokens"]), int(r["GeneratedTokens"]))
        for t, r in zip(stamps, rows, strict=True)
    ]


def scale_segment(
    trace: list[TraceRequest], scaling: TraceScaling, rng: random.Random
) -> list[TraceRequest]:
    """The replayed requests: arrivals in replay seconds, lengths scaled and clamped."""
    s = scaling
    end_s = s.offset_s + s.duration_s * s.speedup
    out = []
    for req in trace:
        if not s.offset_s <= req.arrival_s < end_s or rng.random() >= s.sample:
            continue
        out.append(
            TraceRequest(
                (req.arrival_s - s.offset_s) / s.speedup,
                _clamp(req.num_prompt_tokens / s.token_scale, s.max_prompt_tokens),
                _clamp(req.num_output_tokens / s.token_scale, s.max_output_tokens),
            )
        )
    return out


def _clamp(value: float, upper: int) -> int:
    return max(1, min(upper, round(value)))
