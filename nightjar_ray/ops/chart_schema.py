"""The Helm chart's ``values.schema.json``, generated from the app's own config models.

One schema, not two: each application's ``args.nightjar`` block is checked against
:class:`~nightjar_ray.engine.config.NightjarConfig`'s JSON schema (pydantic's, its
``$defs`` hoisted to the root), so ``helm install`` rejects a bad ``nightjar:`` field with
the same constraints ``serve deploy`` applies. The ``LLMConfig`` fields are checked in
the cluster by the builder (they need Ray and vLLM); the tests parse every rendered
``serveConfigV2`` through :func:`nightjar_ray.serve.config.parse_app_config`.

Every chart key carries a ``description`` (the text is in ``chart_values_doc.py``); the
chart's README is generated from them (``chart_readme.py``).
"""

from __future__ import annotations

import json
from typing import Any

from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.ops.chart_values_doc import DESCRIPTIONS

QUANTITY = {"anyOf": [{"type": "string", "pattern": r"^[0-9.]+[a-zA-Z]*$"}, {"type": "number"}]}
STRING = {"type": "string"}
BOOL = {"type": "boolean"}
ABS_PATH = {"type": "string", "pattern": "^/"}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
START_PARAMS = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}
ANY_LIST = {"type": "array", "items": {"type": "object"}}
ANY_OBJECT = {"type": "object"}
ACCESS_MODES = ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]


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
POD = {
    "nodeSelector": STRING_MAP,
    "affinity": ANY_OBJECT,
    "tolerations": ANY_LIST,
    "priorityClassName": STRING,
    "podSecurityContext": ANY_OBJECT,
    "securityContext": ANY_OBJECT,
}
"""Scheduling and security of a pod: top-level for every Ray pod, per group to override."""
CLAIM = {
    "existingClaim": STRING,
    "size": QUANTITY,
    "storageClass": STRING,
    "accessModes": {"type": "array", "minItems": 1, "items": {"enum": ACCESS_MODES}},
}
"""A PersistentVolumeClaim the chart creates, or an existing one."""


def _model_args() -> dict[str, Any]:
    # The chart mounts the snapshot volume on the head, where the policy actor runs: the
    # NightjarConfig schema plus `pooling.actor_node: head` (its default).
    on_head = {"properties": {"pooling": {"properties": {"actor_node": {"const": "head"}}}}}
    return {
        "type": "object",
        "properties": {
            "nightjar": {"allOf": [{"$ref": "#/$defs/NightjarConfig"}, on_head]},
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


def _application() -> dict[str, Any]:
    # `args` is one model (LLMConfig fields + nightjar) or Ray Serve LLM's
    # `llm_configs: [...]` with a nightjar block per model (docs/serve.md).
    models = _obj(
        {
            "llm_configs": {"type": "array", "minItems": 1, "items": _model_args()},
            "ingress_deployment_config": {"type": "object"},
            "ingress_cls_config": {"type": "object"},
        },
        ("llm_configs",),
    )
    args = {"if": {"required": ["llm_configs"]}, "then": models, "else": _model_args()}
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
            "podAnnotations": STRING_MAP,
            **POD,
        },
        ("name", "replicas", "minReplicas", "maxReplicas", "gpusPerPod", "resources"),
    )


def _monitoring() -> dict[str, Any]:
    toggle = {"enabled": BOOL, "labels": STRING_MAP}
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


def _image_and_apps() -> dict[str, Any]:
    return {
        "global": ANY_OBJECT,
        "image": _obj(
            {
                "repository": {"type": "string", "minLength": 1},
                "tag": STRING,
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
        "hfToken": _obj({"secretName": STRING, "secretKey": STRING}),
        "auth": _obj(
            {"apiKeySecret": _obj({"name": STRING, "key": {"type": "string", "minLength": 1}})}
        ),
        "env": ANY_LIST,
        "sharedMemorySize": QUANTITY,
    }


def _pods() -> dict[str, Any]:
    return {
        "serviceAccount": _obj({"create": BOOL, "name": STRING, "annotations": STRING_MAP}),
        "podAnnotations": STRING_MAP,
        **POD,
        "extraVolumes": ANY_LIST,
        "extraVolumeMounts": ANY_LIST,
        "head": _obj(
            {
                "rayStartParams": START_PARAMS,
                "resources": RESOURCES,
                "podAnnotations": STRING_MAP,
                **POD,
            }
        ),
        "workerGroups": {"type": "array", "minItems": 1, "items": _worker_group()},
        "autoscaling": _obj(
            {"enabled": BOOL, "idleTimeoutSeconds": {"type": "integer", "minimum": 0}}
        ),
    }


def _storage() -> dict[str, Any]:
    return {
        "modelCache": _obj({"enabled": BOOL, "mountPath": ABS_PATH, **CLAIM}),
        "policyPool": _obj(
            {
                "mountPath": ABS_PATH,
                "volume": ANY_OBJECT,
                "persistence": _obj({"enabled": BOOL, **CLAIM}),
            },
            ("mountPath", "volume"),
        ),
    }


def _describe(node: dict[str, Any], path: str = "") -> dict[str, Any]:
    """``node`` with each chart key's ``description`` (by dotted path, ``[]`` for list
    items) from :data:`DESCRIPTIONS`; the serveConfig's inside is left as it is."""
    props = node.get("properties")
    if props is None or path == "serveConfig":
        return node
    described = {}
    for key, sub in props.items():
        sub_path = f"{path}.{key}" if path else key
        sub = _describe(sub, sub_path)
        items = sub.get("items")
        if sub.get("type") == "array" and isinstance(items, dict):
            sub = {**sub, "items": _describe(items, f"{sub_path}[]")}
        if sub_path in DESCRIPTIONS:
            sub = {**sub, "description": DESCRIPTIONS[sub_path]}
        described[key] = sub
    return {**node, "properties": described}


def _nightjar_defs() -> dict[str, Any]:
    schema = NightjarConfig.model_json_schema()
    defs: dict[str, Any] = schema.pop("$defs", {})
    return {**defs, "NightjarConfig": schema}


def build_values_schema() -> dict[str, Any]:
    """The chart's values schema (JSON Schema draft 7, which Helm 3 and 4 both read)."""
    props = {**_image_and_apps(), **_pods(), **_storage(), "monitoring": _monitoring()}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "nightjar-ray Helm chart values",
        **_describe(_obj(props, ("image", "serveConfig", "workerGroups"))),
        "$defs": _nightjar_defs(),
    }


def values_schema_json() -> str:
    """The committed ``k8s/nightjar-ray/values.schema.json`` text."""
    return json.dumps(build_values_schema(), indent=2, sort_keys=True) + "\n"
