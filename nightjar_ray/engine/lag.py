"""Which draft KV positions are missing after gamma=0 steps (pure Python).

With a true gamma=0 the draft model does not run, so the target advances
while the draft's KV cache keeps holes. Per request we keep the first
position the draft is missing (``stale_from``)::

    positions   0 ............ stale_from ........ start | this step's tokens
    draft KV    [ written by earlier draft passes ][ hole ]
    target KV   [ written .......................................]

When speculation resumes, the worker runs a draft-only forward over
``[stale_from, start)`` (the catch-up, whose cost is C_switch) before the
regular draft pass covers the step's own tokens. The lag of a request is
``start - stale_from`` tokens; the scheduler's L_max is the largest lag in
the step.

The scheduler (engine-core process) and every worker drive one tracker each
from the same ``SchedulerOutput`` fields, so both sides agree on the lags
without any extra message.

Rules (one call to :meth:`begin_step`, then :meth:`end_step` per step):

- finished and preempted requests are forgotten;
- a request seen for the first time (or resumed after preemption) whose
  ``start`` is > 0 got a prefix-cache hit on blocks whose draft KV may have
  been skipped: it is treated as stale from position 0 (conservative: costs
  a catch-up, never correctness);
- after a step, every request the draft ran over (``drafted``) is in sync and every
  other request of the step is stale from its ``start`` (unless it already was): a step
  with gamma = 0 drafts none, one with gamma > 0 all but the ineligible requests
  (per-request draft eligibility, ``driver/draft_gate.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class CatchUpSpan:
    """Draft KV positions ``[start_pos, end_pos)`` of request ``req_id`` to fill."""

    req_id: str
    start_pos: int
    end_pos: int

    @property
    def num_tokens(self) -> int:
        return self.end_pos - self.start_pos


class DraftLagTracker:
    """Per-request first missing draft position; see module docstring."""

    def __init__(self) -> None:
        self._stale_from: dict[str, int] = {}
        self._known: set[str] = set()

    def begin_step(
        self,
        starts: Mapping[str, int],
        finished_req_ids: Iterable[str] = (),
        resumed_req_ids: Iterable[str] = (),
    ) -> None:
        """Update membership for a step that computes ``starts`` (req_id ->
        number of tokens computed before the step)."""
        for req_id in finished_req_ids:
            self.forget(req_id)
        for req_id in resumed_req_ids:
            self.forget(req_id)
        for req_id, start in starts.items():
            if req_id not in self._known:
                self._known.add(req_id)
                if start > 0:
                    self._stale_from[req_id] = 0

    def forget(self, req_id: str) -> None:
        self._known.discard(req_id)
        self._stale_from.pop(req_id, None)

    def lag_tokens(self, req_id: str, start: int) -> int:
        """Tokens request ``req_id`` is behind on the draft at ``start``."""
        stale = self._stale_from.get(req_id)
        return 0 if stale is None else max(0, start - stale)

    def max_lag_tokens(self, starts: Mapping[str, int]) -> int:
        """L_max of a step: the largest lag among its requests (0 if none)."""
        return max((self.lag_tokens(r, s) for r, s in starts.items()), default=0)

    def spans(self, starts: Mapping[str, int]) -> list[CatchUpSpan]:
        """Catch-up spans of the step's lagging requests (empty spans omitted)."""
        out = []
        for req_id, start in starts.items():
            stale = self._stale_from.get(req_id)
            if stale is not None and stale < start:
                out.append(CatchUpSpan(req_id, stale, start))
        return out

    def end_step(self, starts: Mapping[str, int], drafted: Collection[str]) -> None:
        """Record which of the step's requests the draft processed (``drafted``: their
        lag was caught up and this step's tokens went through the draft); the others
        go stale from their ``start``."""
        for req_id, start in starts.items():
            if req_id in drafted:
                self._stale_from.pop(req_id, None)
            else:
                self._stale_from.setdefault(req_id, start)

    def invalidate_all(self) -> None:
        """The draft's KV cache is gone (elastic memory released it): every known
        request is stale from position 0, so the catch-up rebuilds it whole."""
        for req_id in self._known:
            self._stale_from[req_id] = 0

    @property
    def num_stale(self) -> int:
        return len(self._stale_from)
