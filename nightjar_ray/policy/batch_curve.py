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


class BatchCurve:
    """Steps per token per (key, gamma) (``table``: each step folds ``1 / tokens`` with
    weight ``tokens``, as the other tables fold it), and step time interpolated over B."""

    __slots__ = ("table",)

    def __init__(self, num_arms: int) -> None:
        self.table = ArmTable(num_arms)

    def point(
        self, key: int, gamma: int, latency: ArmTable, reqs: ArmTable
    ) -> tuple[float, float] | None:
        """(B~, T~) of a cell, ``None`` where one of the three tables lacks it."""
        # NOTE: the tables' lists read directly (no ArmTable.get): the gate's reads, every step.
        steps_n, lat_n, req_n = (
            self.table.counts.get(key),
            latency.counts.get(key),
            reqs.counts.get(key),
        )
        if steps_n is None or lat_n is None or req_n is None:
            return None
        n, n_lat, n_req = steps_n[gamma], lat_n[gamma], req_n[gamma]
        if n == 0.0 or n_lat == 0.0 or n_req == 0.0:
            return None
        steps = self.table.sums[key][gamma] / n
        if steps <= 0.0:
            return None
        return reqs.sums[key][gamma] / n_req / steps, latency.sums[key][gamma] / n_lat / steps

    def scale(
        self,
        key: int,
        gamma: int,
        num_reqs: int,
        keys: list[int],
        latency: ArmTable,
        reqs: ArmTable,
    ) -> float:
        """(T(B)/B) / (T~/B~) for ``num_reqs`` in ``key`` (module docstring); 1.0 where
        there is no usable segment. ``keys``: every key of the tables, ascending."""
        own = self.point(key, gamma, latency, reqs)
        if own is None:
            return 1.0
        b_own, t_own = own
        i = keys.index(key)
        ahead = num_reqs >= b_own
        near = _neighbour(self, keys, i, 1 if ahead else -1, gamma, latency, reqs)
        if near is None:
            near = _neighbour(self, keys, i, -1 if ahead else 1, gamma, latency, reqs)
        if near is None:
            return 1.0
        b_near, t_near = near
        if abs(b_near - b_own) < MIN_SPREAD * max(b_near, b_own):
            return 1.0
        t_at = t_own + (t_near - t_own) * (num_reqs - b_own) / (b_near - b_own)
        if t_at <= 0.0:
            return 1.0
        return (t_at / num_reqs) / (t_own / b_own)


def _neighbour(
    curve: BatchCurve, keys: list[int], i: int, step: int, gamma: int, lat: ArmTable, req: ArmTable
) -> tuple[float, float] | None:
    """The nearest key's point in direction ``step`` (+1 larger, -1 smaller) that has one."""
    j = i + step
    while 0 <= j < len(keys):
        point = curve.point(keys[j], gamma, lat, req)
        if point is not None:
            return point
        j += step
    return None
