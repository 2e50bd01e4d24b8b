"""The Grafana dashboard: committed files equal the generator's output, the JSON model is
well formed, and provisioning speaks Grafana's HTTP API (against a local stub of the two
endpoints it calls)."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from nightjar_ray.cli.main import main
from nightjar_ray.ops.artifacts import ARTIFACTS, stale_artifacts, write_artifacts
from nightjar_ray.ops.grafana import UID, build_dashboard
from nightjar_ray.ops.panels import (
    ANNOTATIONS,
    OUR_REPLICAS,
    TOKENS_PER_S,
    VARIABLE_DEFAULTS,
    VLLM_JOIN,
    all_panels,
    expand,
)
from nightjar_ray.ops.provision import FOLDER_UID, provision
from tests.support import reply

from .conftest import ROOT, tool


def test_committed_files_equal_the_generated_ones() -> None:
    assert stale_artifacts(ROOT) == []
    assert main(["dashboards", "generate", "--check", "--root", str(ROOT)]) == 0


def test_check_reports_a_stale_file(tmp_path: Path) -> None:
    write_artifacts(tmp_path)
    assert stale_artifacts(tmp_path) == []
    path = tmp_path / ARTIFACTS[0][0]
    path.write_text(path.read_text().replace("Step goodput", "Step goodput (edited)"))
    assert stale_artifacts(tmp_path) == [ARTIFACTS[0][0]]
    assert main(["dashboards", "generate", "--check", "--root", str(tmp_path)]) == 1


def test_dashboard_model() -> None:
    dash = build_dashboard()
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in panels:
        pos = p["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, p["title"]
                cells.add((x, y))
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert variables == {
        "datasource", "namespace", "ray_io_cluster", "deployment", "replica", "tau_low"
    }  # fmt: skip
    for v in dash["templating"]["list"]:
        if v["type"] == "query":  # Grafana's "All" is what expand() substitutes
            assert v["allValue"] == VARIABLE_DEFAULTS[v["name"]], v["name"]
    for p in panels:
        for t in p.get("targets", []):
            used = set(re.findall(r"\$([A-Za-z_]\w*)", t["expr"])) - {"__rate_interval"}
            assert used <= variables, (p["title"], used)
            assert not re.search(r"\$[A-Za-z_]", expand(t["expr"]))  # $1: label_replace's


def test_dashboard_shows_what_an_operator_needs() -> None:
    exprs = " ".join(t.expr for p in all_panels() for t in p.targets)
    for series in (
        "ray_nightjar_gamma",
        "ray_nightjar_steps_total",
        "ray_nightjar_goodput_tokens_total",
        "ray_vllm_spec_decode_num_accepted_tokens_total",
        "ray_nightjar_waiting_requests",
        "ray_nightjar_kv_free_blocks",
        "$tau_low",
        "ray_nightjar_draft_resident",
        "ray_nightjar_memory_events_total",
        "ray_vllm_time_to_first_token_seconds_bucket",
        "ray_vllm_request_time_per_output_token_seconds_bucket",
        "ray_vllm_e2e_request_latency_seconds_bucket",
        "ray_vllm_request_success_total",
        "sum by (ReplicaId)",
        "ray_nightjar_policy_sync_age_seconds",
    ):
        assert series in exprs, series
    annotations = build_dashboard()["annotations"]["list"]
    assert {a["name"] for a in annotations} == {
        f"draft {k}" for k in ("offload", "reload", "expand", "contract")
    }


SELECTOR = re.compile(r"(ray_\w+)\{([^}]*)\}")


def _exprs() -> list[tuple[str, str]]:
    """(panel title, query) of every panel target, annotation and variable query."""
    variables = [v for v in build_dashboard()["templating"]["list"] if v["type"] == "query"]
    return (
        [(p.title, t.expr) for p in all_panels() for t in p.targets]
        + [(a.name, a.expr) for a in ANNOTATIONS]
        + [(v["name"], v["definition"]) for v in variables if "{" in v["definition"]]
    )


def test_every_selector_is_scoped_to_namespace_and_cluster() -> None:
    for title, expr in _exprs():
        for metric, matchers in SELECTOR.findall(expr):
            assert 'namespace=~"$namespace"' in matchers, (title, metric)
            if title != "ray_io_cluster":  # the variable's own query lists every cluster
                assert 'ray_io_cluster=~"$ray_io_cluster"' in matchers, (title, metric)


def test_vllm_series_are_filtered_by_deployment() -> None:
    """vLLM's series have no deployment label: each is joined with our replicas of the
    selected deployments (``ReplicaId``/``model_name`` made from ``replica``/``model``)."""
    join = f"and on ({VLLM_JOIN}) {OUR_REPLICAS}"
    assert '"ReplicaId", "$1", "replica", "(.+)"' in OUR_REPLICAS
    assert '"model_name", "$1", "model", "(.+)"' in OUR_REPLICAS
    assert 'deployment=~"$deployment"' in OUR_REPLICAS
    for title, expr in _exprs():
        vllm = [m for m, _ in SELECTOR.findall(expr) if m.startswith("ray_vllm_")]
        assert expr.count(join) == len(vllm), title


def test_units_say_what_is_counted() -> None:
    units = {p.title: p.unit for p in all_panels()}
    overrides = [t.unit for p in all_panels() for t in p.targets if t.unit]
    assert "short" not in units.values()
    assert units["Step goodput"] == units["Output tokens by replica"] == TOKENS_PER_S
    builtin = {"s", "reqps", "percentunit", "bool_yes_no"}
    for unit in [*units.values(), *overrides]:
        assert unit in builtin or re.fullmatch(r"count:[a-z]+(/[a-z]+)?", unit), unit
    (panel,) = [p for p in build_dashboard()["panels"] if p["title"] == "Switches and catch-up"]
    (override,) = panel["fieldConfig"]["overrides"]
    assert override["matcher"] == {"id": "byFrameRefID", "options": "B"}
    assert override["properties"] == [{"id": "unit", "value": "percentunit"}]


def test_per_position_acceptance_panel() -> None:
    (panel,) = [p for p in all_panels() if p.title == "Acceptance by draft position"]
    (target,) = panel.targets
    assert "ray_vllm_spec_decode_num_accepted_tokens_per_pos_total" in target.expr
    assert "sum by (position)" in target.expr and "{{position}}" in target.legend
    assert panel.unit == "percentunit"


def test_every_query_parses(tmp_path: Path) -> None:
    """Prometheus's own parser (promtool) accepts every expanded query."""
    rules = [
        {"record": f"nightjar:q{i}", "expr": expand(expr, "1m")}
        for i, (_, expr) in enumerate(_exprs())
        if not expr.startswith("label_values")
    ]
    (tmp_path / "rules.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "q", "rules": rules}]})
    )
    done = subprocess.run(
        [tool("promtool"), "check", "rules", str(tmp_path / "rules.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


class _GrafanaStub(BaseHTTPRequestHandler):
    """POST /api/folders and POST /api/dashboards/db, as Grafana answers them."""

    requests: ClassVar[list[tuple[str, str, Any]]] = []
    folders: ClassVar[set[str]] = set()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append((self.path, self.headers.get("Authorization", ""), body))
        if self.path == "/api/folders":
            exists = body["uid"] in self.folders
            self.folders.add(body["uid"])
            code, answer = (
                (409, {"message": "a folder with the same uid already exists"})
                if (exists)
                else (200, {"uid": body["uid"], "title": body["title"], "id": 1})
            )
        elif self.path == "/api/dashboards/db":
            d = body["dashboard"]
            code, answer = 200, {"uid": d["uid"], "url": f"/d/{d['uid']}/x", "version": 1}
        else:
            code, answer = 404, {"message": "not found"}
        reply(self, json.dumps(answer), code)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def grafana() -> Iterator[str]:
    _GrafanaStub.requests = []
    _GrafanaStub.folders = set()
    server = HTTPServer(("127.0.0.1", 0), _GrafanaStub)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_provision_pushes_the_dashboard(grafana: str) -> None:
    results = provision(grafana, [build_dashboard()], credential="secret-token")
    assert [r.uid for r in results] == [UID]
    paths = [path for path, _, _ in _GrafanaStub.requests]
    assert paths == ["/api/folders", "/api/dashboards/db"]
    _, auth, body = _GrafanaStub.requests[1]
    assert auth == "Bearer secret-token"
    assert body["overwrite"] is True and body["folderUid"] == FOLDER_UID
    assert body["dashboard"]["uid"] == UID and body["dashboard"]["id"] is None
    assert body["dashboard"]["panels"] == build_dashboard()["panels"]


def test_provision_is_idempotent_and_the_cli_works(
    grafana: str, capsys: pytest.CaptureFixture[str]
) -> None:
    provision(grafana, [build_dashboard()])
    url = grafana.replace("http://", "http://admin:pw@")
    assert main(["dashboards", "provision", "--url", url]) == 0  # the folder exists: 409 is fine
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["uid"] == UID
    assert _GrafanaStub.requests[-1][1].startswith("Basic ")


def test_provision_reports_grafana_errors(grafana: str) -> None:
    from grafana_client.client import GrafanaClientError

    with pytest.raises(GrafanaClientError, match="404: not found"):
        provision(grafana + "/nope", [build_dashboard()])
