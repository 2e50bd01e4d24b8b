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

from dataclasses import dataclass

from nightjar_ray.sim.hardware import EngineOverheads
from nightjar_ray.sim.roofline import ForwardBatch, Roofline, attn_pairs
from nightjar_ray.sim.scheduler import ScheduledStep


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

    def cost(self, step: ScheduledStep, draft_runs: bool) -> StepCost:
        gamma = step.gamma
        verify = _Acc()
        for req in step.decodes:
            verify.add(1 + gamma, req.num_computed, 1 + gamma)
        for req, chunk in step.prefills:
            verify.add(chunk, req.num_computed, 1)
        target_s = self.target.forward_s(verify.batch())
        draft_s = catchup_s = 0.0
        if draft_runs and self.draft is not None:
            draft_s, catchup_s = self._draft_s(step)
        overhead = self.overheads.step_overhead_s
        if gamma > 0 and step.decodes:
            overhead += self.overheads.spec_step_overhead_s
        return StepCost(overhead + target_s + draft_s, target_s, draft_s, catchup_s)

    def _draft_s(self, step: ScheduledStep) -> tuple[float, float]:
        """(draft seconds, of which catch-up seconds) for a step the draft takes part in."""
        assert self.draft is not None
        first, first_no_lag = _Acc(), _Acc()
        sum_ctx = 0
        for req in step.decodes:
            lag = req.draft_lag
            first.add(1 + lag, req.num_computed - lag, 1)
            first_no_lag.add(1, req.num_computed, 1)
            sum_ctx += req.num_computed
        for req, chunk in step.prefills:
            lag = req.draft_lag
            first.add(chunk + lag, req.num_computed - lag, 1)
            first_no_lag.add(chunk, req.num_computed, 1)
        pass1 = self.draft.forward_s(first.batch())
        catchup = pass1 - self.draft.forward_s(first_no_lag.batch())
        rest = 0.0
        b = len(step.decodes)
        for i in range(1, step.gamma):
            ctx = sum_ctx + b * i
            rest += self.draft.forward_s(ForwardBatch(b, b, ctx + b, ctx + b))
        return pass1 + rest, catchup
