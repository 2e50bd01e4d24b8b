"""The batch-oracle diagnostic: the cost model's fastest gamma per batch size."""

from __future__ import annotations

from itertools import pairwise

import pytest

from nightjar_ray.cli.main import main
from nightjar_ray.sim.calibration import token_latency_s
from nightjar_ray.sim.experiments import (
    BATCH_ORACLE_CONTEXT_TOKENS,
    batch_oracle,
    run_contender,
)
from nightjar_ray.sim.metrics import summarize
from nightjar_ray.sim.presets import SETTINGS, get_setting
from nightjar_ray.sim.scenario import WorkloadConfig, build_workload


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_table_plays_the_cost_models_fastest_gamma_at_every_batch_size(name: str) -> None:
    setting = get_setting(name)
    oracle = batch_oracle(setting, "sharegpt", gamma_max=4)
    table = oracle.params["num_speculative_tokens_per_batch_size"]
    assert table[0][0] == 1 and table[-1][1] >= 1 << 20
    assert all(hi + 1 == lo for (_, hi, _), (lo, _, _) in pairwise(table))
    acc = setting.acceptance_for("sharegpt")
    for lo, hi, gamma in table:
        for b in {lo, (lo + min(hi, setting.max_num_seqs)) // 2, min(hi, setting.max_num_seqs)}:
            lat = [
                token_latency_s(setting, b, g, BATCH_ORACLE_CONTEXT_TOKENS, acc) for g in range(5)
            ]
            assert lat[gamma] == min(lat), (b, gamma, lat)
    # SD pays at small batches and not at the largest on every preset
    assert table[0][2] >= 3 and table[-1][2] <= 1
    assert oracle.skip_draft and oracle.elastic


def test_batch_oracle_runs_as_nightjar_does_and_speculates_when_idle() -> None:
    setting = get_setting("rtx4090-7b")
    cfg = WorkloadConfig.model_validate({"arrival": "poisson", "qps": 1.0, "num_requests": 30})
    wl = build_workload(cfg, setting, "sharegpt", 0)
    result = run_contender(setting, batch_oracle(setting, "sharegpt"), wl, "sharegpt", 0)
    assert summarize(result).mean_gamma >= 2.5  # small batches: gamma 3 from the table
    assert len(result.records) == 30


def test_compare_with_batch_oracle_adds_its_column(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "compare", "--setting", "a100-13b", "--qps", "2", "--num-requests", "40"]
    code = main(
        [*argv, "--no-trace", "--contenders", "nightjar,batch-oracle", "--with-batch-oracle"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "| load | nightjar | off | batch-oracle | oracle |" in out
