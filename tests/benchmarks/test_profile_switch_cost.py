"""``benchmarks/profile_switch_cost.py`` refuses bad grids and pairs before it starts an
engine, naming the flag (the measurement itself: tests/engine/test_engine_profiler.py,
marked ``research``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import profile_switch_cost


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--skip-tokens", "16,x"], "--skip-tokens: expected comma-separated integers"),
        (["--batch-sizes", ","], "--batch-sizes: empty list"),
        (["--target", "somewhere"], "--target and --draft go together"),
    ],
)
def test_bad_arguments_are_refused_naming_the_flag(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        profile_switch_cost.main(["--out", str(tmp_path / "profile.csv"), *flags])
    assert not (tmp_path / "profile.csv").exists()


def test_grid_refuses_repeats_below_one() -> None:
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        profile_switch_cost.ProfileGrid(repeats=0)
