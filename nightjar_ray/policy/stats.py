"""Sufficient statistics that policies learn, and that merge across replicas.

Every learned quantity is a count-weighted mean per (key, gamma) cell, where
``key`` is a batch-size key (after bucketing; 0 for context-free policies).
Two replicas' statistics merge exactly: the merged cell has
``count = n1 + n2`` and ``mean = (n1*m1 + n2*m2) / (n1 + n2)``, which is the
mean over the union of their observations. A few scalars (for example the
largest goodput ever seen, used to normalize bandit rewards) merge by ``max``.

Layout of one table inside a policy (``ArmTable``)::

    key (batch size) -> counts[gamma 0..G], sums[gamma 0..G]     mean = sum / count
        1            -> [n0, n1, ..., nG],  [s0, s1, ..., sG]
        2            -> ...

Lists indexed by gamma keep the hot path cheap: folding a step is two additions, ranking
the arms one division per arm.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Cell = tuple[float, float]
"""(count, mean) of one (key, gamma) cell."""

SNAPSHOT_VERSION = 1


class ArmTable:
    """Mutable count/sum accumulators per (key, gamma); owned by one policy. A cell's mean
    is its sum of weighted values over its count (what ``PolicyStats`` carries)."""

    __slots__ = ("counts", "num_arms", "sums")

    def __init__(self, num_arms: int) -> None:
        if num_arms < 1:
            raise ValueError(f"num_arms must be >= 1, got {num_arms}")
        self.num_arms = num_arms
        self.counts: dict[int, list[float]] = {}
        """key -> per gamma: the sum of weights folded."""
        self.sums: dict[int, list[float]] = {}
        """key -> per gamma: the sum of weight x value folded."""

    def counts_row(self, key: int) -> list[float]:
        """Counts for ``key``, the row created empty on first use."""
        counts = self.counts.get(key)
        if counts is None:
            counts = self.counts[key] = [0.0] * self.num_arms
            self.sums[key] = [0.0] * self.num_arms
        return counts

    def rows(self, key: int) -> tuple[list[float], list[float]]:
        """The counts and sums lists of ``key`` themselves (created empty on first use), for
        a hot path that folds into them in place; ``load`` replaces them."""
        return self.counts_row(key), self.sums[key]

    def row(self, key: int) -> tuple[list[float], list[float]]:
        """Counts and means (a new list) for ``key``, created empty on first use."""
        return self.counts_row(key), self.mean_row(key)

    def mean_row(self, key: int) -> list[float]:
        """Means per gamma of ``key`` (a new list; 0.0 where a cell has no count)."""
        counts, sums = self.counts[key], self.sums[key]
        # NOTE: both rows are num_arms long; strict= is a slower call (the gate's reads).
        return [t / n if n > 0.0 else 0.0 for n, t in zip(counts, sums)]  # noqa: B905

    def update(self, key: int, gamma: int, value: float, weight: float = 1.0) -> None:
        """Fold ``value`` with ``weight`` into the cell."""
        self.add(key, gamma, value * weight, weight)

    def add(self, key: int, gamma: int, total: float, weight: float) -> None:
        """Fold observations of total weight ``weight`` whose weighted values sum to
        ``total`` (a token-weighted mean of d/n folds d with weight n)."""
        counts = self.counts.get(key)
        if counts is None:
            counts = self.counts_row(key)
        counts[gamma] += weight
        self.sums[key][gamma] += total

    def get(self, key: int, gamma: int) -> Cell | None:
        """(count, mean) of a cell, or ``None`` if never observed."""
        counts = self.counts.get(key)
        if counts is None or counts[gamma] == 0.0:
            return None
        return counts[gamma], self.sums[key][gamma] / counts[gamma]

    def cells(self) -> Iterator[tuple[int, int, float, float]]:
        """Observed cells as (key, gamma, count, mean)."""
        for key in sorted(self.counts):
            counts, sums = self.counts[key], self.sums[key]
            for gamma in range(self.num_arms):
                if counts[gamma] > 0.0:
                    yield key, gamma, counts[gamma], sums[gamma] / counts[gamma]

    def export(self) -> dict[tuple[int, int], Cell]:
        return {(k, g): (n, m) for k, g, n, m in self.cells()}

    def load(self, cells: Mapping[tuple[int, int], Cell]) -> None:
        """Replace contents with ``cells``; gammas beyond ``num_arms`` are refused."""
        self.counts.clear()
        self.sums.clear()
        for (key, gamma), (count, mean) in cells.items():
            if not 0 <= gamma < self.num_arms:
                raise ValueError(f"stats cell gamma={gamma} outside [0, {self.num_arms - 1}]")
            if count < 0:
                raise ValueError(f"stats cell ({key}, {gamma}) has negative count {count}")
            counts = self.counts_row(key)
            counts[gamma], self.sums[key][gamma] = count, count * mean


@dataclass(frozen=True)
class PolicyStats:
    """Immutable, mergeable export of a policy's learned statistics."""

    policy: str
    tables: Mapping[str, Mapping[tuple[int, int], Cell]] = field(default_factory=dict)
    maxima: Mapping[str, float] = field(default_factory=dict)

    def merge(self, other: PolicyStats) -> PolicyStats:
        """Statistics of the union of both sides' observations."""
        if other.policy != self.policy:
            raise ValueError(f"cannot merge stats of {self.policy!r} with {other.policy!r}")
        tables: dict[str, dict[tuple[int, int], Cell]] = {}
        for name in sorted(set(self.tables) | set(other.tables)):
            merged = dict(self.tables.get(name, {}))
            for cell, (n2, m2) in other.tables.get(name, {}).items():
                n1, m1 = merged.get(cell, (0.0, 0.0))
                n = n1 + n2
                merged[cell] = (n, (n1 * m1 + n2 * m2) / n if n > 0 else 0.0)
            tables[name] = merged
        maxima = dict(self.maxima)
        for name, value in other.maxima.items():
            maxima[name] = max(value, maxima.get(name, value))
        return PolicyStats(self.policy, tables, maxima)

    def total_count(self, table: str) -> float:
        """Sum of counts over all cells of ``table``."""
        return sum(n for n, _ in self.tables.get(table, {}).values())

    def to_json(self) -> dict[str, Any]:
        return {
            "version": SNAPSHOT_VERSION,
            "policy": self.policy,
            "tables": {
                name: [[k, g, n, m] for (k, g), (n, m) in sorted(cells.items())]
                for name, cells in sorted(self.tables.items())
            },
            "maxima": dict(sorted(self.maxima.items())),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PolicyStats:
        if data.get("version") != SNAPSHOT_VERSION:
            raise ValueError(
                f"stats snapshot version {data.get('version')!r} != {SNAPSHOT_VERSION}"
            )
        tables = {
            str(name): {(int(k), int(g)): (float(n), float(m)) for k, g, n, m in rows}
            for name, rows in data.get("tables", {}).items()
        }
        maxima = {str(k): float(v) for k, v in data.get("maxima", {}).items()}
        return cls(str(data["policy"]), tables, maxima)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> PolicyStats:
        return cls.from_json(json.loads(Path(path).read_text()))
