"""Open-loop dispatch: every request is sent at its arrival time, whatever is in flight.

Each request streams (``/v1/completions``, greedy, ``ignore_eos``) and records when it was
sent, when each chunk came (TTFT, inter-token latencies per chunk, as ``vllm bench serve``
measures them), its token counts from the final usage chunk, its text, and its status. A
failed request is a record with ``status != "ok"``, never a missing one.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from nightjar_ray.loadgen.workload import RequestSpec


@dataclass
class RequestRecord:
    """One request's outcome; times in seconds from the run's start."""

    index: int
    arrival_s: float
    num_prompt_tokens: int
    max_tokens: int
    status: str = "pending"
    """``ok``, ``http_<code>`` or ``error``."""
    start_s: float = 0.0
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    num_output_tokens: int = 0
    text: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (``vllm bench serve``'s TPOT)."""
        if not self.ok or self.num_output_tokens < 2 or self.ttft_s is None or self.e2e_s is None:
            return None
        return (self.e2e_s - self.ttft_s) / (self.num_output_tokens - 1)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunResult:
    """Every record of a run, its wall-clock start (unix s) and duration."""

    records: list[RequestRecord]
    start_unix_s: float
    duration_s: float


def _body(model: str, spec: RequestSpec, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": list(spec.prompt_token_ids),
        "max_tokens": spec.max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }


async def _stream(
    client: httpx.AsyncClient, body: dict[str, Any], record: RequestRecord, t0: float
) -> None:
    async with client.stream("POST", "/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode(errors="replace")
            record.status, record.error = f"http_{resp.status_code}", text[:500]
            return
        last, finished, error = None, False, ""
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            now = time.perf_counter() - t0
            error = error or (json.dumps(chunk["error"])[:500] if "error" in chunk else "")
            choice = chunk["choices"][0] if chunk.get("choices") else {}
            if choice.get("text"):
                if last is None:
                    record.ttft_s = now - record.start_s
                else:
                    record.itl_s.append(now - last)
                last = now
                record.text += choice["text"]
            finished = finished or bool(choice.get("finish_reason"))
            if chunk.get("usage"):
                record.num_output_tokens = int(chunk["usage"]["completion_tokens"])
        record.e2e_s = time.perf_counter() - t0 - record.start_s
        # NOTE: tokens that decode to no text yet (a partial UTF-8 sequence held back by
        # the detokenizer) stream as empty chunks; usage still counts them.
        _finish(record, last is not None or record.num_output_tokens > 0, finished, error)


def _finish(record: RequestRecord, streamed: bool, finished: bool, error: str) -> None:
    """A stream is ``ok`` only if it produced tokens, reached a finish reason and carried
    no error event (a replica dying mid-stream ends it early or with an error)."""
    if error or not streamed or not finished:
        record.status = "error"
        record.error = error or ("no tokens streamed" if not streamed else "stream cut short")
    else:
        record.status = "ok"


async def send(
    client: httpx.AsyncClient, model: str, spec: RequestSpec, t0: float, extra: dict[str, Any]
) -> RequestRecord:
    """Send ``spec`` now; always returns a record (failures included)."""
    record = RequestRecord(spec.index, spec.arrival_s, len(spec.prompt_token_ids), spec.max_tokens)
    record.start_s = time.perf_counter() - t0
    try:
        await _stream(client, _body(model, spec, extra), record, t0)
    except (httpx.HTTPError, json.JSONDecodeError, KeyError, ValueError) as e:
        record.status, record.error = "error", repr(e)[:500]
    return record


async def run_open_loop(
    base_url: str,
    model: str,
    requests: list[RequestSpec],
    on_record: Callable[[RequestRecord], None] = lambda r: None,
    timeout_s: float = 600.0,
    extra_body: dict[str, Any] | None = None,
) -> RunResult:
    """Send each request at its ``arrival_s``; wait for all; records in arrival order."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    timeout = httpx.Timeout(timeout_s)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits) as client:
        start_unix, t0 = time.time(), time.perf_counter()

        async def one(spec: RequestSpec) -> RequestRecord:
            await asyncio.sleep(max(0.0, spec.arrival_s - (time.perf_counter() - t0)))
            record = await send(client, model, spec, t0, extra_body or {})
            on_record(record)
            return record

        records = await asyncio.gather(*(one(s) for s in requests))
        return RunResult(list(records), start_unix, time.perf_counter() - t0)
