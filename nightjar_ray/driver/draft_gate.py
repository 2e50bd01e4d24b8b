"""Whether a step's speculation pays for the draft work it owes: one rule for engine and
simulator (pure Python).

The bandit picks gamma for the batch size; it never sees *which* requests are in the
batch. A step that speculates also makes the draft process every token it has not seen
yet: a new prompt (the draft's prefill) or the tokens skipped at gamma = 0 (the
catch-up). For a request whose prompt is long and whose output is short, that work is
never earned back. The gate compares, per step (tokens, seconds)::

    owed      = sum over scheduled requests of tokens the draft must process now
                (draft lag + this step's prefill chunk)
    remaining = sum over scheduled requests of output tokens still to come after
                the one each may sample now (engine: max_tokens - generated - 1)
    gain      = remaining * (l~[B, 0] - l~[B, gamma])    l~: the policy's s per token,
                                                        B: requests sampling now
    cost      = owed * r * c                            c: target prefill s per token,
                                                        r: draft/target size ratio

    speculate iff gain >= cost     (or nothing is owed, or nothing is known yet)

``l~`` comes from :meth:`Policy.latency_estimates`. Two cases are judged by the best
case instead (:func:`best_case_gain`: every draft accepted, a step no slower than a plain
one, from ``l~[B, 0]`` alone):

- an exploration probe: its arm's estimate may be the stale one the probe is there to
  correct, so the estimate cannot stop it; a probe that no acceptance rate could pay for
  (a long prompt owed, a few tokens left) is stopped, and probes in steps that owe little
  still run, so no key freezes at gamma = 0;
- a step whose key cannot rank its arms yet (``latency_estimates`` is ``None``), from
  :meth:`Policy.latency_at_zero_s` (nightjar: the largest smaller key's ``l~[., 0]``
  where this key has none, an upper bound on it, so the best case stays a bound).

With no ``c`` learned yet, or no ``l~[B, 0]`` sample, the gate stops only steps whose
``remaining`` is 0 (no gain at any price).

A gated step runs gamma = 0: the draft does not run, its work stays owed (the lag
tracker keeps it) and is paid only if a later step's gain covers it, so a request that
finishes first never has its prompt drafted. Greedy outputs do not change (gamma = 0
is the target alone).

``c`` is the target's prefill cost per token that the observation rule learns from the
engine's own gamma = 0 steps (``driver/observation.py``). The draft's cost per owed token
is ``r * c``, with ``r`` the ratio of the two models' parameter counts
(:func:`approx_num_params` where only a config is at hand): a prompt's price is
compute-bound, which a catch-up of a few skipped tokens (memory-bound on a GPU) does not
measure. Drivers consult the gate only for a policy whose ``draft_gate`` is true
(Nightjar's default; the paper preset and the static baselines are never gated).

Two scopes (``NightjarParams.draft_gate_scope``):

- ``request`` (default, :meth:`DraftGate.undrafted`): the same comparison per request,
  ``remaining_i * (l~[B, 0] - l~[B, gamma]) >= owed_i * r * c``; the draft runs over the
  requests that pass and the others decode with gamma = 0 in the same step (their lag
  grows; the catch-up rebuilds it if they pass later, never if they finish first). A
  request with nothing left to emit after this step is never drafted. The step plays
  gamma = 0 only when no request passes.
- ``step`` (:meth:`DraftGate.allows`): the sums, all or nothing; what engines whose
  drafter cannot run over part of a batch use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

DEFAULT_DRAFT_COST_RATIO = 0.1
"""Draft/target cost ratio where the models are not known (unit tests, fakes)."""


def approx_num_params(
    num_layers: int, hidden_size: int, intermediate_size: int, vocab_size: int
) -> int:
    """Parameters of a decoder-only transformer from its config (attention 4h^2, gated
    MLP 3hi, embeddings and head): enough to price one model against another."""
    per_layer = 4 * hidden_size * hidden_size + 3 * hidden_size * intermediate_size
    return num_layers * per_layer + 2 * vocab_size * hidden_size


class DraftGate:
    """The per-step rule of the module docstring; one per engine or simulated server."""

    def __init__(self, draft_cost_ratio: float) -> None:
        if not 0.0 < draft_cost_ratio <= 1.0:
            raise ValueError(f"draft_cost_ratio must be in (0, 1], got {draft_cost_ratio}")
        self.draft_cost_ratio = draft_cost_ratio
        self.num_gated_steps = 0
        self.num_undrafted_reqs = 0

    def allows(
        self,
        gamma: int,
        estimates: Sequence[float] | None,
        num_owed_tokens: int,
        num_remaining_tokens: int,
        target_prefill_s_per_token: float | None,
        explored: bool = False,
        latency_at_zero_s: float | None = None,
    ) -> bool:
        """Whether a step may speculate with ``gamma``; counts the steps it stops.

        ``estimates``: the policy's latency per token for each gamma at this batch size
        (``None``: the key cannot rank its arms yet). ``num_owed_tokens`` and
        ``num_remaining_tokens``: the step's sums; ``target_prefill_s_per_token``: ``c``
        (module docstring, ``None``: not learned yet). ``explored``: gamma is an
        exploration probe. A probe, or a step whose ``estimates`` are unknown, is judged
        by :func:`best_case_gain` from ``l~[B, 0]`` (``estimates[0]``, else
        ``latency_at_zero_s``; neither known: the step speculates)."""
        if gamma <= 0 or num_owed_tokens <= 0:
            return True
        if num_remaining_tokens <= 0:
            return self._stop()
        if target_prefill_s_per_token is None:
            return True
        gain = _gain(gamma, estimates, num_remaining_tokens, explored, latency_at_zero_s)
        if gain is None:
            return True
        cost = num_owed_tokens * self.draft_cost_ratio * target_prefill_s_per_token
        return True if gain >= cost else self._stop()

    def undrafted(
        self,
        gamma: int,
        estimates: Sequence[float] | None,
        owed_tokens: Sequence[int],
        remaining_tokens: Sequence[int],
        target_prefill_s_per_token: float | None,
        explored: bool = False,
        latency_at_zero_s: float | None = None,
        probe_steps: int | None = None,
        num_decode_reqs: int | None = None,
    ) -> frozenset[int]:
        """Indices of the requests the draft skips in a step that speculates with
        ``gamma`` (the ``request`` scope of the module docstring). ``owed_tokens`` and
        ``remaining_tokens``: per request, in one order; the other arguments as for
        :meth:`allows`. ``probe_steps``: an exploration probe (``explored``) lasts that
        many steps, so a request's catch-up is weighed against the tokens the probe
        itself emits, ``probe_steps * (gamma + 1)`` at most, not its whole remaining
        output (``None``: no such horizon). A probe that would leave more than three
        quarters of ``num_decode_reqs`` (the step's decoding requests; ``None``: all of
        them) undrafted skips every request instead: its step would be a far cheaper one
        than the arm's, learned as if the whole batch were drafted. Counts a step it
        leaves no request in as gated, and the requests skipped in a step that still
        speculates as undrafted."""
        if gamma <= 0:
            return frozenset()
        saving = _gain(gamma, estimates, 1, explored, latency_at_zero_s)
        price = self._price(saving, target_prefill_s_per_token)
        horizon = probe_steps * (gamma + 1) if explored and probe_steps is not None else None
        pairs = enumerate(zip(owed_tokens, remaining_tokens, strict=True))
        out = frozenset(
            i
            for i, (owed, remaining) in pairs
            if remaining <= 0
            or (
                price is not None
                and owed > 0
                and (remaining if horizon is None else min(remaining, horizon)) < owed * price
            )
        )
        num_decoding = len(owed_tokens) if num_decode_reqs is None else num_decode_reqs
        if out and (len(out) == len(owed_tokens) or (explored and 4 * len(out) > 3 * num_decoding)):
            self.num_gated_steps += 1
            return frozenset(range(len(owed_tokens)))
        self.num_undrafted_reqs += len(out)
        return out

    def _price(
        self, saving: float | None, target_prefill_s_per_token: float | None
    ) -> float | None:
        """Output tokens a request must have left per token it owes the draft, for
        speculation's ``saving`` per token to earn the draft's work back (``None``: not
        priced; ``inf``: speculation saves nothing)."""
        if saving is None or target_prefill_s_per_token is None:
            return None
        cost = self.draft_cost_ratio * target_prefill_s_per_token
        return cost / saving if saving > 0.0 else math.inf

    def _stop(self) -> bool:
        self.num_gated_steps += 1
        return False


def _gain(
    gamma: int,
    estimates: Sequence[float] | None,
    num_remaining_tokens: int,
    explored: bool,
    latency_at_zero_s: float | None,
) -> float | None:
    """Seconds speculating at ``gamma`` is expected to save (``None``: nothing known)."""
    if estimates is not None and gamma < len(estimates) and not explored:
        return num_remaining_tokens * (estimates[0] - estimates[gamma])
    at_zero = estimates[0] if estimates is not None else latency_at_zero_s
    if at_zero is None:
        return None
    return best_case_gain(gamma, at_zero, num_remaining_tokens)


def best_case_gain(gamma: int, latency_at_zero_s: float, num_remaining_tokens: int) -> float:
    """The most ``num_remaining_tokens`` can save at ``gamma`` whatever its estimate says:
    every draft accepted (gamma + 1 tokens per step) at no more than a plain step's time,
    so a token costs at least ``l~[B, 0] / (gamma + 1)``."""
    return num_remaining_tokens * latency_at_zero_s * gamma / (gamma + 1)


def max_speculation_gain(gamma_max: int, draft_cost_ratio: float) -> float:
    """The most speculation can speed decoding up: every draft accepted at ``gamma_max``
    (gamma + 1 tokens a step) in a plain step's time plus gamma draft steps, each
    ``draft_cost_ratio`` of a plain one: ``(gamma + 1) / (1 + gamma * r)``."""
    return (gamma_max + 1) / (1.0 + gamma_max * draft_cost_ratio)


def remaining_after_step(max_tokens: int, num_output_tokens: int) -> int:
    """Output tokens a request may still emit after the one it may sample this step."""
    return max(0, max_tokens - num_output_tokens - 1)
