"""Grafana dashboard JSON from :mod:`nightjar_ray.ops.panels` (classic JSON model).

The committed files (``dashboards/nightjar-ray.json`` and the Helm chart's copy) are this
module's output; a test keeps them equal. ``nightjar-ray dashboards generate`` rewrites them.
"""

from __future__ import annotations

import json
from typing import Any

from nightjar_ray.ops.panels import ANNOTATIONS, ROWS, SCOPE, Panel, Row

UID = "nightjar-ray"
TITLE = "nightjar-ray: load-adaptive speculative decoding"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
COLUMNS = 24
PANEL_WIDTH = 8
PANEL_HEIGHT = 8


def _variables() -> list[dict[str, Any]]:
    def query_var(name: str, query: str, all_value: str = ".+") -> dict[str, Any]:
        return {
            "name": name,
            "label": name,
            "type": "query",
            "datasource": DATASOURCE,
            "query": {"query": query, "refId": f"{name}-values"},
            "definition": query,
            "refresh": 2,
            "includeAll": True,
            "allValue": all_value,
            "multi": True,
            "current": {"text": "All", "value": "$__all"},
            "sort": 1,
        }

    return [
        {
            "name": "datasource",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
        },
        # .* matches series without the label (a Prometheus outside Kubernetes)
        query_var("namespace", "label_values(ray_nightjar_steps_total, namespace)", ".*"),
        query_var(
            "ray_io_cluster",
            'label_values(ray_nightjar_steps_total{namespace=~"$namespace"}, ray_io_cluster)',
            ".*",
        ),
        query_var("deployment", f"label_values(ray_nightjar_steps_total{{{SCOPE}}}, deployment)"),
        query_var(
            "replica",
            "label_values(ray_nightjar_steps_total"
            f'{{{SCOPE}, deployment=~"$deployment"}}, replica)',
        ),
        {
            "name": "tau_low",
            "label": "tau_low (fraction of KV blocks)",
            "type": "custom",
            "query": "0.05,0.1,0.2",
            "current": {"text": "0.1", "value": "0.1"},
            "options": [
                {"text": v, "value": v, "selected": v == "0.1"} for v in ("0.05", "0.1", "0.2")
            ],
        },
    ]


def _annotations() -> list[dict[str, Any]]:
    return [
        {
            "name": f"draft {a.name}",
            "datasource": DATASOURCE,
            "enable": True,
            "expr": a.expr,
            "iconColor": a.color,
            "step": "15s",
            "titleFormat": f"draft {a.name}",
            "textFormat": "{{replica}}",
            "useValueForTime": False,
        }
        for a in ANNOTATIONS
    ]


def _ref_id(index: int) -> str:
    return chr(ord("A") + index)


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    custom: dict[str, Any] = {
        "drawStyle": "bars" if panel.kind == "bars" else "line",
        "fillOpacity": 30 if panel.stacked or panel.kind == "bars" else 0,
        "lineWidth": 1,
        "stacking": {"mode": "normal" if panel.stacked else "none", "group": "A"},
    }
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": PANEL_HEIGHT, "w": PANEL_WIDTH, "x": x, "y": y},
        "fieldConfig": {
            "defaults": {"unit": panel.unit, "custom": custom},
            "overrides": [
                {
                    "matcher": {"id": "byFrameRefID", "options": _ref_id(i)},
                    "properties": [{"id": "unit", "value": t.unit}],
                }
                for i, t in enumerate(panel.targets)
                if t.unit is not None
            ],
        },
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": [
            {
                "datasource": DATASOURCE,
                "expr": t.expr,
                "legendFormat": t.legend,
                "refId": _ref_id(i),
            }
            for i, t in enumerate(panel.targets)
        ],
    }


def _row_panels(row: Row, first_id: int, y: int) -> tuple[list[dict[str, Any]], int]:
    out: list[dict[str, Any]] = [
        {
            "id": first_id,
            "type": "row",
            "title": row.title,
            "collapsed": False,
            "gridPos": {"h": 1, "w": COLUMNS, "x": 0, "y": y},
            "panels": [],
        }
    ]
    y += 1
    for i, panel in enumerate(row.panels):
        x = (i * PANEL_WIDTH) % COLUMNS
        if i and x == 0:
            y += PANEL_HEIGHT
        out.append(_panel(panel, first_id + 1 + i, x, y))
    return out, y + PANEL_HEIGHT


def build_dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (deterministic)."""
    panels: list[dict[str, Any]] = []
    y = 0
    for row in ROWS:
        row_panels, y = _row_panels(row, len(panels) + 1, y)
        panels.extend(row_panels)
    return {
        "uid": UID,
        "title": TITLE,
        "description": "Nightjar on Ray Serve: gamma, goodput, memory, latency, policy pool.",
        "tags": ["nightjar-ray", "ray-serve", "vllm"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "10s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-30m", "to": "now"},
        "templating": {"list": _variables()},
        "annotations": {"list": _annotations()},
        "panels": panels,
    }


def dashboard_json() -> str:
    """The committed file's text."""
    return json.dumps(build_dashboard(), indent=2, sort_keys=True) + "\n"
