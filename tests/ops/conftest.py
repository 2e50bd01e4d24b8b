"""Render the Helm chart with Helm's own Go SDK (helm-python-sdk; no helm binary)."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import yaml

from tests.support import REPO_ROOT

ROOT = REPO_ROOT
CHART = ROOT / "k8s" / "nightjar-ray"
PRESETS = {p.stem: p for p in sorted((ROOT / "k8s" / "presets").glob("*.yaml"))}


def render(values: dict[str, Any] | None = None, name: str = "nj") -> dict[str, list[Any]]:
    """Rendered manifests by kind (``NOTES`` holds NOTES.txt's text)."""
    import helm_python as helm

    with helm.Chart.load(CHART) as chart:
        out = chart.render(values, name=name, namespace="llm", is_install=True)
    docs: dict[str, list[Any]] = {}
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            docs["NOTES"] = [text]
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                docs.setdefault(doc["kind"], []).append(doc)
    return docs


def preset(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(PRESETS[name].read_text())
    return loaded


def tool(name: str) -> str:
    """Path of a Debian prometheus tool; `make test` installs them (make tools)."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: run `make tools` (Debian's prometheus package)")
    return path
