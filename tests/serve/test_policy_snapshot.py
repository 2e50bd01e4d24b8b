"""The policy actor's snapshot location, without Ray: a local path and a ``file://`` URI
through ``pyarrow.fs`` (the object-store path of the same code is ``FileSystem.from_uri``
with another scheme)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.engine.config import PoolingConfig
from nightjar_ray.policy import PolicyStats, StepResult, build_policy
from nightjar_ray.policy.pooling import stats_fingerprint
from nightjar_ray.serve.policy_pool import PolicyPool, total_count
from nightjar_ray.serve.policy_snapshot import SnapshotFile, snapshot_location

PARAMS = {"gamma_max": 3, "bucketing": "pow2", "latency_estimator": "token-weighted"}


def _delta(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    policy = build_policy("nightjar", PARAMS, rng=random.Random(seed))
    rng = random.Random(seed)
    for _ in range(200):
        b = rng.randint(1, 40)
        g = policy.choose(b, 0)
        policy.observe(StepResult(b, g, b * (1 + g // 2), 0.01 * (1 + g) * (1 + b / 10)))
    return stats_fingerprint("nightjar", policy.config), policy.export_stats().to_json()


@pytest.mark.parametrize(
    ("snapshot_dir", "location"),
    [
        ("/mnt/pool", "/mnt/pool/nightjar-policy.a.json"),
        ("/mnt/pool/", "/mnt/pool/nightjar-policy.a.json"),
        ("file:///mnt/pool", "file:///mnt/pool/nightjar-policy.a.json"),
        ("s3://bucket/pools", "s3://bucket/pools/nightjar-policy.a.json"),
        (
            "s3://bucket/pools?endpoint_override=minio:9000&scheme=http",
            "s3://bucket/pools/nightjar-policy.a.json?endpoint_override=minio:9000&scheme=http",
        ),
        ("gs://bucket", "gs://bucket/nightjar-policy.a.json"),
    ],
)
def test_snapshot_location_joins_the_actor_name(snapshot_dir: str, location: str) -> None:
    PoolingConfig(snapshot_dir=snapshot_dir)
    assert snapshot_location(snapshot_dir, "nightjar-policy.a") == location


@pytest.mark.parametrize("snapshot_dir", ["pool", "s3:///pool", "https://host/pool", ""])
def test_snapshot_dir_must_be_an_absolute_path_or_a_known_uri(snapshot_dir: str) -> None:
    with pytest.raises(ValueError, match="snapshot_dir"):
        PoolingConfig(snapshot_dir=snapshot_dir)


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_pool_restores_from_a_path_and_a_file_uri(tmp_path: Path, scheme: str) -> None:
    fingerprint, delta = _delta(1)
    location = snapshot_location(f"{scheme}{tmp_path}/pools", "actor")
    pool = PolicyPool(fingerprint, location, clock=lambda: 0.0)
    assert not pool.restored
    pool.exchange("r1", fingerprint, delta)
    written = json.loads((tmp_path / "pools" / "actor.json").read_text())
    assert written["pool"] == pool.pool.to_json()
    restarted = PolicyPool(fingerprint, location, clock=lambda: 0.0)
    assert restarted.restored
    assert restarted.pool.to_json() == pool.pool.to_json()
    assert sorted(p.name for p in (tmp_path / "pools").iterdir()) == ["actor.json"]


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_local_writes_replace_the_file_by_rename(tmp_path: Path, scheme: str) -> None:
    """A reader opening the snapshot mid-write still holds the old file whole: the new
    text goes to a new inode, renamed over the old one (never rewritten in place)."""
    path = tmp_path / "actor.json"
    snapshot = SnapshotFile(f"{scheme}{path}")
    assert snapshot.read_text() is None
    snapshot.write_text('{"n": 1}')
    with path.open() as reader:
        inode = path.stat().st_ino
        snapshot.write_text('{"n": 2}')
        assert reader.read() == '{"n": 1}'
    assert path.stat().st_ino != inode
    assert snapshot.read_text() == '{"n": 2}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["actor.json"]


def test_a_directory_at_the_location_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="is not a file"):
        SnapshotFile(str(tmp_path)).read_text()


def test_a_failed_write_keeps_the_exchange_and_is_retried(tmp_path: Path) -> None:
    """A store that refuses the write must not fail the exchange: the replica's delta is
    merged and acknowledged (failing it would make the replica push it twice)."""
    fingerprint, delta = _delta(2)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the snapshot directory should be")
    now = [0.0]
    pool = PolicyPool(
        fingerprint, str(blocker / "actor.json"), clock=lambda: now[0], snapshot_interval_s=1.0
    )
    pooled = pool.exchange("r1", fingerprint, delta)
    assert total_count(pool.pool) > 0 and pooled == pool.pool.to_json()
    assert pool.status()["num_snapshot_failures"] == 1
    blocker.unlink()
    now[0] = 0.5
    pool.exchange("r1", fingerprint, PolicyStats("nightjar").to_json())
    assert not blocker.exists()  # not due yet: the last attempt is 0.5 s old
    now[0] = 1.0
    pool.exchange("r1", fingerprint, PolicyStats("nightjar").to_json())
    saved = json.loads((blocker / "actor.json").read_text())
    assert saved["pool"] == pool.pool.to_json()
    assert pool.status()["num_snapshot_failures"] == 1
