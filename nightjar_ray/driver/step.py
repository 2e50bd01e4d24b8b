"""What one step is to the step driver (``driver/step_driver.py``), as plain values.

:class:`StepBatch` is what the scheduler saw (the engine's or the simulator's), reduced to
counts; :class:`Choice` is the policy's pick before the draft gate; :class:`StepDecision`
is the decision and, once the step's output is in, its outcome (the decision log's line).
"""

from __future__ import annotations

from dataclasses import dataclass

from nightjar_ray.driver.queue import QueueState


@dataclass(frozen=True)
class StepBatch:
    """What the scheduler saw in one step, already reduced to counts."""

    num_decode_reqs: int
    """Requests verifying drafts / decoding one token this step."""
    num_sampling_reqs: int
    """Requests that sample a token this step (decodes + last prefill chunks)."""
    num_scheduled_reqs: int
    """Every scheduled request, partial prefills included (vLLM's count)."""
    max_skip_tokens: int
    """L_max: largest draft lag among the step's requests."""
    num_prefill_tokens: int = 0
    """Prompt tokens scheduled for requests that do not decode (prefill chunks)."""
    owed_tokens: tuple[int, ...] = ()
    """Per scheduled request (the caller's order): tokens the draft would process for it
    now beyond its decode, its draft lag + its prefill chunk. Empty where the caller's
    draft is never skipped (nothing is ever owed; the draft gate does not run)."""
    remaining_tokens: tuple[int, ...] = ()
    """Per scheduled request, same order: output tokens still to come after this step."""
    queue: QueueState | None = None
    """The waiting queue after this step was scheduled (``driver/queue.py``)."""

    @property
    def num_owed_tokens(self) -> int:
        return sum(self.owed_tokens)

    @property
    def num_remaining_tokens(self) -> int:
        return sum(self.remaining_tokens)


@dataclass(frozen=True)
class Choice:
    """The policy's pick for one step, before the draft gate (:meth:`StepDriver.choose`)."""

    gamma: int
    num_reqs: int
    """B handed to the policy (0 when it was not consulted)."""
    consulted: bool
    explored: bool = False
    """gamma is an exploration probe (``Policy.last_explored``)."""
    draft_away: bool = False
    queued: bool = False
    """gamma came from the queue-aware objective (``Policy.last_queued``)."""
    num_reqs_ahead: int | None = None
    """B' the policy was told (``driver/queue.py``); None when nothing is queued."""


@dataclass(frozen=True)
class StepDecision:
    """One step's decision and, once finished, its outcome (the decision log)."""

    step: int
    num_reqs: int
    """B handed to the policy (0 when it was not consulted)."""
    num_decode_reqs: int
    num_sampling_reqs: int
    num_scheduled_reqs: int
    num_prefill_tokens: int
    max_skip_tokens: int
    gamma: int
    verified_gamma: int
    consulted: bool
    start_s: float
    num_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_reqs_reaching: tuple[int, ...] = ()
    """Drafted requests that accepted at least j drafts, j = 0..verified gamma (empty:
    no drafts verified, or not known)."""
    duration_s: float = 0.0
    observed: bool = False
    draft_away: bool = False
    """The draft was not resident: gamma was clamped to 0 and the step is not observed."""
    gated: bool = False
    """The draft gate ran gamma = 0 although the policy chose more (``driver/draft_gate.py``)."""
    explored: bool = False
    """gamma was an exploration probe (an exploration bin's arm, or a trial of an untried
    arm), not the policy's best estimate."""
    queued: bool = False
    """gamma came from the queue-aware objective."""
    num_reqs_ahead: int | None = None
    """B', the batch the queue will produce (``driver/queue.py``); None: nothing queued."""
    num_undrafted_reqs: int = 0
    """Scheduled requests the draft skipped in a step that speculated (``request`` scope)."""
    num_drafted_owed_tokens: int = 0
    """Owed tokens (prompt chunks, catch-up) of the requests the draft ran over, in a gated
    policy's step that speculated: the draft work the gate priced, which the observation
    rule takes out of the sample."""

    @property
    def carries_prefill(self) -> bool:
        """Whether the step also ran prefill chunks (scheduled requests that do not decode)."""
        return self.num_scheduled_reqs > self.num_decode_reqs
