"""Fixtures for every test package."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reference_engines import ReferenceEngines


@pytest.fixture(scope="session")
def reference_engines() -> Iterator[ReferenceEngines]:
    """Plain engines for reference outputs, shared by the session (see the module)."""
    engines = ReferenceEngines()
    try:
        yield engines
    finally:
        engines.close()
