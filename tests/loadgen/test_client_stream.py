"""Stream parsing of the client against a local SSE stub (an extra seam; the real endpoint
is tested in tests/serve): a stream counts as ok only when it finishes cleanly."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from nightjar_ray.cli.load import PhaseResult, run_phase
from nightjar_ray.loadgen.client import TIMEOUT_STATUS, record_json, run_open_loop
from nightjar_ray.workload import RequestSpec


def _chunk(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


USAGE = {"choices": [], "usage": {"completion_tokens": 2}}
STREAMS: dict[str, list[Any]] = {
    "clean": [_chunk("a"), _chunk("b"), _chunk("", "length"), USAGE, "[DONE]"],
    "cut": [_chunk("a"), _chunk("b")],
    "error": [_chunk("a"), {"error": {"message": "replica died", "code": 500}}, "[DONE]"],
    "empty": ["[DONE]"],
    "no-text": [_chunk(""), _chunk("", "length"), USAGE, "[DONE]"],
    "late-text": [_chunk(""), _chunk("a"), _chunk("b", "length"),
                  {"choices": [], "usage": {"completion_tokens": 3, "prompt_tokens": 9}},
                  "[DONE]"],
}  # fmt: skip


class _Stub(BaseHTTPRequestHandler):
    mode: ClassVar[list[str]] = []
    bodies: ClassVar[list[dict[str, Any]]] = []
    release: ClassVar[threading.Event] = threading.Event()
    """A ``hang`` stream sends one chunk, then nothing until this is set."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append({"path": self.path, **body})
        kind = self.mode[body["max_tokens"]]
        self.send_response(200 if kind != "http" else 400)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if kind == "http":
            self.wfile.write(b'{"error": "bad"}')
            return
        if kind == "hang":
            self.wfile.write(f"data: {json.dumps(_chunk('a'))}\n\n".encode())
            self.wfile.flush()
            self.release.wait(timeout=30)
            return
        for item in STREAMS[kind]:
            data = item if isinstance(item, str) else json.dumps(item)
            self.wfile.write(f"data: {data}\n\n".encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    _Stub.bodies.clear()
    _Stub.release.clear()
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    _Stub.release.set()
    server.shutdown()


def test_only_clean_streams_are_ok(stub: str) -> None:
    _Stub.mode = ["clean", "cut", "error", "empty", "http", "no-text"]
    specs = [RequestSpec(i, 0.0, 2, i, (11, 12)) for i in range(6)]
    records = asyncio.run(run_open_loop(stub, "m", specs)).records
    clean, cut, error, empty, http, no_text = records
    # Tokens whose text the detokenizer has not released yet still finish cleanly (soak).
    assert no_text.ok and no_text.text == "" and no_text.num_output_tokens == 2
    assert no_text.ttft_s is None and no_text.tpot_s is None
    assert clean.ok and clean.text == "ab" and clean.num_output_tokens == 2
    assert clean.ttft_s is not None and len(clean.itl_s) == 1
    assert clean.first_token_s is not None and clean.finish_s is not None
    assert clean.tpot_s == pytest.approx(clean.finish_s - clean.first_token_s)  # 2 tokens
    assert (cut.status, cut.error) == ("error", "stream cut short")
    assert error.status == "error" and "replica died" in error.error
    assert (empty.status, empty.error) == ("error", "no tokens streamed")
    assert http.status == "http_400" and "bad" in http.error
    assert http.first_token_s is None and http.finish_s is None
    assert [b["prompt"] for b in _Stub.bodies] == [[11, 12]] * 6
    assert {b["path"] for b in _Stub.bodies} == {"/v1/completions"}
    assert {(b["max_tokens"], b["ignore_eos"], b["temperature"]) for b in _Stub.bodies} == {
        (i, True, 0.0) for i in range(6)
    }


def test_the_first_token_is_the_first_chunk_with_text(stub: str) -> None:
    _Stub.mode = ["late-text"] * 4
    (record,) = asyncio.run(run_open_loop(stub, "m", [RequestSpec(0, 0.0, 1, 3, (11,))])).records
    assert record.ok and record.text == "ab" and record.num_output_tokens == 3
    # The empty first chunk is neither the first token nor an inter-token gap.
    assert len(record.itl_s) == 1 and record.first_token_s is not None
    assert record.finish_s is not None and record.first_token_s <= record.finish_s
    assert record.num_prompt_tokens == 9  # the server's count, when it reports one
    assert record.tpot_s == pytest.approx((record.finish_s - record.first_token_s) / 2)


def test_records_are_written_with_the_load_generators_keys(stub: str) -> None:
    _Stub.mode = ["clean"] * 4
    (record,) = asyncio.run(run_open_loop(stub, "m", [RequestSpec(5, 0.0, 1, 2, (11,))])).records
    line = record_json(record)
    assert list(line) == [
        "index", "arrival_s", "num_prompt_tokens", "max_tokens", "status", "start_s", "ttft_s",
        "e2e_s", "itl_s", "num_output_tokens", "text", "error",
    ]  # fmt: skip
    assert (line["index"], line["max_tokens"], line["status"], line["text"]) == (5, 2, "ok", "ab")
    assert line["e2e_s"] == record.e2e_s and json.loads(json.dumps(line)) == line


def test_the_main_jobs_closed_loop_sends_text_prompts_through_the_same_client(
    stub: str,
) -> None:
    _Stub.mode = ["clean"] * 8
    phase = asyncio.run(run_phase(stub, "m", PhaseResult("low", 2), 0.2, 4, lambda r: None))
    assert phase.records and phase.num_failed == 0
    assert len({r.req_id for r in phase.records}) == len(phase.records)
    assert all(isinstance(b["prompt"], str) and b["max_tokens"] == 4 for b in _Stub.bodies)
    assert phase.output_tokens_per_s() > 0 and phase.ttft_ms()[0] > 0


def test_a_stream_that_stops_sending_ends_as_timeout_not_as_a_hang(stub: str) -> None:
    _Stub.mode = ["hang", "clean"]
    specs = [RequestSpec(i, 0.0, 1, i, (11,)) for i in range(2)]
    hung, clean = asyncio.run(run_open_loop(stub, "m", specs, timeout_s=0.5)).records
    assert hung.status == TIMEOUT_STATUS and not hung.ok and hung.text == "a"
    assert clean.ok
