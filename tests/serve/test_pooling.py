"""Pooling across replicas, without Ray: deltas, payload checks, the pool, the exchange.

The same classes run inside the policy actor and the engine's Serve link; the
real actor and link are exercised in ``test_serve_app.py``.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.policy import PolicyStats, StepResult, build_policy
from nightjar_ray.policy.pooling import (
    StatsExchange,
    check_stats,
    parse_stats,
    stats_delta,
    stats_fingerprint,
)
from nightjar_ray.serve.policy_pool import PolicyPool, total_count

PARAMS = {"gamma_max": 3, "bucketing": "pow2", "latency_estimator": "token-weighted"}


def _policy(seed: int) -> Any:
    return build_policy("nightjar", PARAMS, rng=random.Random(seed))


def _fingerprint() -> dict[str, Any]:
    return stats_fingerprint("nightjar", _policy(0).config)


def _drive(policy: Any, rng: random.Random, steps: int) -> None:
    for _ in range(steps):
        b = rng.randint(1, 40)
        g = policy.choose(b, 0)
        policy.observe(StepResult(b, g, b * (1 + g // 2), 0.01 * (1 + g) * (1 + b / 10)))


def _cells(stats: PolicyStats) -> dict[tuple[int, int], tuple[float, float]]:
    return dict(next(iter(stats.tables.values())))


def test_delta_inverts_merge() -> None:
    a, rng = _policy(1), random.Random(1)
    _drive(a, rng, 300)
    base = a.export_stats()
    _drive(a, rng, 300)
    now = a.export_stats()
    delta = stats_delta(now, base)
    rebuilt = base.merge(delta)
    for cell, (n, m) in _cells(now).items():
        n2, m2 = _cells(rebuilt)[cell]
        assert n2 == pytest.approx(n) and m2 == pytest.approx(m, rel=1e-9)
    assert total_count(delta) == pytest.approx(total_count(now) - total_count(base))


def test_delta_refuses_a_base_that_is_not_an_earlier_state() -> None:
    a = _policy(1)
    _drive(a, random.Random(1), 100)
    with pytest.raises(ValueError, match="shrank"):
        stats_delta(PolicyStats("nightjar"), a.export_stats())


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ([4, 9, 1.0, 0.1], "gamma outside"),
        ([3, 1, 1.0, 0.1], "not a batch-size key"),
        ([4, 1, -1.0, 0.1], "count"),
        ([4, 1, 1.0, math.nan], "mean"),
    ],
)
def test_bad_cells_are_rejected(row: list[float], message: str) -> None:
    payload = {"version": 1, "policy": "nightjar", "tables": {"t": [row]}, "maxima": {}}
    with pytest.raises(ValueError, match=message):
        parse_stats(payload, _fingerprint())


def test_malformed_payload_and_other_policy_are_rejected() -> None:
    with pytest.raises(ValueError, match="malformed"):
        parse_stats({"tables": "nope"}, _fingerprint())
    with pytest.raises(ValueError, match="malformed"):
        parse_stats({"version": 1, "policy": "nightjar", "tables": {"t": [[1]]}}, _fingerprint())
    with pytest.raises(ValueError, match="not 'nightjar'"):
        check_stats(PolicyStats("ucbspec"), _fingerprint())


def test_fingerprint_names_what_changes_a_cell() -> None:
    fp = _fingerprint()
    assert fp == {
        "policy": "nightjar",
        "gamma_max": 3,
        "bucketing": "pow2",
        "latency_estimator": "token-weighted",
        "batch_curve": True,
    }
    other = build_policy("nightjar", {**PARAMS, "gamma_max": 4}, rng=random.Random(0))
    assert stats_fingerprint("nightjar", other.config) != fp
    flat = build_policy("nightjar", {**PARAMS, "batch_curve": False}, rng=random.Random(0))
    assert stats_fingerprint("nightjar", flat.config) != fp


def test_pool_rejects_other_configs_and_bad_payloads_untouched(tmp_path: Path) -> None:
    pool = PolicyPool(_fingerprint(), str(tmp_path / "pool.json"), clock=lambda: 0.0)
    a = _policy(1)
    _drive(a, random.Random(1), 200)
    pool.exchange("r1", _fingerprint(), a.export_stats().to_json())
    before = pool.pool.to_json()
    with pytest.raises(ValueError, match="does not match"):
        pool.exchange("r2", {**_fingerprint(), "gamma_max": 4}, a.export_stats().to_json())
    bad = a.export_stats().to_json()
    bad["tables"]["latency_per_token_s"][0][1] = 99
    with pytest.raises(ValueError, match="gamma outside"):
        pool.exchange("r2", _fingerprint(), bad)
    assert pool.pool.to_json() == before
    assert pool.num_rejected == 2


def test_pool_snapshot_restores_after_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "pool.json")
    pool = PolicyPool(_fingerprint(), path, clock=lambda: 0.0)
    a = _policy(1)
    _drive(a, random.Random(1), 200)
    pool.exchange("r1", _fingerprint(), a.export_stats().to_json())
    restarted = PolicyPool(_fingerprint(), path, clock=lambda: 0.0)
    assert restarted.restored
    assert restarted.pool.to_json() == pool.pool.to_json()
    assert restarted.status()["replicas"]["r1"]["pushed_count"] == total_count(a.export_stats())
    other = PolicyPool({**_fingerprint(), "gamma_max": 4}, path, clock=lambda: 0.0)
    assert not other.restored and total_count(other.pool) == 0


def test_snapshot_is_written_when_changed_at_most_every_interval(tmp_path: Path) -> None:
    """A write per exchange was half the actor's work at 1,000 replicas: the pool writes
    when it changed and the last write is ``snapshot_interval_s`` old, not on every call."""
    path, now = tmp_path / "pool.json", [0.0]
    pool = PolicyPool(_fingerprint(), str(path), clock=lambda: now[0], snapshot_interval_s=1.0)
    a, rng = _policy(1), random.Random(1)
    exchange = StatsExchange(a, contextlib.nullcontext())

    def sync(at_s: float, steps: int) -> float:
        now[0] = at_s
        _drive(a, rng, steps)
        exchange.exchange(lambda d: pool.exchange("r1", _fingerprint(), d))
        return total_count(PolicyPool(_fingerprint(), str(path), clock=lambda: 0.0).pool)

    first = sync(0.0, 100)  # the first exchange writes
    assert first == total_count(pool.pool) > 0
    assert sync(0.5, 100) == first  # changed, but the last write is 0.5 s old
    assert sync(1.0, 0) == total_count(pool.pool) > first  # nothing new; the backlog is due
    path.unlink()
    assert sync(5.0, 0) == 0.0 and not path.exists()  # nothing changed: nothing written
    assert sync(6.0, 50) == total_count(pool.pool)


def test_corrupt_snapshot_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "pool.json"
    path.write_text("{not json")
    assert not PolicyPool(_fingerprint(), str(path), clock=lambda: 0.0).restored


def test_exchanges_lose_no_observation_and_pool_is_the_sum() -> None:
    """Two replicas exchange repeatedly while observing, some observations landing
    during the network call; a failed push loses nothing either."""
    pool = PolicyPool(_fingerprint(), None, clock=lambda: 0.0)
    policies = [_policy(1), _policy(2)]
    exchanges = [StatsExchange(p, contextlib.nullcontext()) for p in policies]
    rngs = [random.Random(10), random.Random(20)]
    observed = [0.0, 0.0]

    def observe(i: int, steps: int) -> None:
        before = total_count(policies[i].export_stats())
        _drive(policies[i], rngs[i], steps)
        observed[i] += total_count(policies[i].export_stats()) - before

    for rnd in range(6):
        for i in (0, 1):
            observe(i, 50)

            def push(delta: dict[str, Any], i: int = i, rnd: int = rnd) -> dict[str, Any]:
                observe(i, 7)  # steps that run while the exchange is in flight
                if rnd == 2 and i == 1:
                    raise ConnectionError("actor down")
                return pool.exchange(f"r{i}", _fingerprint(), json.loads(json.dumps(delta)))

            with contextlib.suppress(ConnectionError):
                exchanges[i].exchange(push)
    for i in (0, 1):  # final quiet exchanges: every observation reaches the pool
        exchanges[i].exchange(lambda d, i=i: pool.exchange(f"r{i}", _fingerprint(), d))
    exchanges[0].exchange(lambda d: pool.exchange("r0", _fingerprint(), d))
    assert total_count(pool.pool) == pytest.approx(sum(observed))
    status = pool.status()["replicas"]
    assert status["r0"]["pushed_count"] == pytest.approx(observed[0])
    assert status["r1"]["pushed_count"] == pytest.approx(observed[1])
    assert total_count(policies[0].export_stats()) == pytest.approx(sum(observed))
    assert status["r1"]["warm_start_count"] > 0  # r1 joined after r0 had pushed
