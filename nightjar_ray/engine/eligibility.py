"""Which requests of a step the draft runs over, by req_id (pure Python).

The step driver says which requests of a step the draft skips as indices into the
step's order (``StepDriver.last_undrafted``); the scheduler names them by req_id for
its lag tracker, the workers (``StepMessage.undrafted_req_ids``) and the next step's
draft verification. ``testing.forced_undrafted_cycle`` replaces the driver's verdict
with a fixed pattern (:class:`ForcedUndrafted`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from nightjar_ray.engine.testing_config import TestingConfig


def undrafted_req_ids(indices: Collection[int], starts: Mapping[str, int]) -> frozenset[str]:
    """The req_ids at ``indices`` of the step's order (that of ``starts``)."""
    if not indices:
        return frozenset()
    req_ids = list(starts)
    return frozenset(req_ids[i] for i in indices)


def drafted_req_ids(
    starts: Mapping[str, int], gamma: int, undrafted: frozenset[str]
) -> Collection[str]:
    """The step's requests the draft runs over: none at gamma 0, else all but
    ``undrafted``."""
    if gamma == 0:
        return ()
    return starts.keys() - undrafted if undrafted else starts.keys()


class ForcedUndrafted:
    """``testing.forced_undrafted_cycle``: requests numbered in arrival order, steps
    counted from the engine's first (``TestingConfig.forced_undrafted``)."""

    def __init__(self, testing: TestingConfig) -> None:
        self._testing = testing
        self._arrivals: dict[str, int] = {}
        self._num_arrivals = 0
        self._step = -1

    def begin_step(self, starts: Mapping[str, int], finished_req_ids: Iterable[str]) -> None:
        """Number the step's new requests, forget finished ones, count the step."""
        for req_id in finished_req_ids:
            self._arrivals.pop(req_id, None)
        for req_id in starts:
            if req_id not in self._arrivals:
                self._arrivals[req_id] = self._num_arrivals
                self._num_arrivals += 1
        self._step += 1

    def undrafted(self, starts: Mapping[str, int]) -> frozenset[str]:
        """The step's requests the pattern skips."""
        rule, step = self._testing.forced_undrafted, self._step
        return frozenset(r for r in starts if rule(self._arrivals[r], step))
