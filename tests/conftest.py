"""Fixtures for every test package."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightjar_ray.workload.trace import TRACE_ENV
from tests.reference_engines import ReferenceEngines

_EXIT_STATUS = pytest.StashKey[int]()
"""The session's exit status, for ``pytest_unconfigure``."""


@pytest.fixture(scope="session", autouse=True)
def trace_where_there_is_one() -> Iterator[None]:
    """``$NIGHTJAR_TRACE`` naming no file (the Makefile's default path on a checkout with
    no shared data beside it) counts as unset: tests that replay the trace skip, the rest
    run as without one. A test of the missing-file error sets the variable itself."""
    with pytest.MonkeyPatch.context() as mp:
        if os.environ.get(TRACE_ENV) and not Path(os.environ[TRACE_ENV]).is_file():
            mp.delenv(TRACE_ENV)
        yield


@pytest.fixture(scope="session")
def reference_engines() -> Iterator[ReferenceEngines]:
    """Plain engines for reference outputs, shared by the session (see the module)."""
    engines = ReferenceEngines()
    try:
        yield engines
    finally:
        engines.close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Once the session is reported and every plugin has unconfigured, leave with the
    session's exit status, skipping the interpreter's finalization: every fixture has shut
    its engines and Ray clusters down, and what finalization would still reap (native
    threads of Ray, vLLM, oneDNN) can crash the process after a passing run."""
    status = config.stash.get(_EXIT_STATUS, None)
    if status is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
