"""The pooled statistics of one deployment (the policy actor's state; pure Python).

:class:`PolicyPool` merges the deltas replicas push (``policy.pooling``),
refuses payloads of another configuration or malformed ones, keeps per-replica
accounting, and snapshots itself (a local file or an object-store object,
``policy_snapshot.py``) when it changed, at most once every ``snapshot_interval_s``, so a
restarted actor loses at most that many seconds of acknowledged observations::

    exchange(replica, fingerprint, delta) -> pooled table
      fingerprint == ours?  parse + check every cell   (else ValueError: pool untouched)
      pool = pool.merge(delta)
      changed and last write >= snapshot_interval_s ago?  write snapshot (whole or not at all)
      return pool

The Ray actor (``policy_actor.py``) is a thin wrapper; tests drive this class
directly as well as through the actor.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from nightjar_ray.policy.pooling import parse_stats
from nightjar_ray.policy.stats import PolicyStats
from nightjar_ray.serve.policy_snapshot import SnapshotFile

logger = logging.getLogger(__name__)

POOL_SNAPSHOT_VERSION = 1

SNAPSHOT_INTERVAL_S = 1.0
"""Least seconds between two snapshot writes: the most a restart loses (evidence:
docs/benchmarks.md, "Policy actor at scale")."""


def total_count(stats: PolicyStats) -> float:
    """Observations (summed counts) over every table of ``stats``."""
    return sum(stats.total_count(name) for name in stats.tables)


@dataclass
class ReplicaRecord:
    """What the policy pool knows of one replica."""

    pushed_count: float = 0.0
    """Observations this replica contributed (sum of its deltas' counts)."""
    num_exchanges: int = 0
    warm_start_count: float = 0.0
    """Pool size (observations from others) handed to it at its first exchange."""
    last_exchange_s: float = 0.0
    report: dict[str, Any] | None = None
    """Latest telemetry the replica reported (``TelemetryReading.to_json``)."""
    last_report_s: float = 0.0


class PolicyPool:
    """Pooled statistics of one deployment's replicas (see module docstring)."""

    def __init__(
        self,
        fingerprint: dict[str, Any],
        snapshot_location: str | None,
        clock: Callable[[], float],
        snapshot_interval_s: float = SNAPSHOT_INTERVAL_S,
    ) -> None:
        self.fingerprint = dict(fingerprint)
        self._snapshot = None if snapshot_location is None else SnapshotFile(snapshot_location)
        self._clock = clock
        self._snapshot_interval_s = snapshot_interval_s
        self._last_save_s = -math.inf
        self._unsaved = False
        self.pool = PolicyStats(str(fingerprint["policy"]))
        self.replicas: dict[str, ReplicaRecord] = {}
        self.num_rejected = 0
        self.num_snapshot_failures = 0
        """Snapshot writes that failed (the next exchange due retries; the pool is kept)."""
        self.restored = self._restore()

    def exchange(
        self, replica: str, fingerprint: dict[str, Any], delta: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge ``delta`` from ``replica``; return the pooled table (JSON)."""
        if fingerprint != self.fingerprint:
            self.num_rejected += 1
            raise ValueError(
                f"policy configuration {fingerprint} does not match this policy pool's "
                f"{self.fingerprint}; statistics rejected"
            )
        try:
            stats = parse_stats(delta, self.fingerprint)
        except ValueError:
            self.num_rejected += 1
            raise
        record = self.replicas.get(replica)
        if record is None:
            record = self.replicas[replica] = ReplicaRecord(warm_start_count=total_count(self.pool))
            self._unsaved = True
        merged = self.pool.merge(stats)
        self._unsaved |= total_count(stats) > 0 or merged.maxima != self.pool.maxima
        self.pool = merged
        record.pushed_count += total_count(stats)
        record.num_exchanges += 1
        now_s = record.last_exchange_s = self._clock()
        if self._unsaved and now_s - self._last_save_s >= self._snapshot_interval_s:
            self._last_save_s = now_s
            self._unsaved = not self._save()
        return self.pool.to_json()

    def report(self, replica: str, telemetry: dict[str, Any]) -> None:
        """Keep the replica's latest telemetry (read by the main job's report)."""
        record = self.replicas.setdefault(replica, ReplicaRecord())
        record.report = telemetry
        record.last_report_s = self._clock()

    def status(self) -> dict[str, Any]:
        """Pool size, per-replica accounting and whether it was restored from a snapshot."""
        return {
            "fingerprint": self.fingerprint,
            "pool_count": total_count(self.pool),
            "restored": self.restored,
            "num_rejected": self.num_rejected,
            "num_snapshot_failures": self.num_snapshot_failures,
            "now_s": self._clock(),
            "replicas": {name: asdict(rec) for name, rec in sorted(self.replicas.items())},
        }

    def _save(self) -> bool:
        """Write the snapshot; ``False`` if the store refused it (the exchange that was
        merged stays acknowledged: a failed write must not make a replica push it again)."""
        if self._snapshot is None:
            return True
        data = {
            "version": POOL_SNAPSHOT_VERSION,
            "fingerprint": self.fingerprint,
            "pool": self.pool.to_json(),
            "pushed": {name: rec.pushed_count for name, rec in self.replicas.items()},
        }
        try:
            self._snapshot.write_text(json.dumps(data))
        except (OSError, ValueError) as e:  # pyarrow: ArrowIOError, ArrowInvalid
            self.num_snapshot_failures += 1
            logger.warning(
                "nightjar: policy pool snapshot %s not written: %s", self._snapshot.location, e
            )
            return False
        return True

    def _restore(self) -> bool:
        if self._snapshot is None:
            return False
        try:
            text = self._snapshot.read_text()
            if text is None:
                return False
            data = json.loads(text)
            if data.get("version") != POOL_SNAPSHOT_VERSION:
                raise ValueError(f"snapshot version {data.get('version')!r}")
            if data.get("fingerprint") != self.fingerprint:
                raise ValueError(f"snapshot fingerprint {data.get('fingerprint')}")
            self.pool = parse_stats(data["pool"], self.fingerprint)
        except (OSError, ValueError, KeyError, TypeError) as e:
            logger.warning(
                "nightjar: ignoring policy pool snapshot %s: %s", self._snapshot.location, e
            )
            return False
        for name, count in data.get("pushed", {}).items():
            self.replicas[name] = ReplicaRecord(pushed_count=float(count))
        logger.info("nightjar: restored policy pool from %s", self._snapshot.location)
        return True
