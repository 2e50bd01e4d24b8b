"""The generated operator files and where they live in the repository.

``nightjar-ray dashboards generate`` writes them; ``--check`` (and the tests) fail when a
committed file differs from what the code generates.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nightjar_ray.ops.chart_readme import chart_readme
from nightjar_ray.ops.chart_schema import values_schema_json
from nightjar_ray.ops.grafana import dashboard_json

DASHBOARD_FILE = "nightjar-ray.json"
CHART_DIR = Path("k8s") / "nightjar-ray"
SOURCE_ROOT = Path(__file__).resolve().parents[2]
"""The checkout this package runs from: the chart README's defaults come from its
``values.yaml`` (generating the artifacts is a development step, run from a checkout)."""

ARTIFACTS: tuple[tuple[Path, Callable[[], str]], ...] = (
    (Path("dashboards") / DASHBOARD_FILE, dashboard_json),
    (CHART_DIR / "dashboards" / DASHBOARD_FILE, dashboard_json),
    (CHART_DIR / "values.schema.json", values_schema_json),
    (CHART_DIR / "README.md", lambda: chart_readme(SOURCE_ROOT / CHART_DIR)),
)
"""(path relative to the repository root, generator)."""


def stale_artifacts(root: Path) -> list[Path]:
    """Artifacts under ``root`` whose committed text differs from the generated one."""
    return [
        path
        for path, make in ARTIFACTS
        if not (root / path).is_file() or (root / path).read_text() != make()
    ]


def write_artifacts(root: Path) -> list[Path]:
    """Write every artifact under ``root``; returns the paths written."""
    for path, make in ARTIFACTS:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(make())
    return [path for path, _ in ARTIFACTS]
