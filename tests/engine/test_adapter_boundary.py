"""vLLM stays behind the adapter: only nightjar_ray/engine/ imports it, and
importing the public engine API (config, engine args) does not load it."""

from __future__ import annotations

import re
from pathlib import Path

import nightjar_ray
from tests.imports import modules_loaded_by

PACKAGE = Path(nightjar_ray.__file__).parent
VLLM_IMPORT = re.compile(r"^\s*(from|import)\s+vllm\b", re.M)


def test_only_the_engine_package_imports_vllm() -> None:
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if VLLM_IMPORT.search(p.read_text()) and p.relative_to(PACKAGE).parts[0] != "engine"
    ]
    assert offenders == []
    assert any(VLLM_IMPORT.search(p.read_text()) for p in (PACKAGE / "engine").glob("*.py"))


def test_engine_config_api_does_not_load_vllm() -> None:
    code = (
        "from nightjar_ray.engine import NightjarConfig\n"
        "NightjarConfig(policy='fixed', policy_params={'gamma': 2})"
    )
    assert modules_loaded_by(code, ("vllm",)) == []
