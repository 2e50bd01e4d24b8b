"""Step time as a curve over the batch size: estimates at the exact B, not the key's mean.

A pow2 key pools every batch size in (k/2, k]. Where an arm's rank changes inside a key
(speculation wins at B = 70 and loses at B = 120, both key 128), the key's mean picks one
arm for the whole range. Step time itself is smooth in B (weights read once, plus work
per request), so each (key, gamma) cell also keeps its mean step time at its mean batch
size, and the estimate at B interpolates step time between the points of neighbouring
keys of the same gamma (pure Python, no vllm/ray import)::

    T(B)  |                        *  key 256: (B~256, T~256)
          |             *  key 128: (B~128, T~128)
          |      * key 64
          +----------------------------- B
    l^[B, gamma] = l^[key, gamma] * (T(B) / B) / (T~key / B~key)

i.e. the key's estimate (``factored``: step time over shrunk tokens per request) scaled by
how the time per request at B differs from the key's mean. Between two points the segment
through them; beyond the outermost point the segment to its nearest neighbour, extended
to the key's own bound at most; a cell with no usable neighbour keeps the key's estimate.
Two points closer than ``MIN_SPREAD`` x the larger B~ are not a segment (their slope is
noise).

Stored as one table of steps per token (count: tokens, the other tables' counts), so
with ``latency_per_token_s`` (sum(T)/tokens) and ``reqs_per_token`` (sum(B)/tokens)::

    T~ = sum(T) / steps = latency_per_token_s / steps_per_token
    B~ = sum(B) / steps = reqs_per_token / steps_per_token

and it merges across replicas exactly, as they do.
"""

from __future__ import annotations

from nightjar_ray.policy.stats import ArmTable

STEPS_TABLE = "steps_per_token"
MIN_SPREAD = 0.2
"""Smallest gap between two points' batch sizes, as a fraction of the larger."""

_Points = list[tuple[float, float] | None]
"""(B~, T~) per gamma of one key, ``None`` where a cell is missing."""
_Rows = tuple[list[float], list[float], list[float]]
"""One key's count rows in the steps, latency and requests tables."""


class BatchCurve:
    """Steps per token per (key, gamma) (``table``: each step folds ``1 / tokens`` with
    weight ``tokens``, as the other tables fold it), and step time interpolated over B."""

    __slots__ = ("_points", "table")

    def __init__(self, num_arms: int) -> None:
        self.table = ArmTable(num_arms)
        self._points: dict[int, tuple[_Rows, _Rows, _Points]] = {}
        """key -> its three count rows, copies of them as they were, its points then."""

    def points(self, key: int, latency: ArmTable, reqs: ArmTable) -> _Points | None:
        """(B~, T~) of each gamma's cell of ``key`` (``None`` where one of the three tables
        lacks it); ``None`` where one of the tables has no row for ``key``. Kept per key
        while its three count rows are the same lists holding the same counts: every fold
        adds to them (the sums change only with them) and a load replaces them. The list
        returned is the one kept: read it, do not change it."""
        steps_n, lat_n, req_n = (
            self.table.counts.get(key),
            latency.counts.get(key),
            reqs.counts.get(key),
        )
        if steps_n is None or lat_n is None or req_n is None:
            return None
        rows = (steps_n, lat_n, req_n)
        kept = self._points.get(key)
        if kept is not None and _unchanged(kept[0], kept[1], rows):
            return kept[2]
        points = self._compute_points(key, steps_n, lat_n, req_n, latency, reqs)
        self._points[key] = (rows, (list(steps_n), list(lat_n), list(req_n)), points)
        return points

    def _compute_points(
        self,
        key: int,
        steps_n: list[float],
        lat_n: list[float],
        req_n: list[float],
        latency: ArmTable,
        reqs: ArmTable,
    ) -> _Points:
        """``points`` of ``key`` from the three tables' rows (``*_n``: their counts)."""
        # NOTE: the tables' lists read directly, every gamma in one pass: the gate's reads.
        rows = zip(  # noqa: B905 (every row is num_arms long; strict= is a slower call)
            steps_n, self.table.sums[key], lat_n, latency.sums[key], req_n, reqs.sums[key]
        )
        out: _Points = []
        for n, steps_sum, n_lat, lat_sum, n_req, req_sum in rows:
            if n == 0.0 or n_lat == 0.0 or n_req == 0.0 or steps_sum <= 0.0:
                out.append(None)
                continue
            steps = steps_sum / n
            out.append((req_sum / n_req / steps, lat_sum / n_lat / steps))
        return out

    def scales(
        self, key: int, num_reqs: int, keys: list[int], latency: ArmTable, reqs: ArmTable
    ) -> list[float]:
        """(T(B)/B) / (T~/B~) per gamma for ``num_reqs`` in ``key`` (module docstring); 1.0
        where there is no usable segment. ``keys``: every key of the tables, ascending."""
        own_points = self.points(key, latency, reqs)
        if own_points is None:
            return [1.0] * self.table.num_arms
        i = keys.index(key)
        larger: _Points | None = None
        smaller: _Points | None = None
        out = []
        for gamma, own in enumerate(own_points):
            if own is None:
                out.append(1.0)
                continue
            # NOTE: each side's nearest points are read once (a ``_nearest`` list is never
            # empty, so ``or`` keeps it), the other side only where this one has none.
            if num_reqs >= own[0]:
                larger = larger or self._nearest(keys, i, 1, latency, reqs)
                near = larger[gamma]
                if near is None:
                    smaller = smaller or self._nearest(keys, i, -1, latency, reqs)
                    near = smaller[gamma]
            else:
                smaller = smaller or self._nearest(keys, i, -1, latency, reqs)
                near = smaller[gamma]
                if near is None:
                    larger = larger or self._nearest(keys, i, 1, latency, reqs)
                    near = larger[gamma]
            out.append(1.0 if near is None else _segment_scale(own, near, num_reqs))
        return out

    def _nearest(
        self, keys: list[int], i: int, step: int, latency: ArmTable, reqs: ArmTable
    ) -> _Points:
        """Per gamma, the point of the nearest key in direction ``step`` from ``keys[i]``
        that has one (``None``: no key that way has one)."""
        out: _Points = [None] * self.table.num_arms
        missing = len(out)
        j = i + step
        while missing and 0 <= j < len(keys):
            points = self.points(keys[j], latency, reqs)
            j += step
            if points is None:
                continue
            for gamma, point in enumerate(points):
                if out[gamma] is None and point is not None:
                    out[gamma] = point
                    missing -= 1
        return out


def _unchanged(kept: _Rows, copies: _Rows, rows: _Rows) -> bool:
    """``rows`` are the lists ``kept`` and hold what ``copies`` do."""
    return kept[0] is rows[0] and kept[1] is rows[1] and kept[2] is rows[2] and copies == rows


def _segment_scale(own: tuple[float, float], near: tuple[float, float], num_reqs: int) -> float:
    """(T(B)/B) / (T~/B~) on the segment through ``own`` and ``near`` (1.0: not a segment,
    or step time not positive at B)."""
    b_own, t_own = own
    b_near, t_near = near
    if abs(b_near - b_own) < MIN_SPREAD * max(b_near, b_own):
        return 1.0
    t_at = t_own + (t_near - t_own) * (num_reqs - b_own) / (b_near - b_own)
    if t_at <= 0.0:
        return 1.0
    return (t_at / num_reqs) / (t_own / b_own)
