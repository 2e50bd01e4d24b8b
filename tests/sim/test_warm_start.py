"""Warm-started contenders: nightjar starting from the statistics of an earlier run."""

from __future__ import annotations

import pytest

from nightjar_ray.cli.simulate_suite import suite_contenders
from nightjar_ray.policy.nightjar import NightjarPolicy
from nightjar_ray.sim.experiments import (
    WARM_START_SEED_OFFSET,
    RunKnobs,
    build_contender_policy,
    run_contender,
    warm_started_policy,
)
from nightjar_ray.sim.presets import get_setting
from nightjar_ray.sim.suite import suite_workload

SETTING = get_setting("l20x2-32b")
NIGHTJAR, WARM = (
    next(c for c in suite_contenders({}, False, warm_start=True) if c.label == label)
    for label in ("nightjar", "nightjar-warm")
)


def _crossover(seed: int) -> tuple:  # type: ignore[type-arg]
    return suite_workload("crossover", SETTING, seed)[:150]


def _gamma_max_steps_at_large_batches(warm: bool, params: dict[str, object] | None = None) -> int:
    """Steps at B >= 33 that played gamma 4 (far from the best there) in a short run."""
    cold, warmed = (
        next(c for c in suite_contenders(params or {}, False, warm_start=True) if c.label == label)
        for label in ("nightjar", "nightjar-warm")
    )
    seed = 0
    c, earlier = (warmed, _crossover(seed + WARM_START_SEED_OFFSET)) if warm else (cold, None)
    result = run_contender(SETTING, c, _crossover(seed), "sharegpt", seed, RunKnobs(), earlier)
    return sum(1 for s in result.timeline if s.num_reqs >= 33 and s.gamma == 4)


def test_the_warm_policy_holds_the_earlier_statistics_and_fresh_schedules() -> None:
    earlier = _crossover(WARM_START_SEED_OFFSET)
    policy = warm_started_policy(SETTING, WARM, earlier, "sharegpt", 0)
    assert isinstance(policy, NightjarPolicy)
    assert policy.local_state()["schedules"] == []  # bins start over, as on a new replica
    tokens = sum(n for n, _mean in policy.export_stats().tables["latency_per_token_s"].values())
    assert tokens > 1000
    cold = build_contender_policy(SETTING, NIGHTJAR, 0)
    assert cold.latency_estimates(40) is None  # a cold key must try its arms first
    assert policy.latency_estimates(40) is not None  # the warm key ranks at once


def test_a_warm_start_skips_the_cold_plays_of_every_arm_at_large_batches() -> None:
    """Measured where a cold key still plays gamma 4: with the paper's rule that a key
    tries every arm (no untried-arm bound); a warm key ranks its arms from the pool's
    statistics at once. With the defaults' bounds, paired acceptance or not, a cold key at
    B >= 33 plays it only while its lower bound ranks it best (a smaller key's step time
    prices it before any key has settled both it and gamma 0 nearby): fewer steps."""
    tries = {"untried_arm_bound": False}
    cold = _gamma_max_steps_at_large_batches(False, tries)
    warm = _gamma_max_steps_at_large_batches(True, tries)
    # a cold key plays untried arms, gamma 4 included, before trusting any estimate
    assert cold >= 3, cold
    assert warm <= cold // 4, (warm, cold)  # a warm key ranks its arms from the start
    assert _gamma_max_steps_at_large_batches(False) < cold
    assert _gamma_max_steps_at_large_batches(False, {"paired_acceptance": False}) < cold


def test_a_warm_contender_without_an_earlier_run_is_refused() -> None:
    with pytest.raises(ValueError, match="warm_workload"):
        run_contender(SETTING, WARM, _crossover(0), "sharegpt", 0)
