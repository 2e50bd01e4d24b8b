"""Pooling learned statistics across replicas: deltas, fingerprints, payload checks.

Replicas of one deployment learn the same (key, gamma) cells. Each replica
periodically pushes what it learned since its last sync (a *delta*) to a
central pool and loads the pooled table back::

    replica                                   pool
    -------                                   ----
    current = policy.export_stats()
    delta   = stats_delta(current, base)  --> pool = pool.merge(delta)
    policy.load_stats(pool + since)       <-- pool
    base    = pool

``base`` is the pooled table the replica last loaded, so ``current - base`` is
exactly the observations no one else has seen yet. Cells are (count, mean);
subtracting them subtracts counts and sums (``count * mean``), the inverse of
:meth:`PolicyStats.merge`.

A pool only accepts statistics with the same *fingerprint* (policy name,
gamma_max, batch-size keying, estimator, batch curve): cells of a different configuration
mean something else and would poison it. Pure Python: no ray, no vllm.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from nightjar_ray.policy.base import Policy
from nightjar_ray.policy.bucketing import bucket_fn
from nightjar_ray.policy.config import PolicyConfig
from nightjar_ray.policy.stats import Cell, PolicyStats

MIN_DELTA_COUNT = 1e-9
"""Cells whose count changed by less than this are left out of a delta."""

FINGERPRINT_FIELDS = ("bucketing", "latency_estimator", "batch_curve")
"""Config fields (besides name and gamma_max) that change what a cell means."""


def stats_fingerprint(policy: str, config: PolicyConfig) -> dict[str, Any]:
    """What two replicas must share for their statistics to pool."""
    fingerprint: dict[str, Any] = {"policy": policy, "gamma_max": config.gamma_max}
    for name in FINGERPRINT_FIELDS:
        if name in type(config).model_fields:
            fingerprint[name] = getattr(config, name)
    return fingerprint


def stats_delta(current: PolicyStats, base: PolicyStats) -> PolicyStats:
    """Observations in ``current`` that are not in ``base`` (cell-wise difference).

    ``base`` must be an earlier state of the same table (every count in it is
    at most the count in ``current``); ``ValueError`` otherwise. Maxima are
    carried whole: they merge by ``max``, which is idempotent.
    """
    if current.policy != base.policy:
        raise ValueError(f"cannot diff stats of {current.policy!r} and {base.policy!r}")
    tables: dict[str, dict[tuple[int, int], Cell]] = {}
    for name, old_cells in base.tables.items():
        gone = [
            c for c, (n, _) in old_cells.items() if n > 0 and c not in current.tables.get(name, {})
        ]
        if gone:
            raise ValueError(f"stats cells {name}{gone[:3]} shrank to nothing")
    for name, cells in current.tables.items():
        old = base.tables.get(name, {})
        diff: dict[tuple[int, int], Cell] = {}
        for cell, (n, m) in cells.items():
            n0, m0 = old.get(cell, (0.0, 0.0))
            dn = n - n0
            if dn < -MIN_DELTA_COUNT:
                raise ValueError(f"stats cell {name}{cell} shrank from {n0} to {n}")
            if dn > MIN_DELTA_COUNT:
                diff[cell] = (dn, (n * m - n0 * m0) / dn)
        tables[name] = diff
    return PolicyStats(current.policy, tables, dict(current.maxima))


def check_stats(stats: PolicyStats, fingerprint: dict[str, Any]) -> None:
    """Raise ``ValueError`` unless every cell is one a policy of ``fingerprint`` can hold."""
    if stats.policy != fingerprint["policy"]:
        raise ValueError(f"stats are for {stats.policy!r}, not {fingerprint['policy']!r}")
    gamma_max = int(fingerprint["gamma_max"])
    key_of = bucket_fn(fingerprint.get("bucketing", "exact"))
    for name, cells in stats.tables.items():
        for (key, gamma), (count, mean) in cells.items():
            where = f"stats cell {name}[{key}, {gamma}]"
            if not 0 <= gamma <= gamma_max:
                raise ValueError(f"{where}: gamma outside [0, {gamma_max}]")
            if key < 0 or (key > 0 and key_of(key) != key):
                raise ValueError(f"{where}: {key} is not a batch-size key of this policy")
            if not (math.isfinite(count) and count >= 0.0):
                raise ValueError(f"{where}: count {count} is not a finite non-negative number")
            if not math.isfinite(mean):
                raise ValueError(f"{where}: mean {mean} is not finite")
    for name, value in stats.maxima.items():
        if not math.isfinite(value):
            raise ValueError(f"stats maximum {name!r} is not finite")


def parse_stats(payload: Any, fingerprint: dict[str, Any]) -> PolicyStats:
    """A JSON payload (``PolicyStats.to_json``) checked against ``fingerprint``."""
    try:
        stats = PolicyStats.from_json(payload)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise ValueError(f"malformed stats payload: {e!r}") from e
    check_stats(stats, fingerprint)
    return stats


class StatsExchange:
    """One replica's side of pooling (the algorithm in the module docstring).

    ``lock`` guards the policy against the step loop; it is held only while
    tables are copied in memory, never during ``push`` (the network call).
    If ``push`` raises, nothing changes: the next delta still holds everything.
    """

    def __init__(self, policy: Policy, lock: AbstractContextManager[Any]) -> None:
        self._policy = policy
        self._lock = lock
        self.base = PolicyStats(policy.name)
        """The pooled table this replica last loaded."""

    def exchange(self, push: Callable[[dict[str, Any]], dict[str, Any]]) -> PolicyStats:
        """Push the delta since :attr:`base`, load the pooled table; return what was loaded."""
        with self._lock:
            current = self._policy.export_stats()
        pool = PolicyStats.from_json(push(stats_delta(current, self.base).to_json()))
        with self._lock:
            merged = pool.merge(stats_delta(self._policy.export_stats(), current))
            self._policy.load_stats(merged)
        self.base = pool
        return merged
