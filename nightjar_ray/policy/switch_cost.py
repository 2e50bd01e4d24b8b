"""Switch cost C_switch(L_max, B): the draft KV catch-up cost after gamma=0.

The profile is a CSV with the columns of the paper's Table 3::

    max_skip_tokens,num_reqs,switch_cost_ms
    128,32,17.87
    128,64,28.53
    ...

Rows must cover a full rectangular grid (every skip length with every batch
size). Between grid points the cost is interpolated bilinearly; outside the
grid the query is clamped to the nearest edge (no extrapolation). The
profiler (``nightjar-ray profile-switch-cost``) writes this format.
"""

from __future__ import annotations

import bisect
import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

COLUMNS = ("max_skip_tokens", "num_reqs", "switch_cost_ms")


def _bracket(grid: Sequence[float], x: float) -> tuple[int, int, float]:
    """Indices (lo, hi) around ``x`` in ``grid`` and the weight of ``hi`` (clamped)."""
    if x <= grid[0]:
        return 0, 0, 0.0
    if x >= grid[-1]:
        last = len(grid) - 1
        return last, last, 0.0
    hi = bisect.bisect_right(grid, x)
    lo = hi - 1
    return lo, hi, (x - grid[lo]) / (grid[hi] - grid[lo])


@dataclass(frozen=True)
class SwitchCostTable:
    """C_switch in seconds on a (max_skip_tokens x num_reqs) grid."""

    skip_grid: tuple[int, ...]
    batch_grid: tuple[int, ...]
    cost_s: tuple[tuple[float, ...], ...]
    """``cost_s[i][j]`` is the cost at ``skip_grid[i]``, ``batch_grid[j]``."""

    def __post_init__(self) -> None:
        if not self.skip_grid or not self.batch_grid:
            raise ValueError("switch-cost table needs at least one grid point")
        for name, grid in (("max_skip_tokens", self.skip_grid), ("num_reqs", self.batch_grid)):
            if list(grid) != sorted(set(grid)):
                raise ValueError(f"switch-cost {name} grid must be strictly increasing")
        if len(self.cost_s) != len(self.skip_grid) or any(
            len(row) != len(self.batch_grid) for row in self.cost_s
        ):
            raise ValueError("switch-cost values do not match the grid shape")
        if any(c < 0 for row in self.cost_s for c in row):
            raise ValueError("switch_cost_ms must be >= 0")

    @classmethod
    def constant(cls, cost_s: float) -> SwitchCostTable:
        """A table that returns ``cost_s`` everywhere (0 disables the penalty)."""
        return cls((0,), (1,), ((cost_s,),))

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[int, int, float]]) -> SwitchCostTable:
        """Build from (max_skip_tokens, num_reqs, switch_cost_ms) rows."""
        points: dict[tuple[int, int], float] = {}
        for skip, batch, cost_ms in rows:
            if (skip, batch) in points:
                raise ValueError(f"duplicate switch-cost row for ({skip}, {batch})")
            points[(skip, batch)] = cost_ms / 1e3
        skips = tuple(sorted({s for s, _ in points}))
        batches = tuple(sorted({b for _, b in points}))
        missing = [(s, b) for s in skips for b in batches if (s, b) not in points]
        if missing:
            raise ValueError(f"switch-cost grid is not rectangular; missing {missing[:5]}")
        cost = tuple(tuple(points[(s, b)] for b in batches) for s in skips)
        return cls(skips, batches, cost)

    @classmethod
    def load(cls, path: str | Path) -> SwitchCostTable:
        """Read a profile CSV (see module docstring)."""
        with open(path, newline="") as f:
            return cls.from_csv_lines(f, str(path))

    @classmethod
    def builtin(cls, name: str) -> SwitchCostTable:
        """A profile shipped with the package, e.g. ``paper-rtx4090-7b``."""
        ref = resources.files("nightjar_ray.policy") / "profiles" / f"{name}.csv"
        if not ref.is_file():
            raise ValueError(f"no built-in switch-cost profile named {name!r}")
        return cls.from_csv_lines(ref.read_text().splitlines(), name)

    @classmethod
    def from_csv_lines(cls, lines: Iterable[str], source: str) -> SwitchCostTable:
        reader = csv.DictReader(line for line in lines if not line.startswith("#"))
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"{source}: switch-cost header must be {','.join(COLUMNS)}")
        try:
            rows = [
                (int(r["max_skip_tokens"]), int(r["num_reqs"]), float(r["switch_cost_ms"]))
                for r in reader
            ]
        except (TypeError, ValueError) as e:
            raise ValueError(f"{source}: bad switch-cost row: {e}") from e
        return cls.from_rows(rows)

    def rows(self) -> list[tuple[int, int, float]]:
        """(max_skip_tokens, num_reqs, switch_cost_ms) rows, grid order."""
        return [
            (s, b, self.cost_s[i][j] * 1e3)
            for i, s in enumerate(self.skip_grid)
            for j, b in enumerate(self.batch_grid)
        ]

    def save(self, path: str | Path) -> None:
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(COLUMNS)
            writer.writerows((s, b, f"{ms:.4f}") for s, b, ms in self.rows())

    def cost_s_at(self, max_skip_tokens: int, num_reqs: int) -> float:
        """C_switch in seconds, bilinear inside the grid, clamped outside."""
        i0, i1, wi = _bracket(self.skip_grid, max_skip_tokens)
        j0, j1, wj = _bracket(self.batch_grid, num_reqs)
        c = self.cost_s
        low = c[i0][j0] + (c[i0][j1] - c[i0][j0]) * wj
        high = c[i1][j0] + (c[i1][j1] - c[i1][j0]) * wj
        return low + (high - low) * wi
