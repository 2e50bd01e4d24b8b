"""The Helm chart's README, generated from its values schema and default values.

One row per chart key (``a.b``; ``a[].b`` for the items of a list): its type, its
default from ``values.yaml`` and the schema's description. ``nightjar-ray dashboards
generate`` writes it (``artifacts.py``); a test fails when the committed file is stale.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from nightjar_ray.ops.chart_schema import build_values_schema

LEAVES = ("serveConfig",)
"""Keys documented as one row (their inside is a Ray Serve config, docs/serve.md)."""
MAX_DEFAULT_CHARS = 60

INTRO = """\
# nightjar-ray Helm chart

Load-adaptive speculative decoding (Nightjar) on Ray Serve LLM and vLLM, as a KubeRay
`RayService`, with PodMonitors, alert rules and Grafana dashboards. Operating guide:
[docs/operations.md](../../docs/operations.md).

<!-- Generated from values.schema.json and values.yaml by `nightjar-ray dashboards generate`
(nightjar_ray/ops/chart_readme.py); edit those, not this file. -->

## Install

Needs the KubeRay operator (`ray.io/v1`), GPU nodes with the NVIDIA device plugin, and, for
`monitoring.*`, the Prometheus Operator's CRDs. Build the image from `k8s/Dockerfile`.

```bash
helm install nj k8s/nightjar-ray -f k8s/presets/gpu-7b.yaml \\
  --set image.repository=<registry>/nightjar-ray
```

`helm install` checks every value against `values.schema.json`: a misspelt key or a bad
`nightjar:` field fails with its path named. The chart works as a subchart (`global` is
allowed).

## Values

| key | type | default | description |
| --- | --- | --- | --- |
"""


def _type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " \\| ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"list of {_type(schema['items'])}"
    return str(kind) if isinstance(kind, str) else " or ".join(kind)


def _default(values: Any, path: str) -> str:
    node = values
    for part in path.split("."):
        key, is_item = part.removesuffix("[]"), part.endswith("[]")
        if not isinstance(node, dict) or key not in node:
            return ""
        node = node[key]
        if is_item:
            node = node[0] if isinstance(node, list) and node else None
    text = json.dumps(node, separators=(", ", ": "))
    return "see values.yaml" if len(text) > MAX_DEFAULT_CHARS else f"`{text}`"


def _rows(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for key, sub in schema.get("properties", {}).items():
        sub_path = f"{path}.{key}" if path else key
        yield sub_path, sub
        if sub_path in LEAVES:
            continue
        yield from _rows(sub, sub_path)
        items = sub.get("items")
        if sub.get("type") == "array" and isinstance(items, dict):
            yield from _rows(items, f"{sub_path}[]")


def undescribed_keys(schema: dict[str, Any]) -> list[str]:
    """Chart keys whose schema has no description."""
    return [path for path, sub in _rows(schema) if not sub.get("description")]


def chart_readme_md(schema: dict[str, Any], values: dict[str, Any]) -> str:
    """The README text for ``schema`` (the chart's values schema) and ``values`` (its
    default values)."""
    lines = []
    for path, sub in _rows(schema):
        grouped = "properties" in sub and path not in LEAVES  # its keys have their rows
        default = "" if grouped else _default(values, path)
        lines.append(f"| `{path}` | {_type(sub)} | {default} | {sub.get('description', '')} |")
    return INTRO + "\n".join(line.replace("\n", " ") for line in lines) + "\n"


def chart_readme(chart_dir: Path) -> str:
    """The README of the chart in ``chart_dir`` (its ``values.yaml``, the code's schema)."""
    values = yaml.safe_load((chart_dir / "values.yaml").read_text())
    return chart_readme_md(build_values_schema(), values)
