"""The step driver: one per-step loop around a policy, for the engine and the simulator.

Both drivers of steps, the vLLM scheduler subclass (``engine/scheduler.py``) and the
simulator's server (``sim/server.py``), reduce a step to a :class:`StepBatch` and call
the same :class:`StepDriver`::

    on_schedule(batch, start_s, draft_away) -> gamma     (= choose(...) then commit(...))
      choose:  B from the batch, policy.choose(B, L_max) capped at gamma_cap, unless the
               draft is away (gamma 0, the policy neither asked nor taught)
      commit:  the draft gate (``driver/draft_gate.py``) may turn gamma into 0; the
               decision is recorded and counted in the telemetry
    on_output(tokens, drafts, accepted[, duration_s]) -> the finished StepDecision
               the observation rule (``driver/observation.py``) decides whether and
               with what time the policy learns from it
    sd_disabled, draft_value()   what the memory triggers read after a step

The simulator calls ``choose`` while it reserves KV slots (its lookahead depends on
gamma) and ``commit`` once the step's prefill chunks are known; the engine calls
``on_schedule``. Pure Python: no vLLM types, clock passed in.

What a step's gamma means in vLLM. ``num_spec_tokens_to_schedule`` of step t
is the number of drafts the proposer makes at the *end* of step t; they are
verified in step t+1. So step t's emitted tokens come from gamma_{t-1} while
its time contains the verification of gamma_{t-1} drafts and the proposal of
gamma_t drafts::

    step t-1: verify(g_{t-2}) + propose(g_{t-1})
    step t:   verify(g_{t-1}) + propose(g_t)      <- observed as gamma = g_{t-1}
                                                     only if g_t == g_{t-1}

Which steps the policy learns from, and with what time, is the shared
:class:`~nightjar_ray.driver.observation.ObservationRule` (the simulator runs the
same object): only steps with g_t == g_{t-1}, their prefill chunks priced out.

Timing with async scheduling. vLLM's async scheduler schedules step t+1
before step t's output is processed, so "end minus start" of one step would
overlap its neighbour. The duration of step t is instead::

    duration_t = end_t - max(end_{t-1}, start_t)

where ``start_t`` is when ``schedule()`` began for step t and ``end_t`` when
its output reached ``update_from_output``. With one step in flight (sync,
the CPU case) this is the step's own wall time, scheduling included; with a
full pipeline it is the interval between consecutive outputs, which is what
each step adds to the wall clock; after an idle gap it starts at the
schedule call, so idle time is never charged.

Pooling (Ray Serve). A background thread exchanges the policy's statistics
with the deployment's policy actor; it holds :attr:`StepDriver.policy_lock` only
while it exports or loads tables in memory (never across the network), and the
step loop takes the same lock around ``choose`` and ``observe``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import IO, Any

from nightjar_ray.driver.draft_gate import (
    DEFAULT_DRAFT_COST_RATIO,
    DraftGate,
    max_speculation_gain,
)
from nightjar_ray.driver.observation import (
    DEFAULT_OBSERVATION_RULE,
    ObservationRule,
    StepSample,
    as_if_all_drafted,
)
from nightjar_ray.driver.queue import QueueState, batch_ahead
from nightjar_ray.driver.step import Choice, StepBatch, StepDecision
from nightjar_ray.metrics.telemetry import EngineTelemetry
from nightjar_ray.policy import Policy, StepResult

logger = logging.getLogger(__name__)


class StepDriver:
    """Chooses gamma per step and feeds finished steps back to the policy."""

    def __init__(
        self,
        policy: Policy,
        *,
        gamma_cap: int,
        clock: Callable[[], float],
        count_scheduled: bool = False,
        observation_rule: str = DEFAULT_OBSERVATION_RULE,
        log_file: IO[str] | None = None,
        log_interval_steps: int = 0,
        max_history: int = 4096,
        telemetry: EngineTelemetry | None = None,
        draft_cost_ratio: float = DEFAULT_DRAFT_COST_RATIO,
        pinned_prefill_price_s_per_token: float | None = None,
    ) -> None:
        self.policy = policy
        self.policy_lock = threading.Lock()
        self.telemetry = telemetry or EngineTelemetry(policy.gamma_max)
        self._cap = min(gamma_cap, policy.gamma_max)
        self._clock = clock
        self._count_scheduled = count_scheduled
        self.observation = ObservationRule(
            observation_rule, draft_cost_ratio, draft_work_reported=policy.draft_gate
        )
        self.gate = DraftGate(draft_cost_ratio)
        self._best_case_gain = max_speculation_gain(policy.gamma_max, draft_cost_ratio)
        """:meth:`draft_value`'s answer for a policy with no evidence yet (fixed per run)."""
        self._pinned_price_s_per_token = pinned_prefill_price_s_per_token
        self._log_file = log_file
        self._log_every = log_interval_steps
        self._pending: deque[StepDecision] = deque()
        self._last_end_s = float("-inf")
        self._prev_gamma = 0
        self._prev_explored = False
        self._prev_num_reqs = 0
        self._step = 0
        self.history: deque[StepDecision] = deque(maxlen=max_history)
        self.gamma_counts: Counter[int] = Counter()
        self.num_observed = 0
        self.last_undrafted: frozenset[int] = frozenset()
        """Indices (into the last committed batch's per-request tuples) of the requests
        the draft skips in that step; empty when it drafts them all or plays gamma 0."""

    @property
    def last_gamma(self) -> int:
        """Gamma of the last committed step (the drafts the next step verifies)."""
        return self._prev_gamma

    def batch_size(self, batch: StepBatch) -> int:
        """B for the policy (see docs/engine.md, "What counts toward B")."""
        if self._count_scheduled:
            return batch.num_scheduled_reqs
        return batch.num_decode_reqs or batch.num_sampling_reqs

    def on_schedule(self, batch: StepBatch, start_s: float, draft_away: bool = False) -> int:
        """Gamma for the step just scheduled (``start_s``: when schedule() began). With
        ``draft_away`` (elastic memory offloaded it) gamma is 0, the policy is neither
        asked nor taught (the step's outcome says nothing about its choice). Which
        requests the draft skips is :attr:`last_undrafted` afterwards."""
        choice = self.choose(self.batch_size(batch), batch.max_skip_tokens, draft_away, batch.queue)
        return self.commit(batch, choice, start_s)

    def choose(
        self,
        num_reqs: int,
        max_skip_tokens: int,
        draft_away: bool = False,
        queue: QueueState | None = None,
    ) -> Choice:
        """The policy's gamma at B = ``num_reqs`` (capped), told the batch ``queue`` will
        produce, or, when it is not consulted (B = 0 or the draft away), the last gamma
        (0 with the draft away)."""
        if num_reqs < 1 or draft_away:
            return self.not_consulted(draft_away)
        ahead = batch_ahead(num_reqs, queue)
        with self.policy_lock:
            gamma = min(self.policy.choose(num_reqs, max_skip_tokens, ahead), self._cap)
            explored, queued = self.policy.last_explored, self.policy.last_queued
        return Choice(
            gamma, num_reqs, consulted=True, explored=explored, queued=queued, num_reqs_ahead=ahead
        )

    def not_consulted(self, draft_away: bool = False) -> Choice:
        """A step the policy is not asked about: it keeps the last gamma (0 when away)."""
        gamma = 0 if draft_away else self._prev_gamma
        return Choice(gamma, 0, consulted=False, draft_away=draft_away)

    def commit(self, batch: StepBatch, choice: Choice, start_s: float) -> int:
        """Gate ``choice`` on the step's batch, record it; returns the gamma it plays and
        leaves the requests the draft skips in :attr:`last_undrafted`. The step plays
        gamma 0 (gated) when the gate skips every request."""
        gamma, explored = choice.gamma, choice.explored
        undrafted: frozenset[int] = frozenset()
        num_owed = 0
        if gamma > 0 and batch.owed_tokens and self.policy.draft_gate:
            with self.policy_lock:
                undrafted = self._undrafted(batch, gamma, explored)
            owed = batch.owed_tokens
            num_owed = sum(owed[i] for i in range(len(owed)) if i not in undrafted)
        gated = bool(undrafted) and len(undrafted) == len(batch.owed_tokens)
        if gated:
            gamma, undrafted, num_owed = 0, frozenset(), 0
        self.last_undrafted = undrafted
        num_reqs = choice.num_reqs
        self.telemetry.on_step(
            gamma,
            num_reqs,
            explored=explored,
            consulted=choice.consulted,
            gated=gated,
            queued=choice.queued,
            num_undrafted_reqs=len(undrafted),
            num_drafted_reqs=batch.num_scheduled_reqs - len(undrafted) if gamma > 0 else 0,
        )
        self._pending.append(
            self._decision(batch, choice, gamma, start_s, gated, undrafted, num_owed)
        )
        self._step += 1
        self._prev_gamma = gamma
        self._prev_explored = explored
        self._prev_num_reqs = num_reqs
        self.gamma_counts[gamma] += 1
        return gamma

    def _decision(
        self,
        batch: StepBatch,
        choice: Choice,
        gamma: int,
        start_s: float,
        gated: bool,
        undrafted: frozenset[int],
        num_drafted_owed_tokens: int,
    ) -> StepDecision:
        return StepDecision(
            step=self._step,
            num_reqs=choice.num_reqs,
            num_decode_reqs=batch.num_decode_reqs,
            num_sampling_reqs=batch.num_sampling_reqs,
            num_scheduled_reqs=batch.num_scheduled_reqs,
            num_prefill_tokens=batch.num_prefill_tokens,
            max_skip_tokens=batch.max_skip_tokens,
            gamma=gamma,
            verified_gamma=self._prev_gamma,
            consulted=choice.consulted,
            start_s=start_s,
            draft_away=choice.draft_away,
            gated=gated,
            explored=choice.explored,
            queued=choice.queued,
            num_reqs_ahead=choice.num_reqs_ahead,
            num_undrafted_reqs=len(undrafted),
            num_drafted_owed_tokens=num_drafted_owed_tokens,
        )

    def _undrafted(self, batch: StepBatch, gamma: int, explored: bool) -> frozenset[int]:
        """The draft gate's verdict on this step (caller holds the lock): the requests the
        draft skips; all of them when the step may not speculate."""
        estimates, at_zero, c = self._gate_prices(batch)
        policy, gate = self.policy, self.gate
        if policy.gates_per_request:
            return gate.undrafted(
                gamma,
                estimates,
                batch.owed_tokens,
                batch.remaining_tokens,
                c,
                explored,
                at_zero,
                policy.probe_steps,
                batch.num_decode_reqs,
            )
        if batch.num_owed_tokens <= 0 or gate.allows(
            gamma,
            estimates,
            batch.num_owed_tokens,
            batch.num_remaining_tokens,
            c,
            explored=explored,
            latency_at_zero_s=at_zero,
        ):
            return frozenset()
        return frozenset(range(len(batch.owed_tokens)))

    def _gate_prices(
        self, batch: StepBatch
    ) -> tuple[Sequence[float] | None, float | None, float | None]:
        """(l~[B, gamma] per gamma or ``None``, l~[B, 0] where those are ``None``, the
        target's prefill seconds per token) the gate prices this step with.

        B is the batch size the step's requests decode in next: those that sample now
        (decodes and last prompt chunks), not the decoding count, so three prompts joining
        one decode are priced at B=4, where a token saves less. A prompt with chunks to go
        is not counted: by the time it decodes the batch has moved on. A step that owes
        the draft nothing is not priced (the gate then stops only requests with nothing
        left to emit), so the policy's rows are not read."""
        num_reqs = max(batch.num_sampling_reqs, batch.num_decode_reqs, 1)
        owes = any(batch.owed_tokens)
        estimates = self.policy.latency_estimates(num_reqs) if owes else None
        at_zero = self.policy.latency_at_zero_s(num_reqs) if owes and estimates is None else None
        c = self._pinned_price_s_per_token
        if c is None:
            c = self.observation.prefill_price_s_per_token
        return estimates, at_zero, c

    @property
    def sd_disabled(self) -> bool:
        """§6.1 condition (1) after the last scheduled step: it played gamma = 0 and that
        was not an exploration probe (the simulator's ``offload_trigger="exploited"``)."""
        return self._prev_gamma == 0 and not self._prev_explored

    def draft_value(self) -> tuple[float | None, int]:
        """(``Policy.speculation_gain``, B) at the last scheduled step's batch size: what
        the memory triggers weigh the draft's memory against (``None`` at B = 0). A
        policy with no evidence yet answers the draft's best case
        (:func:`max_speculation_gain`)."""
        num_reqs = self._prev_num_reqs
        if num_reqs < 1:
            return None, 0
        with self.policy_lock:
            return self.policy.speculation_gain(num_reqs, self._best_case_gain), num_reqs

    def on_output(
        self,
        num_tokens: int,
        num_draft_tokens: int,
        num_accepted_tokens: int,
        duration_s: float | None = None,
        num_reqs_reaching: tuple[int, ...] = (),
    ) -> StepDecision:
        """Close the oldest pending step; observe it if the observation rule takes it.
        ``duration_s``: the step's time where the caller knows it (the simulator's cost
        model); else it is measured with the clock (module docstring)."""
        end_s = self._clock()
        decision = self._pending.popleft()
        if duration_s is None:
            duration_s = end_s - max(self._last_end_s, decision.start_s)
        self._last_end_s = end_s
        num_accepted = min(num_accepted_tokens, num_draft_tokens)
        reaching = (
            num_reqs_reaching if len(num_reqs_reaching) == decision.verified_gamma + 1 else ()
        )
        result = None
        if not decision.draft_away:
            sample = self._sample(
                decision, num_tokens, num_draft_tokens, num_accepted, duration_s, reaching
            )
            result = self.observation.observe(sample)
        done = replace(
            decision,
            num_tokens=num_tokens,
            num_draft_tokens=num_draft_tokens,
            num_accepted_tokens=num_accepted,
            num_reqs_reaching=reaching,
            duration_s=duration_s,
            observed=result is not None,
        )
        if result is not None:
            self._learn(result)
        self._record(done)
        return done

    def _sample(
        self,
        decision: StepDecision,
        num_tokens: int,
        num_draft_tokens: int,
        num_accepted: int,
        duration_s: float,
        reaching: tuple[int, ...],
    ) -> StepSample:
        """The closed step as the observation rule reads it: B only if it decoded, and
        its decode tokens as if the draft had run over every decoding request."""
        num_decode_tokens = num_tokens - (decision.num_sampling_reqs - decision.num_decode_reqs)
        return StepSample(
            decision.num_reqs if decision.num_decode_reqs > 0 else 0,
            decision.verified_gamma,
            decision.gamma,
            as_if_all_drafted(
                num_decode_tokens,
                decision.verified_gamma if self.policy.gates_per_request else 0,
                decision.num_decode_reqs,
                num_draft_tokens,
                num_accepted,
            ),
            duration_s,
            decision.num_prefill_tokens,
            num_draft_tokens,
            num_accepted,
            decision.num_drafted_owed_tokens,
            reaching,
        )

    def _learn(self, result: StepResult) -> None:
        """Teach the policy one observed step and count it."""
        with self.policy_lock:
            self.policy.observe(result)
        self.num_observed += 1
        depths = result.num_reqs_reaching
        self.telemetry.on_observed(
            result.num_tokens, result.duration_s, sum(depths) - depths[-1] if depths else 0
        )

    def _record(self, done: StepDecision) -> None:
        self.history.append(done)
        if self._log_file is not None:
            self._log_file.write(json.dumps(asdict(done)) + "\n")
            self._log_file.flush()
        if self._log_every and (done.step + 1) % self._log_every == 0:
            logger.info("nightjar: %s", self.summary())

    def summary(self) -> dict[str, Any]:
        """Counts of steps per gamma and observed steps so far."""
        return {
            "steps": self._step,
            "observed": self.num_observed,
            "gamma_counts": dict(sorted(self.gamma_counts.items())),
            "gated_steps": self.gate.num_gated_steps,
        }
