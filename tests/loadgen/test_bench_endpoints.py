"""``bench-serve --endpoint``: contenders that are servers the user already runs, over real
HTTP to local stub servers (a seam for the arguments and the plumbing: which server gets
which requests, model and headers; the deployed path is tests/serve/test_bench_serve.py)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.cli.main import main
from nightjar_ray.loadgen.bench import Endpoint, parse_endpoint, with_served_models
from nightjar_ray.loadgen.client import API_KEY_ENV
from tests.support import cli_error, free_port, reply


class _Server(ThreadingHTTPServer):
    """An OpenAI-style stub serving ``models``; records every request it gets."""

    def __init__(self, models: list[str]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.models = models
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _record(self, body: dict[str, Any] | None) -> None:
        with self.server.lock:
            self.server.seen.append(
                {"path": self.path, "headers": dict(self.headers), **(body or {})}
            )

    def do_GET(self) -> None:
        self._record(None)
        reply(self, json.dumps({"object": "list", "data": [{"id": m} for m in self.server.models]}))

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._record(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        n = body["max_tokens"]
        events = [{"choices": [{"index": 0, "text": "x", "finish_reason": None}]}] * (n - 1)
        events.append({"choices": [{"index": 0, "text": "x", "finish_reason": "length"}]})
        events.append({"choices": [], "usage": {"completion_tokens": n}})
        for event in events:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args: Any) -> None:
        pass


def _serve(models: list[str]) -> _Server:
    server = _Server(models)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


@pytest.fixture
def servers() -> Iterator[tuple[_Server, _Server]]:
    one, two = _serve(["served-by-one"]), _serve(["a", "b"])
    yield one, two
    one.shutdown()
    two.shutdown()


def test_endpoint_argument_forms() -> None:
    assert parse_endpoint("off=http://h:8000/") == Endpoint("off", "http://h:8000", None)
    assert parse_endpoint("nj=https://h/app,org/m") == Endpoint("nj", "https://h/app", "org/m")
    for bad in ("off", "off=h:8000", "=http://h"):
        with pytest.raises(ValueError, match="expected NAME=URL or NAME=URL,MODEL"):
            parse_endpoint(bad)


def test_the_model_is_asked_of_v1_models_unless_named(servers: tuple[_Server, _Server]) -> None:
    one, two = servers
    given = [Endpoint("off", one.url), Endpoint("nj", two.url, "b")]
    assert [e.model for e in with_served_models(given, {"X-K": "v"})] == ["served-by-one", "b"]
    assert [(s["path"], s["headers"]["X-K"]) for s in one.seen] == [("/v1/models", "v")]
    assert two.seen == []  # named: not asked
    with pytest.raises(ValueError, match=r"lists \['a', 'b'\]: name the model as NAME=URL,MODEL"):
        with_served_models([Endpoint("nj", two.url)])


def test_bench_serve_runs_paired_rounds_against_the_given_endpoints(
    servers: tuple[_Server, _Server],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    one, two = servers
    monkeypatch.setenv(API_KEY_ENV, "k-123")
    argv = ["bench-serve", "--endpoint", f"off={one.url}", "--endpoint", f"nj={two.url},b"]
    argv += ["--header", "X-Team: bench", "--capacity-rps", "40", "--rounds", "2"]
    argv += ["--duration-s", "1", "--scenarios", "low", "--out", str(tmp_path / "out")]
    monkeypatch.setattr(sys, "argv", ["nightjar-ray", *argv])
    assert main([*argv, "--report", str(tmp_path / "bench.md")]) == 0
    posts = {name: [s for s in srv.seen if s["path"] == "/v1/completions"] for name, srv in
             (("off", one), ("nj", two))}  # fmt: skip
    assert {s["model"] for s in posts["off"]} == {"served-by-one"}
    assert {s["model"] for s in posts["nj"]} == {"b"}
    for s in one.seen + two.seen:
        assert s["headers"]["Authorization"] == "Bearer k-123"
        assert s["headers"]["X-Team"] == "bench"
    # paired: both contenders got the same requests (each round's list, once each)
    prompts = {name: sorted(json.dumps(s["prompt"]) for s in p) for name, p in posts.items()}
    assert prompts["off"] == prompts["nj"] and len(prompts["off"]) > 2
    data = json.loads((tmp_path / "out" / "bench-serve.json").read_text())
    assert data["meta"]["endpoints"] == {
        "off": {"url": one.url, "model": "served-by-one"},
        "nj": {"url": two.url, "model": "b"},
    }
    assert [(r["bench_wave"], r["bench_round"]) for r in data["low"]["nj"]] == [(0, 0), (0, 1)]
    assert sum(r["completed"] for r in data["low"]["nj"]) == len(posts["nj"])
    report = (tmp_path / "bench.md").read_text()
    assert f"Endpoints `off` = {one.url} (`served-by-one`)" in report
    assert "| nj | " in report
    assert data["meta"]["host"]["cpu"] and "(bench-serve's own; the endpoints'" in report
    assert "--header '***'" in report and "X-Team" not in report
    assert "Failed requests in the whole run: 0." in capsys.readouterr().out


def test_bench_serve_endpoints_need_an_off_and_no_local_contenders(
    servers: tuple[_Server, _Server], capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = servers
    argv = ["bench-serve", "--capacity-rps", "1", "--endpoint", f"nj={one.url}"]
    assert "--endpoint: names must be distinct and one must be 'off'" in cli_error(argv, capsys)
    argv = ["bench-serve", "--endpoint", f"off={one.url}", "--contenders", "off,nightjar"]
    assert "--contenders picks local contenders" in cli_error(argv, capsys)
    argv = ["bench-serve", "--capacity-rps", "1", "--endpoint", f"off={two.url}"]
    assert f"--endpoint {two.url}/v1/models lists ['a', 'b']" in cli_error(argv, capsys)
    assert one.seen == [] and [s["path"] for s in two.seen] == ["/v1/models"]
    down = f"http://127.0.0.1:{free_port()}"
    argv = ["bench-serve", "--capacity-rps", "1", "--endpoint", f"off={down}"]
    assert f"--endpoint GET {down}/v1/models: ClientConnectorError" in cli_error(argv, capsys)
