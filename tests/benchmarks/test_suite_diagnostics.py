"""The suite's diagnostics: the context-oracle reads the step's own context, the A/A copies
differ from their setting in step overhead alone, a sweep over policy seed offsets judges
each cell on its mean (docs/benchmarks.md, workload suite)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.suite_oracles import ContextOracle, ContextServer
from benchmarks.suite_resolution import perturbed
from benchmarks.suite_sweep import CellRatios, mean_over_offsets, offsets_summary
from nightjar_ray.sim.experiments import RunKnobs, batch_oracle, server_options
from nightjar_ray.sim.presets import Setting, get_setting
from nightjar_ray.sim.suite import suite_workload


def test_the_fastest_gamma_at_one_batch_size_moves_with_the_context() -> None:
    """On the A100 at B = 128 the KV read of long contexts is what speculation amortizes:
    short contexts play gamma 1, long ones gamma 4 (the batch-oracle reads 512 tokens)."""
    oracle = ContextOracle(get_setting("a100-13b"))
    oracle.context_tokens = 64.0
    assert oracle.choose(128, 0) == 1
    oracle.context_tokens = 8192.0
    assert oracle.choose(128, 0) == 4


class _Recording(ContextOracle):
    def __init__(self, setting: Setting) -> None:
        super().__init__(setting)
        self.seen: list[float] = []

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        self.seen.append(self.context_tokens)
        return super().choose(num_reqs, max_skip_tokens, num_reqs_ahead)


def test_the_server_hands_the_oracle_its_running_decodes_mean_context() -> None:
    setting = get_setting("rtx4090-7b")
    oracle = _Recording(setting)
    options = server_options(setting, batch_oracle(setting, "sharegpt"), "sharegpt", 0, RunKnobs())
    ContextServer(setting, oracle, options).run(suite_workload("low", setting, 0, 1, None)[:40])
    assert len(set(oracle.seen)) > 10
    assert max(oracle.seen) > 512.0 > min(oracle.seen)


def test_a_resolution_copy_is_the_setting_with_only_its_step_overhead_longer() -> None:
    setting = get_setting("a100-13b")
    copy = perturbed(setting, 7.0)
    assert copy.overheads.step_overhead_s == pytest.approx(setting.overheads.step_overhead_s + 7e-6)
    assert replace(copy, overheads=setting.overheads) == setting


def _ratios(seed: int, e2e: float, thr: float = 1.0, e2e_of_oracle: float = 1.0) -> CellRatios:
    return CellRatios("a100-13b", "high", seed, thr, 1.5, e2e, 0.5 * e2e, "fixed-4", e2e_of_oracle)


def test_a_cell_over_policy_seed_offsets_is_judged_on_its_mean() -> None:
    """A cell that misses 1.03x at one offset passes on its mean over the offsets, one that
    misses on average does not; "at every offset" counts the cells that never miss. Read
    against the throughput-best static's mean E2E, the cells are counted on that ratio."""
    runs = [
        [_ratios(0, 1.04), _ratios(1, 1.05), _ratios(2, 1.00, e2e_of_oracle=1.05)],
        [_ratios(0, 1.00), _ratios(1, 1.02), _ratios(2, 1.01, thr=0.95, e2e_of_oracle=1.02)],
    ]
    mean = mean_over_offsets(runs)
    assert [round(c.e2e_of_best_static, 3) for c in mean] == [1.02, 1.035, 1.005]
    cold = offsets_summary("nightjar", [0, 1000], runs)
    assert "in 2/3 (per offset [1, 3], at every offset 1/3)" in cold[0]
    assert "throughput-best static's mean E2E: E2E <= 1.03x in 2/3 (per offset [2, 3])" in cold[1]
    assert [line.split()[2] for line in cold[3:]] == ["s1"]
    warm = offsets_summary("nightjar-warm", [0, 1000], runs)
    assert [line.split()[2] for line in warm[3:]] == ["s1", "s2"]
