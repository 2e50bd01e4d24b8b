"""Helpers every test package shares: a free port, the shared trace, a bounded wait."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACE = REPO_ROOT.parent / "shared" / "data" / "azure_llm_inference_trace_conv_2023.csv"
"""The Azure LLM inference trace (2023, conversation), kept next to the checkout, not in it."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def shared_trace() -> Path:
    """:data:`SHARED_TRACE`; skips the calling test when the file is absent."""
    if not SHARED_TRACE.is_file():
        pytest.skip(f"the shared Azure trace is not at {SHARED_TRACE}")
    return SHARED_TRACE


def wait_until(
    predicate: Callable[[], T | None],
    timeout_s: float,
    interval_s: float = 0.5,
    message: str = "a condition",
) -> T:
    """Poll ``predicate`` every ``interval_s`` until it returns a truthy value (returned);
    raises ``AssertionError`` naming ``message`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {message}")
        time.sleep(interval_s)


def cli_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of ``nightjar-ray argv``, which must refuse it with exit code 2
    and no traceback (argparse's refusals and the commands' own alike)."""
    from nightjar_ray.cli.main import main

    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def reply(
    handler: BaseHTTPRequestHandler, body: str, code: int = 200, kind: str = "application/json"
) -> None:
    """A test stub's whole HTTP response: status, type, length and ``body``."""
    data = body.encode()
    handler.send_response(code)
    handler.send_header("Content-Type", kind)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
