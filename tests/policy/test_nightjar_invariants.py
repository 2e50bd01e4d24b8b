"""Algorithm 1 structure: bins, blocks, exploration rate, Lemma 1."""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict

from nightjar_ray.policy import StepResult, build_policy
from nightjar_ray.policy.nightjar import NightjarPolicy
from tests.policy.envs import Trace, bowl_env


def _policy(seed: int, **params: object) -> NightjarPolicy:
    policy = build_policy("nightjar-paper", {"gamma_max": 4, **params}, rng=random.Random(seed))
    assert isinstance(policy, NightjarPolicy)
    return policy


def _run_single_key(seed: int, num_steps: int) -> Trace:
    trace = Trace(_policy(seed), bowl_env({8: 2}), seed)
    trace.run([8] * num_steps)
    return trace


def test_bin_and_block_lengths_follow_sqrt_h() -> None:
    """Block j has floor(sqrt(2^(j-1))) bins of floor(sqrt(2^(j-1))) steps each."""
    trace = _run_single_key(seed=0, num_steps=5000)
    bin_starts: list[int] = []
    bins_per_block: Counter[int] = Counter()
    step = 0
    for key, j, b, _explore, _gamma in trace.bins:
        assert key == 8
        bins_per_block[j] += 1
        assert b == bins_per_block[j], "bins are numbered 1..K inside a block"
        bin_starts.append(step)
        step += math.isqrt(2 ** (j - 1))
    assert bin_starts[-1] < len(trace.steps) <= step
    for j in range(1, max(bins_per_block)):  # the last block may be unfinished
        assert bins_per_block[j] == math.isqrt(2 ** (j - 1))
    # a bin's arm is locked: every step of the bin plays the arm chosen at its start
    for (_, j, _, _, gamma), begin in zip(trace.bins, bin_starts, strict=True):
        length = math.isqrt(2 ** (j - 1))
        assert {g for _, g, _ in trace.steps[begin : begin + length]} == {gamma}


def test_exploration_bins_per_block_match_harmonic_sum() -> None:
    """E[exploration bins in a block of K bins] = sum_{b=1..K} 1/b (p = 1/b_B)."""
    explored: dict[int, int] = defaultdict(int)
    runs = 60
    for seed in range(runs):
        trace = _run_single_key(seed, num_steps=4000)
        for _, j, _, explore, _ in trace.bins:
            explored[j] += explore
    # blocks 1..12 are complete within 4000 steps (sum of K_j^2 for j<=12 is 3426)
    total_observed = total_expected = 0.0
    for j in range(1, 13):
        k = math.isqrt(2 ** (j - 1))
        harmonic = sum(1.0 / b for b in range(1, k + 1))
        mean = explored[j] / runs
        # variance of a sum of Bernoulli(1/b) is <= harmonic; 5 standard errors
        assert abs(mean - harmonic) <= 5 * math.sqrt(harmonic / runs) + 1e-9, (j, mean, harmonic)
        total_observed += mean
        total_expected += harmonic
    assert abs(total_observed / total_expected - 1.0) < 0.05


def test_arm_changes_per_batch_size_never_exceed_bins() -> None:
    """Lemma 1: gamma can only change at a bin start, so changes <= bins, per key."""
    policy = _policy(3)
    trace = Trace(policy, bowl_env({1: 3, 4: 1, 16: 0}), seed=3)
    rng = random.Random(7)
    trace.run([rng.choice((1, 4, 16)) for _ in range(30_000)])
    last: dict[int, int] = {}
    changes: Counter[int] = Counter()
    for num_reqs, gamma, _ in trace.steps:
        if num_reqs in last and last[num_reqs] != gamma:
            changes[num_reqs] += 1
        last[num_reqs] = gamma
    bins = Counter(key for key, *_ in trace.bins)
    for key in (1, 4, 16):
        assert changes[key] <= bins[key]
        # and bins grow like sqrt(T): far fewer than steps
        steps = sum(1 for b, _, _ in trace.steps if b == key)
        assert bins[key] < 4 * math.sqrt(steps) * math.log2(steps)


def test_first_bin_of_every_block_explores() -> None:
    trace = _run_single_key(seed=5, num_steps=2000)
    assert all(explore for _, _, b, explore, _ in trace.bins if b == 1)


def test_unobserved_arms_are_played_first_by_exploitation() -> None:
    policy = _policy(0)
    for gamma in range(policy.gamma_max + 1):
        assert policy.exploit(key=8, num_reqs=8, max_skip_tokens=0) == gamma
        policy.observe(StepResult(8, gamma, 8, 0.01 * (gamma + 1)))
    assert policy.exploit(key=8, num_reqs=8, max_skip_tokens=0) == 0


def test_local_exploration_probes_only_the_exploited_arm_and_its_neighbours() -> None:
    """``exploration="local"``: once every arm has a sample, exploration bins play the
    exploited arm +-1; the paper's uniform probes reach every arm."""
    played: dict[str, set[int]] = {}
    for mode in ("uniform", "local"):
        trace = Trace(_policy(3, exploration=mode), bowl_env({8: 0}, noise_sigma=0.0), 3)
        trace.run([8] * 3000)
        warm = trace.steps[5 * 16 :]  # past the first visits of every arm
        played[mode] = {g for _, g, explore in warm if explore}
    assert played["local"] == {0, 1}
    assert played["uniform"] == {0, 1, 2, 3, 4}


def _bin_starts(trace: Trace) -> list[tuple[int, int, bool]]:
    """(j, b, explored) of each bin start; a capped probe's end repeats (j, b)."""
    starts: list[tuple[int, int, bool]] = []
    for _, j, b, explore, _ in trace.bins:
        if not starts or starts[-1][:2] != (j, b):
            starts.append((j, b, explore))
    return starts


def test_explore_bin_steps_caps_the_probe_and_keeps_the_schedule() -> None:
    """``explore_bin_steps=2``: an exploration bin probes for 2 steps, then exploits for
    the rest of the bin; bins, blocks and exploration draws are those of the paper's."""
    traces = {}
    for cap in (None, 2):
        policy = _policy(3, exploration="local", explore_bin_steps=cap)
        traces[cap] = Trace(policy, bowl_env({8: 2}, noise_sigma=0.0), 3)
        traces[cap].run([8] * 3000)
    assert _bin_starts(traces[2]) == _bin_starts(traces[None])
    step = 0
    for j, _b, explore in _bin_starts(traces[2]):
        length = math.isqrt(2 ** (j - 1))
        played = traces[2].steps[step : step + length]
        probe = min(length, 2) if explore else 0
        assert all(flag for _, _, flag in played[:probe])
        if j >= 7:  # every arm observed long before: the rest of the bin exploits gamma 2
            assert [g for _, g, flag in played[probe:]] == [2] * (len(played) - probe)
            assert not any(flag for _, _, flag in played[probe:])
        step += length
    probe_steps = {cap: sum(flag for _, _, flag in t.steps) for cap, t in traces.items()}
    assert probe_steps[2] * 4 < probe_steps[None]


def test_local_state_round_trips_and_an_older_snapshot_loads_as_not_exploring() -> None:
    """A restored replica resumes every key's block, bin, step and arm where it stopped;
    a snapshot from before ``exploring`` was kept (4 fields a key) loads as exploiting."""
    policy = _policy(5, exploration="local", explore_bin_steps=2)
    Trace(policy, bowl_env({1: 3, 8: 2}), seed=5).run([1, 8] * 300)
    state = policy.local_state()
    restored = _policy(6)
    restored.load_local_state(state)
    assert restored.local_state() == state
    assert any(len(fields) == 6 for fields in state["schedules"])
    old = {
        "prev_gamma": 1,
        "schedules": [[k, j, b, tau, arm] for k, j, b, tau, arm, _ in state["schedules"]],
    }
    restored.load_local_state(old)
    assert [fields[-1] for fields in restored.local_state()["schedules"]] == [False] * len(
        old["schedules"]
    )
    assert [fields[:5] for fields in restored.local_state()["schedules"]] == old["schedules"]
