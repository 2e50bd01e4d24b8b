"""The Helm chart's ``values.schema.json``, generated from the app's own config models.

One schema, not two: each application's ``args.nightjar`` block is checked against
:class:`~nightjar_ray.engine.config.NightjarConfig`'s JSON schema (pydantic's, its
``$defs`` hoisted to the root), so ``helm install`` rejects a bad ``nightjar:`` field with
the same constraints ``serve deploy`` applies. The ``LLMConfig`` fields are checked in
the cluster by the builder (they need Ray and vLLM); the tests parse every rendered
``serveConfigV2`` through :func:`nightjar_ray.serve.config.parse_app_config`.
"""

from __future__ import annotations

import json
from typing import Any

from nightjar_ray.engine.config import NightjarConfig

QUANTITY = {"anyOf": [{"type": "string", "pattern": r"^[0-9.]+[a-zA-Z]*$"}, {"type": "number"}]}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


def _obj(props: dict[str, Any], required: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = list(required)
    return {**out, **extra}


RESOURCES = _obj(
    {
        "requests": {"type": "object", "additionalProperties": QUANTITY},
        "limits": {"type": "object", "additionalProperties": QUANTITY},
    }
)
START_PARAMS = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}
ANY_LIST = {"type": "array", "items": {"type": "object"}}


def _application() -> dict[str, Any]:
    args = {
        "type": "object",
        "properties": {
            "nightjar": {"$ref": "#/$defs/NightjarConfig"},
            "model_loading_config": _obj(
                {"model_id": {"type": "string", "minLength": 1}, "model_source": {}},
                ("model_id",),
                additionalProperties=True,
            ),
            "engine_kwargs": {"type": "object"},
            "deployment_config": {"type": "object"},
        },
        "required": ["model_loading_config"],
    }
    return _obj(
        {
            "name": {"type": "string", "minLength": 1},
            "route_prefix": {"type": "string", "pattern": "^/"},
            "import_path": {"const": "nightjar_ray.serve:build_app"},
            "runtime_env": {"type": "object"},
            "args": args,
        },
        ("name", "import_path", "args"),
    )


def _worker_group() -> dict[str, Any]:
    return _obj(
        {
            "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
            "replicas": {"type": "integer", "minimum": 0},
            "minReplicas": {"type": "integer", "minimum": 0},
            "maxReplicas": {"type": "integer", "minimum": 1},
            "gpusPerPod": {"type": "integer", "minimum": 1},
            "rayStartParams": START_PARAMS,
            "resources": RESOURCES,
            "nodeSelector": STRING_MAP,
            "tolerations": ANY_LIST,
        },
        ("name", "replicas", "minReplicas", "maxReplicas", "gpusPerPod", "resources"),
    )


def _monitoring() -> dict[str, Any]:
    toggle = {"enabled": {"type": "boolean"}, "labels": STRING_MAP}
    return _obj(
        {
            "podMonitor": _obj(
                {**toggle, "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"}}
            ),
            "prometheusRule": _obj(
                {
                    **toggle,
                    "runbookBaseUrl": {"type": "string", "pattern": "^https?://[^#]+$"},
                    "scopeToReleaseNamespace": {"type": "boolean"},
                    "metricsAbsentMinutes": {"type": "integer", "minimum": 1},
                    "policySyncStaleSeconds": {"type": "number", "exclusiveMinimum": 0},
                    "draftThrashEvents15m": {"type": "integer", "minimum": 1},
                    "kvFreeLowFraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                    "speculatingStepShare": {"type": "number", "minimum": 0, "maximum": 1},
                }
            ),
            "dashboards": _obj({**toggle, "annotations": STRING_MAP}),
        }
    )


def _nightjar_defs() -> dict[str, Any]:
    schema = NightjarConfig.model_json_schema()
    defs: dict[str, Any] = schema.pop("$defs", {})
    return {**defs, "NightjarConfig": schema}


def build_values_schema() -> dict[str, Any]:
    """The chart's values schema (JSON Schema draft 7, which Helm 3 and 4 both read)."""
    props = {
        "image": _obj(
            {
                "repository": {"type": "string", "minLength": 1},
                "tag": {"type": "string"},
                "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
            },
            ("repository",),
        ),
        "imagePullSecrets": ANY_LIST,
        "rayVersion": {"type": "string", "pattern": r"^[0-9]+\.[0-9]+\.[0-9]+$"},
        "serveConfig": _obj(
            {"applications": {"type": "array", "minItems": 1, "items": _application()}},
            ("applications",),
            additionalProperties=True,
        ),
        "upgradeStrategy": {"enum": ["NewCluster", "None"]},
        "hfToken": _obj({"secretName": {"type": "string"}, "secretKey": {"type": "string"}}),
        "env": ANY_LIST,
        "sharedMemorySize": QUANTITY,
        "head": _obj(
            {
                "rayStartParams": START_PARAMS,
                "resources": RESOURCES,
                "nodeSelector": STRING_MAP,
                "tolerations": ANY_LIST,
            }
        ),
        "workerGroups": {"type": "array", "minItems": 1, "items": _worker_group()},
        "autoscaling": _obj(
            {
                "enabled": {"type": "boolean"},
                "idleTimeoutSeconds": {"type": "integer", "minimum": 0},
            }
        ),
        "policyPool": _obj(
            {"mountPath": {"type": "string", "pattern": "^/"}, "volume": {"type": "object"}},
            ("mountPath", "volume"),
        ),
        "monitoring": _monitoring(),
    }
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "nightjar-ray Helm chart values",
        **_obj(props, ("image", "serveConfig", "workerGroups")),
        "$defs": _nightjar_defs(),
    }


def values_schema_json() -> str:
    """The committed ``k8s/nightjar-ray/values.schema.json`` text."""
    return json.dumps(build_values_schema(), indent=2, sort_keys=True) + "\n"
