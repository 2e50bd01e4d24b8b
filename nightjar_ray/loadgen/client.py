"""The load generator's streaming client (aiohttp), and open-loop dispatch.

Each request streams (``/v1/completions``, greedy, ``ignore_eos``) and records when it was
sent, when each chunk with text came (TTFT, inter-token latencies per chunk, as ``vllm
bench serve`` measures them), its token counts from the final usage chunk, its text, and
its status. A failed request is a record with ``status != "ok"``, never a missing one: a
stream is ``ok`` only if it produced tokens, reached a finish reason and carried no error
event (a replica dying mid-stream ends it early or with an error).

Open loop: every request is sent at its arrival time, whatever is in flight.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from nightjar_ray.workload import RequestRecord, RequestSpec

COMPLETIONS_PATH = "/v1/completions"
MODELS_PATH = "/v1/models"
READ_BUFFER_BYTES = 2**20
"""Longest line of the event stream that is read whole (vLLM's chunks are a few hundred
bytes)."""


@dataclass
class RunResult:
    """Every record of a run, its wall-clock start (unix s) and duration."""

    records: list[RequestRecord]
    start_unix_s: float
    duration_s: float


TIMEOUT_STATUS = "timeout"
"""A request's status when the server sent no byte within the session's timeout."""


API_KEY_ENV = "NIGHTJAR_API_KEY"
"""Environment variable holding the endpoint's API key; the server requires it when set
(``serve/auth.py`` reads the same name) and every client command sends it."""


def request_headers(header_args: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """Headers every request carries: ``Authorization: Bearer $NIGHTJAR_API_KEY`` when
    that variable is set, then each ``"Name: value"`` of ``header_args`` (a ``--header``
    repeated), which wins over the key. Raises ``ValueError`` naming a malformed one."""
    headers: dict[str, str] = {}
    key = environ.get(API_KEY_ENV)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    for arg in header_args:
        name, sep, value = arg.partition(":")
        if not sep or not name.strip() or name.strip() != name.rstrip():
            raise ValueError(f"--header {arg!r}: expected 'Name: value'")
        headers[name.strip()] = value.strip()
    return headers


def open_session(
    timeout_s: float = 600.0, headers: Mapping[str, str] | None = None
) -> aiohttp.ClientSession:
    """A session for many concurrent streams: no connection limit; ``timeout_s`` to
    connect and between two reads; ``headers`` on every request (see
    :func:`request_headers`). Open it inside the event loop that uses it."""
    return aiohttp.ClientSession(
        headers=dict(headers or {}),
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, connect=timeout_s, sock_read=timeout_s),
        read_bufsize=READ_BUFFER_BYTES,
    )


def completions_url(base_url: str) -> str:
    """The completions endpoint under ``base_url`` (which may carry a route prefix)."""
    return base_url.rstrip("/") + COMPLETIONS_PATH


async def served_models(session: aiohttp.ClientSession, base_url: str) -> list[str]:
    """The model IDs ``base_url/v1/models`` lists; ``ValueError`` saying what failed."""
    url = base_url.rstrip("/") + MODELS_PATH
    try:
        async with session.get(url) as resp:
            body = await resp.text()
            if resp.status != 200:
                raise ValueError(f"GET {url}: HTTP {resp.status}: {body[:200]}")
            models = json.loads(body)["data"]
            return [str(m["id"]) for m in models]
    except (TimeoutError, aiohttp.ClientError) as e:
        raise ValueError(f"GET {url}: {e!r}") from None
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(f"GET {url}: not an OpenAI model list: {body[:200]}") from None


def _body(model: str, spec: RequestSpec, extra: dict[str, Any]) -> dict[str, Any]:
    if spec.prompt is None:
        raise ValueError(f"request {spec.req_id} has no prompt to send")
    return {
        "model": model,
        "prompt": spec.prompt if isinstance(spec.prompt, str) else list(spec.prompt),
        "max_tokens": spec.num_output_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }


@dataclass
class _Stream:
    """What one response stream showed so far; times in seconds from the run's start."""

    first_token_s: float | None = None
    last_token_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    text: str = ""
    num_prompt_tokens: int | None = None
    num_output_tokens: int = 0
    finished: bool = False
    error: str = ""

    def add(self, chunk: dict[str, Any], now_s: float) -> None:
        """One ``data:`` event of the stream, received at ``now_s``."""
        if "error" in chunk and not self.error:
            self.error = json.dumps(chunk["error"])[:500]
        choice = chunk["choices"][0] if chunk.get("choices") else {}
        if choice.get("text"):
            if self.last_token_s is None:
                self.first_token_s = now_s
            else:
                self.itl_s.append(now_s - self.last_token_s)
            self.last_token_s = now_s
            self.text += choice["text"]
        self.finished = self.finished or bool(choice.get("finish_reason"))
        if chunk.get("usage"):
            self.num_output_tokens = int(chunk["usage"]["completion_tokens"])
            if "prompt_tokens" in chunk["usage"]:
                self.num_prompt_tokens = int(chunk["usage"]["prompt_tokens"])

    def outcome(self) -> tuple[str, str]:
        """(status, error) of a stream that ended (module docstring)."""
        # NOTE: tokens that decode to no text yet (a partial UTF-8 sequence held back by
        # the detokenizer) stream as empty chunks; usage still counts them.
        streamed = self.last_token_s is not None or self.num_output_tokens > 0
        if self.error or not streamed or not self.finished:
            return "error", self.error or (
                "no tokens streamed" if not streamed else "stream cut short"
            )
        return "ok", ""


async def _read_stream(resp: aiohttp.ClientResponse, stream: _Stream, t0: float) -> None:
    async for raw in resp.content:
        line = raw.rstrip(b"\r\n")
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        stream.add(json.loads(line[6:]), time.perf_counter() - t0)


async def send(
    session: aiohttp.ClientSession,
    url: str,
    model: str,
    spec: RequestSpec,
    t0: float,
    extra: dict[str, Any] | None = None,
) -> RequestRecord:
    """Stream ``spec`` to the completions endpoint ``url`` now; times in seconds from the
    ``time.perf_counter()`` reading ``t0``. Always returns a record (failures included)."""
    body = _body(model, spec, extra or {})
    stream, finish_s = _Stream(), None
    sent_s = time.perf_counter() - t0
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                text = (await resp.read()).decode(errors="replace")
                status, error = f"http_{resp.status}", text[:500]
            else:
                await _read_stream(resp, stream, t0)
                finish_s = time.perf_counter() - t0
                status, error = stream.outcome()
    except TimeoutError as e:  # aiohttp's connect and read timeouts included
        status, error = TIMEOUT_STATUS, repr(e)[:500]
    except (
        aiohttp.ClientError,
        json.JSONDecodeError,
        KeyError,
        ValueError,
    ) as e:
        status, error = "error", repr(e)[:500]
    return RequestRecord(
        req_id=spec.req_id,
        arrival_s=spec.arrival_s,
        sent_s=sent_s,
        num_prompt_tokens=(
            spec.num_prompt_tokens if stream.num_prompt_tokens is None else stream.num_prompt_tokens
        ),
        num_output_tokens=stream.num_output_tokens,
        first_token_s=stream.first_token_s,
        finish_s=finish_s,
        status=status,
        error=error,
        max_tokens=spec.num_output_tokens,
        itl_s=tuple(stream.itl_s),
        text=stream.text,
    )


def record_json(record: RequestRecord) -> dict[str, Any]:
    """One line of ``records.jsonl`` (the load generator's keys; times in seconds)."""
    return {
        "index": record.req_id,
        "arrival_s": record.arrival_s,
        "num_prompt_tokens": record.num_prompt_tokens,
        "max_tokens": record.max_tokens,
        "status": record.status,
        "start_s": record.sent_s,
        "ttft_s": record.ttft_s,
        "e2e_s": record.e2e_s,
        "itl_s": list(record.itl_s),
        "num_output_tokens": record.num_output_tokens,
        "text": record.text or "",
        "error": record.error,
    }


async def run_open_loop(
    base_url: str,
    model: str,
    requests: list[RequestSpec],
    on_record: Callable[[RequestRecord], None] = lambda r: None,
    timeout_s: float = 600.0,
    extra_body: dict[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> RunResult:
    """Send each request at its ``arrival_s``; wait for all; records in arrival order.
    ``headers`` go on every request (:func:`request_headers`)."""
    url = completions_url(base_url)
    async with open_session(timeout_s, headers) as session:
        start_unix, t0 = time.time(), time.perf_counter()

        async def one(spec: RequestSpec) -> RequestRecord:
            await asyncio.sleep(max(0.0, spec.arrival_s - (time.perf_counter() - t0)))
            record = await send(session, url, model, spec, t0, extra_body)
            on_record(record)
            return record

        records = await asyncio.gather(*(one(s) for s in requests))
        return RunResult(list(records), start_unix, time.perf_counter() - t0)
