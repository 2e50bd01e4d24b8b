"""Validate a rendered RayService against KubeRay's published CRD schema (fixture)."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_FILE = (
    Path(__file__).parent.parent / "fixtures" / "kuberay" / "rayservice-v1.openapi.json.gz"
)
PRESERVE = "x-kubernetes-preserve-unknown-fields"


def _strict(node: Any) -> Any:
    """Unknown fields become errors (``kubectl --validate=strict``), as the API server
    would otherwise prune them silently."""
    if isinstance(node, dict):
        node = {k: _strict(v) for k, v in node.items()}
        if "properties" in node and "additionalProperties" not in node and not node.get(PRESERVE):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


def rayservice_validator() -> jsonschema.Draft7Validator:
    schema = json.loads(gzip.decompress(SCHEMA_FILE.read_bytes()))
    return jsonschema.Draft7Validator(_strict(copy.deepcopy(schema)))


def rayservice_errors(manifest: dict[str, Any]) -> list[str]:
    """Every schema violation of ``manifest``, as ``path: message``."""
    errors = rayservice_validator().iter_errors(manifest)
    return [f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in errors]
