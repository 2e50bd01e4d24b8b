"""The self-check's switch-cost line: C_switch(L_max, B) profiled on the pair, written
where the deploy config can read it.

One profiler engine (``engine/switch_cost_profiler.py``: the same target, draft, device
and tensor parallelism as the check's engines, the profiler's own sizes) times the draft
catch-up over :data:`SELFCHECK_GRID` (small, so the check stays short; ``full=True``:
the profiler's default grid) and saves the CSV; the line passes when the policy's own
loader (``SwitchCostTable.load``) reads back every grid point with a positive cost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nightjar_ray.engine.offline import ModelSources
from nightjar_ray.engine.selfcheck_report import CheckLine
from nightjar_ray.engine.switch_cost_profiler import (
    PROFILER_OWNED,
    Device,
    ProfileGrid,
    ProfilerEngine,
    profile_switch_cost,
    profiler_engine,
)
from nightjar_ray.policy import SwitchCostTable

SELFCHECK_GRID = ProfileGrid(skip_tokens=(16, 64), batch_sizes=(1, 2), repeats=1)
"""The self-check's default grid: 4 points, one sample each (after the profiler's
unrecorded pass). The deploy's ``nightjar-paper`` policy clamps outside the grid."""
FULL_GRID = ProfileGrid()
"""``--full-switch-cost-grid``: the profiler's default (``profile-switch-cost``'s)."""


def profiler_of(
    models: ModelSources,
    device: Device,
    tensor_parallel_size: int,
    seed: int,
    engine_overrides: Mapping[str, Any],
) -> ProfilerEngine:
    """The profiled engine of a self-check: its pair, device and TP; the user's engine
    kwargs except those the profiler sets itself."""
    args = {k: v for k, v in engine_overrides.items() if k not in PROFILER_OWNED}
    engine_args = {"dtype": models.dtype, "seed": seed, **args}
    return ProfilerEngine(models.target, models.draft, device, tensor_parallel_size, engine_args)


def profile_to_csv(engine: ProfilerEngine, grid: ProfileGrid, out: Path) -> None:
    """Profile ``grid`` on a started profiler engine and save the CSV to ``out``."""
    with profiler_engine(engine, grid) as llm:
        table = profile_switch_cost(llm, grid)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.save(out)


def switch_cost_line(name: str, out: Path, grid: ProfileGrid) -> CheckLine:
    """PASS when ``out`` loads with the policy's loader, holds every point of ``grid``
    and every cost is positive; the detail names the deploy config's line."""
    try:
        table = SwitchCostTable.load(out)
    except (OSError, ValueError) as e:
        return CheckLine(name, False, f"{out} does not load: {e}")
    rows = table.rows()
    figures = {
        "path": str(out.resolve()),
        "skip_tokens": list(table.skip_grid),
        "batch_sizes": list(table.batch_grid),
        "switch_cost_ms": [[s, b, ms] for s, b, ms in rows],
    }
    wanted = (tuple(grid.skip_tokens), tuple(grid.batch_sizes))
    if (table.skip_grid, table.batch_grid) != wanted:
        detail = (
            f"{out} holds L_max {list(table.skip_grid)} x B {list(table.batch_grid)}, not the "
            f"profiled {list(wanted[0])} x {list(wanted[1])}"
        )
        return CheckLine(name, False, detail, figures)
    bad = [(s, b) for s, b, ms in rows if not (ms > 0 and math.isfinite(ms))]
    if bad:
        return CheckLine(name, False, f"C_switch not positive at (L_max, B) {bad}", figures)
    costs = [ms for _, _, ms in rows]
    detail = (
        f"C_switch {min(costs):.3g}..{max(costs):.3g} ms over L_max {list(table.skip_grid)} x "
        f"B {list(table.batch_grid)}, loads as a profile; deploy config: "
        f"switch_cost_profile: {out.resolve()}"
    )
    return CheckLine(name, True, detail, figures)
