"""Cost model and acceptance: the paper's checks (Table 1, Fig. 2 direction, Table 3 order)."""

from __future__ import annotations

import random
import statistics

from nightjar_ray.sim.acceptance import AcceptanceProcess, AcceptanceProfile
from nightjar_ray.sim.calibration import (
    PAPER_TABLE1_MIB,
    kv_mib,
    simulated_switch_cost,
    switch_cost_ms,
    token_latency_s,
)
from nightjar_ray.sim.experiments import Contender, default_contenders, run_contender
from nightjar_ray.sim.metrics import summarize
from nightjar_ray.sim.presets import get_setting
from tests.sim.simhelpers import poisson_workload

SETTING = get_setting("rtx4090-7b")


def test_kv_sizes_match_table_1() -> None:
    v13, q7 = get_setting("a100-13b").target, SETTING.target
    for ctx, (paper_13b, paper_7b) in PAPER_TABLE1_MIB.items():
        assert kv_mib(v13, ctx) == paper_13b
        assert kv_mib(q7, ctx) == paper_7b


def test_sd_speeds_up_small_batches_and_slows_large_ones() -> None:
    acc = SETTING.acceptance_for("sharegpt")
    for gamma in (1, 2, 3):
        assert token_latency_s(SETTING, 4, gamma, 512, acc) < token_latency_s(
            SETTING, 4, 0, 512, acc
        )
        assert token_latency_s(SETTING, 256, gamma, 512, acc) > token_latency_s(
            SETTING, 256, 0, 512, acc
        )


def _ratio(qps: float, gamma: int) -> tuple[float, float]:
    wl = poisson_workload(SETTING, qps, 240)
    off = summarize(
        run_contender(SETTING, Contender("off", "off", use_draft=False), wl, "sharegpt", 0)
    )
    sd = summarize(
        run_contender(SETTING, Contender("sd", "fixed", {"gamma": gamma}), wl, "sharegpt", 0)
    )
    return (
        sd.throughput_tokens_per_s / off.throughput_tokens_per_s,
        sd.mean_e2e_s / off.mean_e2e_s,
    )


def test_fig2_direction_sd_wins_at_low_qps_and_loses_at_high_qps() -> None:
    low_tput, low_lat = _ratio(2.0, 3)
    high_tput, high_lat = _ratio(30.0, 3)
    assert low_tput >= 1.0 and low_lat < 0.8
    assert high_tput < 0.9 and high_lat > 1.1


def test_switch_cost_grows_with_skip_and_batch() -> None:
    assert switch_cost_ms(SETTING, 128, 32) < switch_cost_ms(SETTING, 512, 32)
    assert switch_cost_ms(SETTING, 128, 32) < switch_cost_ms(SETTING, 128, 64)
    table = simulated_switch_cost(SETTING)
    assert abs(table.cost_s_at(128, 32) * 1e3 - switch_cost_ms(SETTING, 128, 32)) < 1e-6
    # same order of magnitude as the paper's Table 3 (tens to hundreds of ms)
    assert 10.0 < switch_cost_ms(SETTING, 128, 32) < 100.0


def test_acceptance_process_matches_its_profile() -> None:
    profile = AcceptanceProfile(0.6, concentration=1e6, position_decay=0.9)
    procs = [AcceptanceProcess(profile, seed=1, req_id=i) for i in range(400)]
    mean = statistics.fmean(p.accepted(4) for p in procs for _ in range(10))
    assert abs(mean - profile.expected_accepted(4)) < 0.05


def test_acceptance_varies_between_requests_but_is_reproducible() -> None:
    profile = AcceptanceProfile(0.6, concentration=4.0)
    alphas = [AcceptanceProcess(profile, 3, i).alpha for i in range(200)]
    assert statistics.pstdev(alphas) > 0.1
    assert AcceptanceProcess(profile, 3, 7).alpha == alphas[7]
    rng = random.Random(0)
    assert 0 <= AcceptanceProcess(profile, 3, rng.randrange(10)).accepted(5) <= 5


def _nightjar_gammas(qps: float, n: int, queued: bool) -> list[int]:
    """Gammas of decode steps (only those with a waiting queue if ``queued``)."""
    setting = SETTING
    contender = next(c for c in default_contenders() if c.label == "nightjar")
    result = run_contender(setting, contender, poisson_workload(setting, qps, n), "sharegpt", 0)
    return [s.gamma for s in result.timeline if s.num_reqs and (s.num_waiting or not queued)]


def test_nightjar_in_the_simulator_speculates_when_idle_and_stops_under_load() -> None:
    low = _nightjar_gammas(1.0, 150, queued=False)
    overloaded = _nightjar_gammas(35.0, 1500, queued=True)
    assert statistics.fmean(low) > 1.5
    assert statistics.fmean(overloaded[len(overloaded) // 2 :]) < 0.3
