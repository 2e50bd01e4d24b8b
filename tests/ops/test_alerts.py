"""The chart's alert rules under `promtool` (Debian's prometheus package): they load, and
each fires on synthetic series that should fire it and stays silent on those that should
not (tests/ops/alerts_test.yaml)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import render, tool

TESTS = Path(__file__).parent / "alerts_test.yaml"


def _rule_groups(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    (rule,) = render(values)["PrometheusRule"]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _with_descriptions(tests: dict[str, Any], groups: list[dict[str, Any]]) -> dict[str, Any]:
    described = {r["alert"]: r["annotations"]["description"] for g in groups for r in g["rules"]}
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            for alert in check["exp_alerts"]:
                alert["exp_annotations"]["description"] = described[check["alertname"]]
    return tests


def _promtool(tmp_path: Path, groups: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = _with_descriptions(yaml.safe_load(TESTS.read_text()), groups)
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    return subprocess.run(
        [tool("promtool"), "test", "rules", "tests.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_rules_load(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": _rule_groups()}))
    done = subprocess.run(
        [tool("promtool"), "check", "rules", str(tmp_path / "rules.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "SUCCESS: 5 rules found" in done.stdout


def test_alerts_fire_when_they_should_and_only_then(tmp_path: Path) -> None:
    done = _promtool(tmp_path, _rule_groups())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize(
    ("values", "alert"),
    [
        ({"kvFreeLowFraction": 0.01}, "NightjarKVFreeBelowTauLow"),
        ({"draftThrashEvents15m": 100}, "NightjarDraftThrashing"),
        ({"speculatingStepShare": 0.95}, "NightjarQueueGrowingWhileSpeculating"),
        ({"policySyncStaleSeconds": 1000}, "NightjarPolicySyncStale"),
    ],
)
def test_thresholds_change_what_fires(tmp_path: Path, values: dict[str, Any], alert: str) -> None:
    """With a looser threshold the same series no longer fire: the tests can fail."""
    done = _promtool(tmp_path, _rule_groups({"monitoring": {"prometheusRule": values}}))
    assert done.returncode != 0
    assert f"alertname: {alert}" in done.stdout + done.stderr
