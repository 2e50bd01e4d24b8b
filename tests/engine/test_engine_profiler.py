"""``benchmarks/profile_switch_cost.py`` measures a C_switch table that grows with L_max."""

from pathlib import Path

import pytest

from benchmarks.profile_switch_cost import main
from nightjar_ray.models.pair import ModelPair
from nightjar_ray.policy import SwitchCostTable

pytestmark = [pytest.mark.engine, pytest.mark.research]


def test_profiler_writes_a_table_whose_cost_grows_with_skip_length(
    lossy_pair: ModelPair, tmp_path: Path
) -> None:
    out = tmp_path / "switch-cost.csv"
    argv = ["--out", str(out), "--target", str(lossy_pair.target_dir)]
    argv += ["--draft", str(lossy_pair.draft_dir), "--skip-tokens", "8,384"]
    argv += ["--batch-sizes", "1,4", "--repeats", "3"]
    assert main(argv) == 0
    table = SwitchCostTable.load(out)
    assert table.skip_grid == (8, 384) and table.batch_grid == (1, 4)
    for batch in (1, 4):
        assert table.cost_s_at(384, batch) > table.cost_s_at(8, batch) > 0.0
    assert table.cost_s_at(384, 4) > table.cost_s_at(384, 1)
