"""Which steps a policy learns from, and what time it is told: one rule for engine and simulator.

Both drivers reduce a finished step to a :class:`StepSample` and ask the same
:class:`ObservationRule` for the :class:`StepResult` to feed ``policy.observe`` (or
``None``: not a sample). The rules, by name (``OBSERVATION_RULES``):

* ``step``: every steady decoding step with its wall time, prefill chunks included;
* ``pure``: only steps without prefill chunks (the prefill's cost is never seen);
* ``prefill-corrected`` (default): pure steps as they are, and steps that carry prefill
  chunks with the *target's* prefill cost taken out, learned online (below). What
  speculation adds to such a step stays in it: the draft's forward over the new prompt
  tokens (it runs only when gamma > 0), the extra verification tokens. So a workload of
  long prompts charges its draft prefill to the gammas that cause it.

A steady step verifies the drafts it proposes with the same gamma (``gamma ==
next_gamma``); a transition step mixes two gammas and carries the draft catch-up, which
Eq. (4) charges through C_switch, so it is never a sample.

How the target's prefill cost is learned, from the engine's own steps (no cost model)::

    steady gamma g, no prefill, no owed draft work:
                              base[key(B), g]  <- mean step time
    steady gamma g, P prefill tokens, O owed tokens the draft ran over:
                              excess = d - base[key(B), g]
                              c ~ sum(excess) / sum(P + r * O)   (s per prompt token)
    any gamma, P > 0:         observed d' = d - c * P    (draft prefill stays in d')

    no decode, P > 0:         c ~ (d - base[1, g]) / (P + r * O)
                              (r: draft/target cost ratio)

``O`` is known only where the draft gate priced the step (a gated policy's drivers
report the owed tokens the draft ran over, ``draft_work_reported``); for other policies
only gamma = 0 steps, where no draft runs, are bases and samples, and a prompt-only step
counts its draft work as the whole chunk when the next gamma is above 0. What corrects
samples (:attr:`ObservationRule.prefill_s_per_token`) is learned over gamma = 0 bases
only; steps over a gamma > 0 base feed the draft gate's price alone, so a gated policy
that rarely plays gamma = 0 (low load, where it speculates) still prices the draft's
work. Until ``c`` has ``MIN_PREFILL_SAMPLES`` steps behind it, steps with prefill are
not samples (as ``pure``). ``key`` is the power-of-two bucket of B. Sums decay
by ``DECAY`` per sample so the estimate follows drift in prompt lengths.

The draft gate (``driver/draft_gate.py``) prices the draft's owed work with ``c`` too,
and before ``c`` is trusted with a rougher estimate that also takes steps whose key has
no base over the nearest key's base, once ``MIN_PREFILL_TOKENS`` prompt tokens are
behind it. Long prompts keep every step mixed, so their keys never get a base, and a
burst of them on a cold engine would otherwise meet a gate that has no price and lets
the draft run over every prompt. The rougher estimate never corrects a sample.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, get_args

from nightjar_ray.policy.base import StepResult
from nightjar_ray.policy.bucketing import pow2_key

ObservationRuleName = Literal["prefill-corrected", "pure", "step"]
OBSERVATION_RULES: tuple[str, ...] = get_args(ObservationRuleName)
DEFAULT_OBSERVATION_RULE: ObservationRuleName = "prefill-corrected"

MIN_PREFILL_SAMPLES = 8
"""Steps with prefill that make ``c`` trusted."""
MIN_PREFILL_TOKENS = 512
"""Prompt tokens behind the draft gate's rough price before it is used."""
DECAY = 0.995
"""Weight kept by past samples per new one (an effective window of ~200 samples)."""
MIN_CORRECTED_FRACTION = 0.05
"""A corrected duration is at least this fraction of the step's wall time."""


class StepSample(NamedTuple):
    """A finished step, as both drivers report it."""

    num_reqs: int
    """B the policy was given (decoding requests); 0 if it was not consulted."""
    gamma: int
    """Gamma whose drafts the step verified (its emitted tokens come from it)."""
    next_gamma: int
    """Gamma the step proposed for the next one (the simulator: the same gamma)."""
    num_tokens: int
    """Tokens emitted by the decoding requests."""
    duration_s: float
    num_prefill_tokens: int
    """Prompt tokens of the prefill chunks that shared the step."""
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_drafted_owed_tokens: int = 0
    """Tokens the draft processed for work owed (prompt chunks, catch-up) in the step, where
    the draft gate priced that work (0 otherwise): taken out of the sample as well."""
    num_reqs_reaching: tuple[int, ...] = ()
    """:attr:`StepResult.num_reqs_reaching` of the step (empty: unknown)."""


def depth_counts(accepted: list[int], gamma: int) -> tuple[int, ...]:
    """``StepResult.num_reqs_reaching`` from each drafted request's accepted drafts (all
    verified ``gamma`` drafts): how many accepted at least j, j = 0..gamma."""
    if gamma <= 0 or not accepted:
        return ()
    hist = [0] * (gamma + 1)
    for a in accepted:
        hist[min(a, gamma)] += 1
    out = [0] * (gamma + 1)
    total = 0
    for j in range(gamma, -1, -1):
        total += hist[j]
        out[j] = total
    return tuple(out)


def as_if_all_drafted(
    num_tokens: int, gamma: int, num_decode_reqs: int, num_draft_tokens: int, num_accepted: int
) -> int:
    """The decode tokens a step at ``gamma`` would have emitted had the draft run over
    every one of its ``num_decode_reqs`` decoding requests (the gate's request scope;
    ``gamma`` 0: no such scope, ``num_tokens`` as they were). The undrafted ones emitted
    one token each, and counting them so would read the arm's acceptance low, so a gate
    pricing a drafted request's saving from it would skip ever more requests. (Their
    verification was one token, not gamma + 1: the step's time stays as it ran.)"""
    if gamma <= 0 or num_draft_tokens <= 0:
        return num_tokens
    num_drafted = num_draft_tokens / gamma
    num_undrafted = num_decode_reqs - num_drafted
    if num_undrafted <= 0:
        return num_tokens
    return num_tokens + round(num_undrafted * num_accepted / num_drafted)


class _DecayedMean:
    __slots__ = ("total", "weight")

    def __init__(self) -> None:
        self.total = self.weight = 0.0

    def add(self, value: float, weight: float = 1.0) -> None:
        self.total = self.total * DECAY + value
        self.weight = self.weight * DECAY + weight

    @property
    def mean(self) -> float | None:
        return self.total / self.weight if self.weight > 0.0 else None


class _PrefillCost:
    """A decayed ratio estimate of prefill seconds per prompt token, with its counts."""

    __slots__ = ("mean", "num_samples", "num_tokens")

    def __init__(self) -> None:
        self.mean = _DecayedMean()
        self.num_samples = 0
        self.num_tokens = 0.0
        """Target-equivalent tokens behind the estimate (prompt tokens, the draft's share)."""

    def add(self, excess_s: float, num_tokens: float) -> None:
        self.mean.add(excess_s, num_tokens)
        self.num_samples += 1
        self.num_tokens += num_tokens

    @property
    def s_per_token(self) -> float | None:
        per_token = self.mean.mean
        return None if per_token is None else max(0.0, per_token)


class ObservationRule:
    """Turns :class:`StepSample` into the policy's :class:`StepResult` (module doc)."""

    def __init__(
        self,
        name: str = DEFAULT_OBSERVATION_RULE,
        draft_cost_ratio: float = 0.0,
        draft_work_reported: bool = False,
    ) -> None:
        if name not in OBSERVATION_RULES:
            raise ValueError(f"unknown observation rule {name!r}; choose from {OBSERVATION_RULES}")
        if not 0.0 <= draft_cost_ratio <= 1.0:
            raise ValueError(f"draft_cost_ratio must be in [0, 1], got {draft_cost_ratio}")
        self.name = name
        self._draft_share = draft_cost_ratio
        self._reported = draft_work_reported
        self._base: dict[tuple[int, int], _DecayedMean] = {}
        """Mean steady step time per (key, gamma), no prompt chunks or owed draft work."""
        self._prefill = _PrefillCost()
        """From same-key bases only: what samples are corrected with."""
        self._price = _PrefillCost()
        """The same samples and those taken over the nearest key's base."""

    @property
    def prefill_s_per_token(self) -> float | None:
        """Learned target prefill cost per prompt token, once trusted (else ``None``): what
        samples are corrected with."""
        if self._prefill.num_samples < MIN_PREFILL_SAMPLES:
            return None
        return self._prefill.s_per_token

    @property
    def prefill_price_s_per_token(self) -> float | None:
        """The cost the draft gate prices owed work with: :attr:`prefill_s_per_token` once
        trusted, before that the estimate that also counts the nearest key's base, after
        ``MIN_PREFILL_TOKENS`` prompt tokens (else ``None``)."""
        trusted = self.prefill_s_per_token
        if trusted is not None or self._price.num_tokens < MIN_PREFILL_TOKENS:
            return trusted
        return self._price.s_per_token

    def observe(self, s: StepSample) -> StepResult | None:
        """The sample to learn from, or ``None`` (see module doc)."""
        if s.num_reqs < 1:
            self._learn_from_prefill_only(s)
            return None
        if s.num_tokens < 1 or not s.duration_s > 0.0:
            return None
        if s.gamma != s.next_gamma:
            return None
        duration = s.duration_s
        if s.num_prefill_tokens > 0 and self.name != "step":
            if self.name == "pure":
                return None
            corrected = self._corrected_s(s)
            if corrected is None:
                return None
            duration = corrected
        elif s.num_drafted_owed_tokens > 0 and self.name == "prefill-corrected":
            duration = self._without_owed_s(s, duration)
        elif (s.gamma == 0 or self._reported) and self.name == "prefill-corrected":
            base = self._base.setdefault((pow2_key(s.num_reqs), s.gamma), _DecayedMean())
            base.add(s.duration_s)
        return StepResult(
            s.num_reqs,
            s.gamma,
            s.num_tokens,
            duration,
            s.num_draft_tokens,
            s.num_accepted_tokens,
            s.num_reqs_reaching,
        )

    def _learn_from_prefill_only(self, s: StepSample) -> None:
        """A step of prompt chunks alone prices the target's prefill as well: its time over
        a one-decode gamma = 0 step's (where there is none and the draft's work is
        reported, the one at the gamma it proposes: the gate's price alone), per prompt
        token, less the draft's share (``draft_cost_ratio`` of the target's) for the tokens
        the draft ran over."""
        if self.name != "prefill-corrected" or s.num_prefill_tokens <= 0:
            return
        if self._reported:
            drafted = s.num_drafted_owed_tokens
            gamma = 0 if self._has_base(1, 0) else s.next_gamma
        else:
            gamma, drafted = 0, s.num_prefill_tokens if s.next_gamma > 0 else 0
        tokens = s.num_prefill_tokens + self._draft_share * drafted
        self._add_prefill_sample(1, gamma, s.duration_s, tokens, prompt_only=True)

    def _has_base(self, key: int, gamma: int) -> bool:
        base = self._base.get((key, gamma))
        return base is not None and base.mean is not None

    def _add_prefill_sample(
        self,
        num_reqs: int,
        gamma: int,
        duration_s: float,
        num_tokens: float,
        prompt_only: bool = False,
    ) -> None:
        """Price the target's prefill from a step's time over the base at ``num_reqs``' key
        and ``gamma``, per target-equivalent token (``num_tokens``: prompt tokens plus the
        draft's share of its owed ones): into both estimates when that base exists at
        gamma 0, else into the gate's alone (against the nearest base where there is no
        exact one). A ``prompt_only`` step no longer than the base is no sample."""
        key = pow2_key(num_reqs)
        estimates: tuple[_PrefillCost, ...]
        exact = self._base.get((key, gamma))
        if exact is not None and exact.mean is not None:
            base = exact.mean
            estimates = (self._prefill, self._price) if gamma == 0 else (self._price,)
        else:
            nearest = self._nearest_base_s(key, gamma)
            if nearest is None:
                return
            base, estimates = nearest, (self._price,)
        if prompt_only and not duration_s > base:
            return
        for estimate in estimates:
            estimate.add(duration_s - base, num_tokens)

    def _nearest_base_s(self, key: int, gamma: int) -> float | None:
        """The base nearest (``key``, ``gamma``) that has one: the same gamma's at the
        nearest key (the lower of two as near), else any gamma's, nearest gamma first.
        Long prompts keep a key from ever running a pure step."""
        known = [k for k, mean in self._base.items() if mean.mean is not None]
        if not known:
            return None

        def distance(k: tuple[int, int]) -> tuple[bool, int, int, int]:
            return (
                k[1] != gamma,
                abs(k[0].bit_length() - key.bit_length()),
                k[0],
                abs(k[1] - gamma),
            )

        return self._base[min(known, key=distance)].mean

    def _corrected_s(self, s: StepSample) -> float | None:
        """Duration less the target's prefill share; learns that share at gamma = 0, and
        at any gamma where the draft's work is reported."""
        if s.gamma == 0 or self._reported:
            tokens = s.num_prefill_tokens + self._draft_share * s.num_drafted_owed_tokens
            self._add_prefill_sample(s.num_reqs, s.gamma, s.duration_s, tokens)
        per_token = self.prefill_s_per_token
        if per_token is None:
            return None
        floor = MIN_CORRECTED_FRACTION * s.duration_s
        owed = self._draft_share * s.num_drafted_owed_tokens
        return max(floor, s.duration_s - per_token * (s.num_prefill_tokens + owed))

    def _without_owed_s(self, s: StepSample, duration_s: float) -> float:
        """A step without prompt chunks less the draft's priced catch-up, once ``c`` is known."""
        per_token = self.prefill_s_per_token
        if per_token is None:
            return duration_s
        owed_s = per_token * self._draft_share * s.num_drafted_owed_tokens
        return max(MIN_CORRECTED_FRACTION * duration_s, duration_s - owed_s)
