"""The policy research scripts run end to end (small sizes): ``policy_table.py``,
``bench_policy.py``, ``policy_regret.py``, ``train_snapshot.py``."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from benchmarks import bench_policy, policy_regret, policy_table, train_snapshot
from nightjar_ray.policy import build_policy


def test_policy_table_prints_every_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert policy_table.main(["--tokens-per-phase", "2000", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for label in ("off", "fixed g=2", "vllm-static", "dsd", "ucbspec", "exp3spec", "nightjar"):
        assert f"\n{label} " in out
    off_row = next(line for line in out.splitlines() if line.startswith("off "))
    assert off_row.split()[1:] == ["1.000"] * 5


def test_bench_policy_reports_median_and_p99(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_policy.main(["--steps", "2000", "--policies", "nightjar", "off"]) == 0
    out = capsys.readouterr().out
    assert "dict lookup" in out and "nightjar" in out and "med/dict" in out
    assert "nightjar (gate reads)" in out and "nightjar (queued)" in out


def test_policy_regret_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert policy_regret.main(["--horizons", "200", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "nightjar-paper" in out and "nightjar share" in out


def test_train_snapshot_writes_a_snapshot_the_policy_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "results" / "warm.json"
    argv = ["train_snapshot", "--out", str(out), "--steps-per-batch", "200", "--batches", "1,16"]
    monkeypatch.setattr(sys, "argv", argv)
    train_snapshot.main()
    snapshot = json.loads(out.read_text())
    policy = build_policy("nightjar", {"gamma_max": 4}, rng=random.Random(0))
    policy.restore(snapshot)
    assert policy.snapshot()["stats"] == snapshot["stats"]
