"""``benchmarks/bench_policy_actor.py`` end to end at a tiny scale: a real local Ray
instance, the real policy actor and three synthetic replicas (about 20 s, mostly Ray's
start-up)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROW_FIELDS = {
    "num_replicas",
    "offered_rate_per_s",
    "achieved_rate_per_s",
    "sync_p50_s",
    "sync_p99_s",
    "sync_start_late_p99_s",
    "actor_exchange_p50_s",
    "actor_exchange_p99_s",
    "snapshot_write_p50_s",
    "snapshot_bytes",
    "num_snapshot_writes",
    "actor_cpu_per_sync_s",
    "actor_cpu_s_per_s",
    "actor_capacity_replicas",
    "num_syncs",
    "num_failed_syncs",
    "num_actor_exchanges",
    "keeps_up",
    "callers_fell_behind",
}


def test_three_replicas_sync_through_one_actor(tmp_path: Path) -> None:
    out = tmp_path / "actor.json"
    argv = ["--replicas", "3", "--duration-s", "2", "--warmup-s", "0.5"]
    argv += ["--sync-interval-s", "0.5", "--fleets", "2", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "benchmarks/bench_policy_actor.py", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["settings"]["replicas"] == [3]
    (row,) = result["rows"]
    assert set(row) >= ROW_FIELDS, ROW_FIELDS - set(row)
    assert row["num_replicas"] == 3 and row["offered_rate_per_s"] == 6.0
    assert row["num_syncs"] > 0 and row["num_failed_syncs"] == 0
    assert row["num_actor_exchanges"] > 0 and row["snapshot_bytes"] > 0
    assert row["sync_p50_s"] <= row["sync_p99_s"]
