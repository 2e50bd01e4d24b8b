"""``nightjar-ray profile-switch-cost`` writes the C_switch table of the catch-ups it timed.

Whether the cost grows with L_max on this machine is a timing, which the benchmark
reports; here each cell must be a measured catch-up of B requests lagging L tokens (the
profiler fails unless it observes one) and the table must hold what it printed.
"""

import re
from pathlib import Path

import pytest

from nightjar_ray.cli.main import main
from nightjar_ray.models.pair import ModelPair
from nightjar_ray.policy import SwitchCostTable

pytestmark = [pytest.mark.engine, pytest.mark.research]

PROGRESS = re.compile(r"L_max=\s*(\d+) B=\s*(\d+) C_switch=\s*([\d.]+) ms")


def test_profiler_writes_a_table_of_the_catch_ups_it_timed(
    lossy_pair: ModelPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "switch-cost.csv"
    argv = ["profile-switch-cost", "--device", "cpu", "--out", str(out)]
    argv += ["--target", str(lossy_pair.target_dir), "--draft", str(lossy_pair.draft_dir)]
    argv += ["--skip-tokens", "8,384", "--batch-sizes", "1,4", "--repeats", "1"]
    assert main(argv) == 0
    table = SwitchCostTable.load(out)
    assert table.skip_grid == (8, 384) and table.batch_grid == (1, 4)
    printed = capsys.readouterr().out
    points = [(int(s), int(b), float(ms)) for s, b, ms in PROGRESS.findall(printed)]
    assert [(s, b) for s, b, _ in points] == [(8, 1), (8, 4), (384, 1), (384, 4)]
    for skip, batch, cost_ms in points:
        assert cost_ms > 0.0, (skip, batch)
        assert table.cost_s_at(skip, batch) * 1e3 == pytest.approx(cost_ms, abs=1e-3)
    assert f"  switch_cost_profile: {out.resolve()}\n" in printed
