"""The contract every speculative-length policy implements.

A policy is asked, once per decoding step, for the speculative length ``gamma``
(0 = speculation off) given the step's batch size and effective skip length,
and is later told what that step produced. The engine (``nightjar_ray.engine``)
and the simulator (``nightjar_ray.sim``) drive the very same objects.

::

    engine / simulator                      policy
    ------------------                      ------
    B, L_max  --- choose(num_reqs, max_skip_tokens) --->  gamma
    run the step with gamma
    StepResult --------- observe(result) ------------->  update estimates

``observe`` may arrive after the next ``choose`` (vLLM's async scheduling keeps
one step in flight), so every result carries the batch size and gamma it
belongs to; policies never assume "the last choice" is the step observed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

from nightjar_ray.policy.stats import PolicyStats


class StepResult(NamedTuple):
    """What one decoding step produced.

    A ``NamedTuple`` rather than a frozen dataclass: it is built once per step
    on the engine's hot path and costs about half as much to construct.
    """

    num_reqs: int
    """Batch size B of the step (requests that decoded; see engine docs)."""
    gamma: int
    """Speculative length the step ran with."""
    num_tokens: int
    """Tokens emitted by the step, all requests: accepted drafts + one bonus each."""
    duration_s: float
    """Wall time of the step in seconds."""
    num_draft_tokens: int = 0
    """Draft tokens proposed in the step (B * gamma for a pure decode step)."""
    num_accepted_tokens: int = 0
    """Draft tokens the target accepted."""
    num_reqs_reaching: tuple[int, ...] = ()
    """Per depth j = 0..gamma: the drafted requests that accepted at least j draft tokens
    (element 0: every drafted request); empty where the driver does not know them."""

    @property
    def latency_per_token_s(self) -> float:
        """Observed inverse goodput l_t = 1 / g_t (seconds per emitted token)."""
        return self.duration_s / self.num_tokens

    @property
    def goodput_tokens_per_s(self) -> float:
        """Observed goodput g_t (emitted tokens per second)."""
        return self.num_tokens / self.duration_s


def validate_result(result: StepResult, gamma_max: int) -> None:
    """Raise ``ValueError`` if ``result`` cannot be a real step's outcome."""
    num_reqs, gamma, num_tokens, duration_s, drafted, accepted, reaching = result
    # NOTE: the common case checked inline (every observe); _raise_invalid says what is wrong.
    if (
        num_reqs >= 1
        and 0 <= gamma <= gamma_max
        and num_tokens >= 1
        and duration_s > 0.0
        and 0 <= accepted <= drafted
    ):
        if not reaching:
            return
        if len(reaching) == gamma + 1 and reaching[0] <= num_reqs and reaching[-1] >= 0:
            above = reaching[0]
            for n in reaching:
                if n > above:
                    break
                above = n
            else:
                return
    _raise_invalid(result, gamma_max)


def _raise_invalid(result: StepResult, gamma_max: int) -> None:
    num_reqs, gamma, num_tokens, duration_s, drafted, accepted, reaching = result
    if num_reqs < 1:
        raise ValueError(f"StepResult.num_reqs must be >= 1, got {num_reqs}")
    if not 0 <= gamma <= gamma_max:
        raise ValueError(f"StepResult.gamma must be in [0, {gamma_max}], got {gamma}")
    if num_tokens < 1:
        raise ValueError(f"StepResult.num_tokens must be >= 1, got {num_tokens}")
    if not duration_s > 0.0:
        raise ValueError(f"StepResult.duration_s must be > 0, got {duration_s}")
    if not 0 <= accepted <= drafted:
        raise ValueError(
            "StepResult needs 0 <= num_accepted_tokens <= num_draft_tokens, got "
            f"{accepted} > {drafted}"
        )
    raise ValueError(
        f"StepResult.num_reqs_reaching must hold gamma + 1 = {gamma + 1} "
        f"non-increasing counts in [0, num_reqs = {num_reqs}], got {reaching}"
    )


def validate_context(num_reqs: int, max_skip_tokens: int) -> None:
    """Raise ``ValueError`` for a batch size or skip length no step can have."""
    if num_reqs < 1:
        raise ValueError(f"num_reqs must be >= 1, got {num_reqs}")
    if max_skip_tokens < 0:
        raise ValueError(f"max_skip_tokens must be >= 0, got {max_skip_tokens}")


class Policy(ABC):
    """Chooses gamma per decoding step and learns from step results.

    Implementations are registered by name (``nightjar_ray.policy.registry``)
    and built from a typed config. All randomness comes from the ``random.Random``
    handed to the constructor, so a seeded run is reproducible.

    Learned statistics are exported as :class:`PolicyStats` (per key and gamma:
    count and mean), which merge exactly across replicas; ``snapshot`` adds the
    policy's local schedule state for a warm restart.
    """

    name: ClassVar[str]
    """Registry name of the policy."""

    last_explored: bool = False
    """Whether the latest ``choose`` was an exploration (policies that explore set it;
    read by the engine's decision metrics)."""

    @property
    @abstractmethod
    def gamma_max(self) -> int:
        """Largest gamma this policy may return."""

    last_queued: bool = False
    """Whether the latest ``choose`` played the queue-aware objective (requests were
    waiting; read by the engine's decision metrics)."""

    @abstractmethod
    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        """Return gamma in ``[0, gamma_max]`` for a step with batch size
        ``num_reqs`` (B >= 1) whose requests lag the draft by at most
        ``max_skip_tokens`` tokens (L_max). ``num_reqs_ahead``: the batch size the
        waiting queue will produce (> ``num_reqs`` only while requests wait; ``None``:
        nothing waits or the caller does not know); policies without a queue-aware
        objective ignore it."""

    @abstractmethod
    def observe(self, result: StepResult) -> None:
        """Learn from one finished step. Raises ``ValueError`` on an impossible result."""

    @property
    def draft_gate(self) -> bool:
        """Whether drivers run this policy's steps through the draft gate
        (``driver/draft_gate.py``); off unless a policy opts in."""
        return False

    @property
    def gates_per_request(self) -> bool:
        """Whether the draft gate picks requests (not whole steps) for this policy's
        steps, where the engine's drafter can run over part of a batch."""
        return False

    def latency_estimates(self, num_reqs: int) -> Sequence[float] | None:
        """Estimated seconds per emitted token for each gamma at batch size ``num_reqs``,
        for the draft gate (``driver/draft_gate.py``); ``None`` when the policy has none
        (the default)."""
        return None

    @property
    def probe_steps(self) -> int | None:
        """Steps an exploration probe plays its arm (the draft gate weighs a probe's
        catch-up against them, ``driver/draft_gate.py``); ``None``: not bounded (the
        default)."""
        return None

    def latency_at_zero_s(self, num_reqs: int) -> float | None:
        """Estimated seconds per token at gamma = 0 and batch size ``num_reqs``, known
        before every arm is (the draft gate's best case, ``driver/draft_gate.py``);
        ``None`` when the policy has none (the default)."""
        return None

    def speculation_gain(self, num_reqs: int, best_case: float) -> float | None:
        """How many times faster than plain decoding speculation makes decoding at batch
        size ``num_reqs``, at most, by this policy's estimates: what the memory triggers
        weigh the draft's memory against (``memory/triggers.py: draft_outvalued``).
        ``best_case``: the most the draft could gain (every draft accepted, at its price),
        the answer of a policy that keeps estimates but has none here yet. ``None`` when
        the policy keeps no estimates (the default; the rule then never offloads a
        draft)."""
        return None

    @abstractmethod
    def export_stats(self) -> PolicyStats:
        """Sufficient statistics learned so far (a copy)."""

    @abstractmethod
    def load_stats(self, stats: PolicyStats) -> None:
        """Replace the learned statistics with ``stats`` (e.g. pooled ones)."""

    def check_stats_owner(self, stats: PolicyStats) -> None:
        """Raise ``ValueError`` unless ``stats`` were exported by a policy of this name."""
        if stats.policy != self.name:
            raise ValueError(f"stats are for {stats.policy!r}, not {self.name!r}")

    def local_state(self) -> dict[str, Any]:
        """JSON-able schedule state that is local to this instance (not pooled)."""
        return {}

    def load_local_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`local_state` returned."""
        if state:
            raise ValueError(f"policy {self.name!r} has no local state, got keys {sorted(state)}")

    def snapshot(self) -> dict[str, Any]:
        """JSON-able snapshot: pooled statistics plus local state."""
        return {
            "policy": self.name,
            "stats": self.export_stats().to_json(),
            "state": self.local_state(),
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Restore a :meth:`snapshot` taken from a policy of the same name."""
        if snapshot.get("policy") != self.name:
            raise ValueError(
                f"snapshot is for policy {snapshot.get('policy')!r}, not {self.name!r}"
            )
        self.load_stats(PolicyStats.from_json(snapshot["stats"]))
        self.load_local_state(snapshot.get("state", {}))
