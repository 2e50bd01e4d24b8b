"""The suite's diagnostics: the context-oracle reads the step's own context, the A/A copies
differ from their setting in step overhead alone (docs/benchmarks.md, workload suite)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.suite_oracles import ContextOracle, ContextServer
from benchmarks.suite_resolution import perturbed
from nightjar_ray.sim.experiments import RunKnobs, batch_oracle, server_options
from nightjar_ray.sim.presets import get_setting
from nightjar_ray.sim.suite import suite_workload


def test_the_fastest_gamma_at_one_batch_size_moves_with_the_context() -> None:
    """On the A100 at B = 128 the KV read of long contexts is what speculation amortizes:
    short contexts play gamma 1, long ones gamma 4 (the batch-oracle reads 512 tokens)."""
    context = [64.0]
    oracle = ContextOracle(get_setting("a100-13b"), lambda: context[0])
    assert oracle.choose(128, 0) == 1
    context[0] = 8192.0
    assert oracle.choose(128, 0) == 4


def test_the_server_hands_the_oracle_its_running_decodes_mean_context() -> None:
    setting = get_setting("rtx4090-7b")
    seen: list[float] = []
    box: list[ContextServer] = []

    def context_tokens() -> float:
        seen.append(box[0].mean_context_tokens)
        return seen[-1]

    options = server_options(setting, batch_oracle(setting, "sharegpt"), "sharegpt", 0, RunKnobs())
    server = ContextServer(setting, ContextOracle(setting, context_tokens), options)
    box.append(server)
    server.run(suite_workload("low", setting, 0, 1, None)[:40])
    assert len(set(seen)) > 10
    assert max(seen) > 512.0 > min(seen)


def test_a_resolution_copy_is_the_setting_with_only_its_step_overhead_longer() -> None:
    setting = get_setting("a100-13b")
    copy = perturbed(setting, 7.0)
    assert copy.overheads.step_overhead_s == pytest.approx(setting.overheads.step_overhead_s + 7e-6)
    assert replace(copy, overheads=setting.overheads) == setting
