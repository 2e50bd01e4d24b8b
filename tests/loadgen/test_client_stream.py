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

from nightjar_ray.loadgen.client import run_open_loop
from nightjar_ray.loadgen.workload import RequestSpec


def _chunk(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


USAGE = {"choices": [], "usage": {"completion_tokens": 2}}
STREAMS: dict[str, list[Any]] = {
    "clean": [_chunk("a"), _chunk("b"), _chunk("", "length"), USAGE, "[DONE]"],
    "cut": [_chunk("a"), _chunk("b")],
    "error": [_chunk("a"), {"error": {"message": "replica died", "code": 500}}, "[DONE]"],
    "empty": ["[DONE]"],
    "no-text": [_chunk(""), _chunk("", "length"), USAGE, "[DONE]"],
}  # fmt: skip


class _Stub(BaseHTTPRequestHandler):
    mode: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        kind = self.mode[body["max_tokens"]]
        self.send_response(200 if kind != "http" else 400)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if kind == "http":
            self.wfile.write(b'{"error": "bad"}')
            return
        for item in STREAMS[kind]:
            data = item if isinstance(item, str) else json.dumps(item)
            self.wfile.write(f"data: {data}\n\n".encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_only_clean_streams_are_ok(stub: str) -> None:
    _Stub.mode = ["clean", "cut", "error", "empty", "http", "no-text"]
    specs = [RequestSpec(i, 0.0, (11, 12), i) for i in range(6)]
    records = asyncio.run(run_open_loop(stub, "m", specs)).records
    clean, cut, error, empty, http, no_text = records
    # Tokens whose text the detokenizer has not released yet still finish cleanly (soak).
    assert no_text.ok and no_text.text == "" and no_text.num_output_tokens == 2
    assert clean.ok and clean.text == "ab" and clean.num_output_tokens == 2
    assert clean.ttft_s is not None and len(clean.itl_s) == 1
    assert (cut.status, cut.error) == ("error", "stream cut short")
    assert error.status == "error" and "replica died" in error.error
    assert (empty.status, empty.error) == ("error", "no tokens streamed")
    assert http.status == "http_400" and "bad" in http.error
