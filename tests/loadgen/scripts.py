"""Import a ``loadtest/`` script (not a package) as a module, for unit tests of its helpers."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

LOADTEST = Path(__file__).resolve().parents[2] / "loadtest"


def load_script(name: str) -> ModuleType:
    """``loadtest/<name>.py`` as a module named ``name``."""
    spec = importlib.util.spec_from_file_location(name, LOADTEST / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
