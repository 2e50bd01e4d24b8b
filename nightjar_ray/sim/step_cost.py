"""Duration of one engine step from the roofline (``roofline.py``).

::

    step = overhead (+ spec overhead if gamma > 0)
         + draft pass 1 over each request's pending token / prefill chunk + its lag (catch-up)
         + (gamma - 1) draft passes of one token per decode
         + target pass over prefill chunks + B * (gamma + 1) verification tokens

``catchup_s`` is the part of draft pass 1 caused by lagging tokens: the simulator's
C_switch (paper §4.2, Table 3), paid on the first speculative step after gamma = 0 steps.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from nightjar_ray.sim.hardware import EngineOverheads
from nightjar_ray.sim.roofline import ForwardBatch, Roofline, attn_pairs
from nightjar_ray.sim.scheduler import ScheduledStep, SimRequest


@dataclass(frozen=True)
class StepCost:
    total_s: float
    target_s: float
    draft_s: float
    catchup_s: float


class _Acc:
    """Accumulates a ForwardBatch over requests."""

    __slots__ = ("kv", "logits", "pairs", "tokens")

    def __init__(self) -> None:
        self.tokens = self.logits = self.kv = self.pairs = 0

    def add(self, num_query: int, num_context: int, num_logits: int) -> None:
        self.tokens += num_query
        self.logits += num_logits
        self.kv += num_context + num_query
        self.pairs += attn_pairs(num_query, num_context)

    def batch(self) -> ForwardBatch:
        return ForwardBatch(self.tokens, self.logits, self.kv, self.pairs)


@dataclass(frozen=True)
class StepCostModel:
    """Step durations for one target (and optional draft) deployment."""

    target: Roofline
    draft: Roofline | None
    overheads: EngineOverheads

    def cost(
        self, step: ScheduledStep, draft_runs: bool, undrafted: Collection[SimRequest] = ()
    ) -> StepCost:
        """The step's time; the draft runs over the requests not in ``undrafted`` (those
        verify no drafts: one token each)."""
        gamma = step.gamma
        verify = _Acc()
        num_drafted = 0
        for req in step.decodes:
            g = 0 if req in undrafted else gamma
            num_drafted += req not in undrafted
            verify.add(1 + g, req.num_computed, 1 + g)
        for req, chunk in step.prefills:
            verify.add(chunk, req.num_computed, 1)
        target_s = self.target.forward_s(verify.batch())
        draft_s = catchup_s = 0.0
        if draft_runs and self.draft is not None:
            draft_s, catchup_s = self._draft_s(step, undrafted)
        overhead = self.overheads.step_overhead_s
        if gamma > 0 and num_drafted:
            overhead += self.overheads.spec_step_overhead_s
        return StepCost(overhead + target_s + draft_s, target_s, draft_s, catchup_s)

    def _draft_s(
        self, step: ScheduledStep, undrafted: Collection[SimRequest]
    ) -> tuple[float, float]:
        """(draft seconds, of which catch-up seconds) for a step the draft takes part in."""
        assert self.draft is not None
        first, first_no_lag = _Acc(), _Acc()
        sum_ctx = b = 0
        for req in step.decodes:
            if req in undrafted:
                continue
            lag = req.draft_lag
            first.add(1 + lag, req.num_computed - lag, 1)
            first_no_lag.add(1, req.num_computed, 1)
            sum_ctx += req.num_computed
            b += 1
        for req, chunk in step.prefills:
            if req in undrafted:
                continue
            lag = req.draft_lag
            first.add(chunk + lag, req.num_computed - lag, 1)
            first_no_lag.add(chunk, req.num_computed, 1)
        if not first.tokens:
            return 0.0, 0.0
        pass1 = self.draft.forward_s(first.batch())
        catchup = pass1 - self.draft.forward_s(first_no_lag.batch())
        rest = 0.0
        for i in range(1, step.gamma):
            ctx = sum_ctx + b * i
            rest += self.draft.forward_s(ForwardBatch(b, b, ctx + b, ctx + b)) if b else 0.0
        return pass1 + rest, catchup
