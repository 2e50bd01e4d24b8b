"""The chart's alert rules under `promtool` (Debian's prometheus package): they load, and
each fires on synthetic series that should fire it and stays silent on those that should
not (tests/ops/alerts_test.yaml)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import ROOT, render, tool

TESTS = Path(__file__).parent / "alerts_test.yaml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"


def _rule_groups(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    (rule,) = render(values)["PrometheusRule"]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _with_static_annotations(tests: dict[str, Any], groups: list[dict[str, Any]]) -> dict[str, Any]:
    static = ("description", "runbook_url")
    rules = {r["alert"]: r["annotations"] for g in groups for r in g["rules"]}
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            for alert in check["exp_alerts"]:
                annotations = rules[check["alertname"]]
                alert["exp_annotations"].update({k: annotations[k] for k in static})
    return tests


def _promtool(tmp_path: Path, groups: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = _with_static_annotations(yaml.safe_load(TESTS.read_text()), groups)
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
    assert "SUCCESS: 6 rules found" in done.stdout


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
        ({"metricsAbsentMinutes": 40}, "NightjarMetricsAbsent"),
        # every namespace: namespace "other"'s full KV cache and silent replica fire too
        ({"scopeToReleaseNamespace": False}, "NightjarKVFreeBelowTauLow"),
        ({"scopeToReleaseNamespace": False}, "NightjarMetricsAbsent"),
    ],
)
def test_thresholds_change_what_fires(tmp_path: Path, values: dict[str, Any], alert: str) -> None:
    """With a looser threshold (or a wider scope) the same series no longer fire as expected:
    the tests can fail."""
    done = _promtool(tmp_path, _rule_groups({"monitoring": {"prometheusRule": values}}))
    assert done.returncode != 0
    assert f"alertname: {alert}" in done.stdout + done.stderr


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#{1,6} (.+)$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_alert_links_its_runbook_section() -> None:
    base = "https://runbooks.example.com/nightjar.md"
    groups = _rule_groups({"monitoring": {"prometheusRule": {"runbookBaseUrl": base}}})
    anchors = _anchors(RUNBOOKS.read_text())
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == 6
    for rule in rules:
        url, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert url == base, rule["alert"]
        assert anchor == rule["alert"].lower() and anchor in anchors, rule["alert"]
    sections = re.findall(r"^## (Nightjar\w+)$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    assert sorted(sections) == sorted(r["alert"] for r in rules)  # one section per alert
