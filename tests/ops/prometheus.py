"""A real Prometheus server (Debian's package) for the tests: scrape targets, rule files."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.support import free_port, wait_until

from .conftest import tool


@contextmanager
def prometheus_server(
    workdir: Path,
    targets: list[str],
    rule_groups: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
) -> Iterator[str]:
    """Run ``prometheus`` scraping ``targets`` every second (adding ``labels`` to every
    series, as a PodMonitor adds ``namespace``); yields its base URL."""
    static = {"targets": targets, "labels": labels or {}}
    config: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "ray", "static_configs": [static]}],
    }
    if rule_groups:
        (workdir / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups}))
        config["rule_files"] = [str(workdir / "rules.yaml")]
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (workdir / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            tool("prometheus"),
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    def ready() -> bool:
        assert proc.poll() is None, "prometheus exited; see prometheus.log"
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    wait_until(ready, 60, 0.5, "prometheus to become ready")
