"""Fixtures for every test package."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightjar_ray.workload.trace import TRACE_ENV
from tests.reference_engines import ReferenceEngines


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
