"""Pooled statistics: snapshot/restore round-trips and exact merging across replicas."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from nightjar_ray.policy import Policy, PolicyStats, StepResult, build_policy, policy_names
from nightjar_ray.policy.stats import ArmTable

LEARNING = (
    ("nightjar", {}),
    ("nightjar", {"latency_estimator": "token-weighted"}),
    ("dsd", {}),
    ("ucbspec", {}),
)


def _results(seed: int, n: int, gamma_max: int = 4) -> list[StepResult]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        b, g = rng.choice((1, 3, 8, 16)), rng.randint(0, gamma_max)
        accepted = rng.randint(0, b * g)
        out.append(StepResult(b, g, b + accepted, rng.uniform(0.005, 0.05), b * g, accepted))
    return out


def _assert_stats_equal(a: PolicyStats, b: PolicyStats) -> None:
    assert a.policy == b.policy
    assert set(a.tables) == set(b.tables)
    for name in a.tables:
        assert set(a.tables[name]) == set(b.tables[name]), name
        for cell, (n, m) in a.tables[name].items():
            n2, m2 = b.tables[name][cell]
            assert n == pytest.approx(n2) and m == pytest.approx(m2, rel=1e-9), (name, cell)
    assert dict(a.maxima) == pytest.approx(dict(b.maxima))


def _drive(policy: Policy, steps: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    gammas = []
    for _ in range(steps):
        b = rng.choice((1, 2, 8))
        g = policy.choose(b, rng.randint(0, 64))
        policy.observe(StepResult(b, g, b + g, 0.01 + 0.002 * g * b, b * g, g))
        gammas.append(g)
    return gammas


def test_arm_table_cells_are_weighted_means_of_what_was_folded() -> None:
    """The table keeps sums (a step folds two additions); what it exports is each cell's
    weighted mean, and ``add(total, weight)`` is ``update(total / weight, weight)``."""
    rng = random.Random(3)
    table = ArmTable(3)
    folded: dict[tuple[int, int], tuple[float, float]] = {}
    for _ in range(200):
        key, gamma = rng.choice((1, 4)), rng.randint(0, 1)
        value, weight = rng.uniform(0.0, 2.0), float(rng.randint(1, 9))
        if rng.random() < 0.5:
            table.update(key, gamma, value, weight)
        else:
            table.add(key, gamma, value * weight, weight)
        n, total = folded.get((key, gamma), (0.0, 0.0))
        folded[key, gamma] = (n + weight, total + value * weight)
    exported = table.export()
    assert set(exported) == set(folded)  # gamma 2 was never folded: no cell
    for cell, (n, total) in folded.items():
        assert exported[cell] == pytest.approx((n, total / n), rel=1e-12)
        assert table.get(*cell) == exported[cell]
    assert table.mean_row(4)[2] == 0.0 and table.get(4, 2) is None
    restored = ArmTable(3)
    restored.load(exported)
    assert set(restored.export()) == set(exported)
    for cell, (n, mean) in restored.export().items():
        assert (n, mean) == pytest.approx(exported[cell], rel=1e-12)


def _results_with_depths(seed: int, n: int, gamma_max: int = 4) -> list[StepResult]:
    """Steps that carry acceptance depths (what ``paired_acceptance`` folds)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        b, g = rng.choice((1, 3, 8, 16)), rng.randint(0, gamma_max)
        reaching = [b]
        for _ in range(g):
            reaching.append(rng.randint(0, reaching[-1]))
        accepted = sum(reaching[1:])
        depths = tuple(reaching) if g else ()
        out.append(
            StepResult(b, g, b + accepted, rng.uniform(0.005, 0.05), b * g, accepted, depths)
        )
    return out


@pytest.mark.parametrize(("name", "params"), LEARNING)
def test_a_replica_that_loads_pooled_stats_folds_later_steps_into_them(
    name: str, params: dict[str, str]
) -> None:
    """Loading replaces every table a step folds into; a replica that had observed steps
    before the load (and so holds the old tables' rows) folds what it observes after the
    load into the loaded tables: its export equals the pooled stats merged with them."""
    before, pooled_steps, after = (_results_with_depths(s, 300) for s in (1, 2, 3))
    replica = build_policy(name, params, rng=random.Random(0))
    pooled = build_policy(name, params, rng=random.Random(0))
    later = build_policy(name, params, rng=random.Random(0))
    for r in before:
        replica.observe(r)
    for r in pooled_steps:
        pooled.observe(r)
    replica.load_stats(pooled.export_stats())
    for r in after:
        replica.observe(r)
        later.observe(r)
    _assert_stats_equal(replica.export_stats(), pooled.export_stats().merge(later.export_stats()))


@pytest.mark.parametrize("name", policy_names())
def test_snapshot_restore_round_trip_continues_identically(name: str) -> None:
    params = {"gamma": 2} if name == "fixed" else {}
    rng_original, rng_clone = random.Random(5), random.Random(77)
    original = build_policy(name, params, rng=rng_original)
    _drive(original, 500, seed=1)
    snap = json.loads(json.dumps(original.snapshot()))  # survives JSON
    clone = build_policy(name, params, rng=rng_clone)
    clone.restore(snap)
    assert clone.snapshot() == original.snapshot()
    # same state + same RNG stream -> same future decisions
    rng_clone.setstate(rng_original.getstate())
    assert _drive(original, 300, seed=2) == _drive(clone, 300, seed=2)


@pytest.mark.parametrize("name", policy_names())
def test_a_snapshot_restored_over_played_state_replaces_it(name: str) -> None:
    """A policy that has played its own steps, then restores another's snapshot, decides
    as that one does: nothing it remembered of its own steps (per batch size lookups
    included) outlives the restore."""
    params = {"gamma": 2} if name == "fixed" else {}
    rng_original, rng_played = random.Random(5), random.Random(77)
    original = build_policy(name, params, rng=rng_original)
    _drive(original, 500, seed=1)
    played = build_policy(name, params, rng=rng_played)
    _drive(played, 700, seed=3)
    played.restore(json.loads(json.dumps(original.snapshot())))
    rng_played.setstate(rng_original.getstate())
    assert _drive(original, 300, seed=2) == _drive(played, 300, seed=2)


@pytest.mark.parametrize(("name", "params"), LEARNING)
def test_merge_of_two_replicas_equals_learning_from_the_union(
    name: str, params: dict[str, str]
) -> None:
    a, b = _results(1, 400), _results(2, 300)
    replica_a = build_policy(name, params, rng=random.Random(0))
    replica_b = build_policy(name, params, rng=random.Random(0))
    union = build_policy(name, params, rng=random.Random(0))
    for r in a:
        replica_a.observe(r)
        union.observe(r)
    for r in b:
        replica_b.observe(r)
        union.observe(r)
    merged = replica_a.export_stats().merge(replica_b.export_stats())
    _assert_stats_equal(merged, union.export_stats())
    # a replica that loads the pooled stats decides like the union learner
    pooled = build_policy(name, params, rng=random.Random(0))
    pooled.load_stats(merged)
    pooled.load_local_state(union.local_state())
    union_choices = [union.choose(b, 0) for b in (1, 3, 8, 16)]
    assert [pooled.choose(b, 0) for b in (1, 3, 8, 16)] == union_choices


def test_exp3spec_merge_adds_loss_estimate_sums() -> None:
    r1, r2 = (
        build_policy("exp3spec", {}, rng=random.Random(1)),
        build_policy("exp3spec", {}, rng=random.Random(2)),
    )
    _drive(r1, 200, 3)
    _drive(r2, 100, 4)
    s1, s2 = r1.export_stats(), r2.export_stats()
    merged = s1.merge(s2)
    for cell in set(s1.tables["loss_estimate"]) | set(s2.tables["loss_estimate"]):
        total = sum(
            n * m for s in (s1, s2) for n, m in [s.tables["loss_estimate"].get(cell, (0, 0))]
        )
        n, m = merged.tables["loss_estimate"][cell]
        assert n * m == pytest.approx(total)
    assert merged.total_count("loss_estimate") == 300


def test_merge_is_commutative_and_associative() -> None:
    stats = []
    for seed in range(3):
        p = build_policy("nightjar", {}, rng=random.Random(seed))
        for r in _results(seed, 100):
            p.observe(r)
        stats.append(p.export_stats())
    x, y, z = stats
    _assert_stats_equal(x.merge(y), y.merge(x))
    _assert_stats_equal(x.merge(y).merge(z), x.merge(y.merge(z)))


def test_stats_file_round_trip(tmp_path: Path) -> None:
    p = build_policy("ucbspec", {}, rng=random.Random(0))
    for r in _results(0, 50):
        p.observe(r)
    path = tmp_path / "stats.json"
    p.export_stats().save(path)
    _assert_stats_equal(PolicyStats.load(path), p.export_stats())


def test_bad_snapshots_are_refused() -> None:
    p = build_policy("nightjar", {}, rng=random.Random(0))
    with pytest.raises(ValueError, match="policy"):
        p.restore(build_policy("dsd", {}, rng=random.Random(0)).snapshot())
    with pytest.raises(ValueError, match="version"):
        PolicyStats.from_json({"version": 99, "policy": "nightjar"})
    with pytest.raises(ValueError, match="merge"):
        p.export_stats().merge(PolicyStats("dsd"))
    bad = PolicyStats("nightjar", {"latency_per_token_s": {(1, 9): (1.0, 0.1)}})
    with pytest.raises(ValueError, match="gamma=9"):
        p.load_stats(bad)


@pytest.mark.parametrize(
    ("result", "field"),
    [
        (StepResult(0, 0, 1, 0.1), "num_reqs"),
        (StepResult(1, 5, 1, 0.1), "gamma"),
        (StepResult(1, 0, 0, 0.1), "num_tokens"),
        (StepResult(1, 0, 1, 0.0), "duration_s"),
        (StepResult(1, 1, 2, 0.1, 1, 2), "num_accepted_tokens"),
    ],
)
@pytest.mark.parametrize("name", policy_names())
def test_impossible_results_raise_value_error(name: str, result: StepResult, field: str) -> None:
    params = {"gamma": 0} if name == "fixed" else {}
    policy = build_policy(name, params, rng=random.Random(0))
    if result.gamma > policy.gamma_max:  # outside this policy's range: named first
        field = "gamma"
    with pytest.raises(ValueError, match=rf"StepResult\b.*\b{field}\b"):
        policy.observe(result)
