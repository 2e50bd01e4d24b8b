"""The Grafana dashboard: committed files equal the generator's output, the JSON model is
well formed, and provisioning speaks Grafana's HTTP API (against a local stub of the two
endpoints it calls)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from nightjar_ray.cli.main import main
from nightjar_ray.ops.artifacts import ARTIFACTS, stale_artifacts, write_artifacts
from nightjar_ray.ops.grafana import UID, build_dashboard
from nightjar_ray.ops.panels import all_panels, expand
from nightjar_ray.ops.provision import FOLDER_UID, provision

from .conftest import ROOT


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
    assert variables == {"datasource", "deployment", "replica", "tau_low"}
    for p in panels:
        for t in p.get("targets", []):
            used = set(re.findall(r"\$(\w+)", t["expr"])) - {"__rate_interval"}
            assert used <= variables, (p["title"], used)
            assert "$" not in expand(t["expr"])


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
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

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
