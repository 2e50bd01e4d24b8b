"""§6.1 triggers: when to offload the draft (expand the KV cache) and when to bring it
back (contract), with hysteresis. The engine's memory controller and the simulator call
the same :class:`ElasticTriggers`.

::

    RESIDENT --(SD disabled or outvalued, and N_free < tau_low, for expand_persist_steps
                steps)--> EXPAND
    OFFLOADED --(|Q_wait| = 0 and N_free > N_region + tau_low and the region can be
                 emptied, for contract_persist_steps steps)--> CONTRACT
    RELOADING: no decision until the draft is resident (and caught up) again

The gap between the two conditions (N_free < tau_low against N_free > N_region + tau_low)
is the hysteresis: a block pool that just grew by N_region blocks does not shrink back at once.

"Outvalued" (beyond the paper, :func:`draft_outvalued`): requests wait for blocks and the
draft's memory, as KV cache, would let the batch grow by more than speculation speeds a
step up at this batch size, by the policy's own estimates. The paper's condition (1) waits
for the policy to settle on gamma = 0; at a batch size it has not learned yet, the policy
keeps trying speculative arms while the queue grows (docs/memory.md, "Outvalued: when the
draft's memory is worth more as KV cache").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

DraftValue = Callable[[], tuple[float | None, int]]
"""What the draft is worth now: (``Policy.speculation_gain``, the batch size it is at)."""


class DraftResidency(Enum):
    """Where the draft model is."""

    RESIDENT = "resident"
    OFFLOADED = "offloaded"
    RELOADING = "reloading"


class MemoryAction(Enum):
    """What the triggers ask the caller to do at this step boundary."""

    EXPAND = "expand"
    """Offload the draft and hand its memory to the KV cache."""
    CONTRACT = "contract"
    """Give the region back (compacting live blocks) and reload the draft."""


@dataclass(frozen=True)
class TriggerConfig:
    """Thresholds, in blocks and scheduling steps."""

    tau_low_blocks: int
    """tau_low: fewer free blocks than this is scarcity."""
    num_region_blocks: int
    """N_region: blocks an offload adds (and a contraction takes back)."""
    expand_persist_steps: int = 8
    """T_persist: consecutive scarce steps before an expansion."""
    contract_persist_steps: int = 8
    """Consecutive calm steps before a contraction (the paper: 1)."""

    def __post_init__(self) -> None:
        if self.tau_low_blocks < 0 or self.num_region_blocks < 0:
            raise ValueError("tau_low_blocks and num_region_blocks must be >= 0")
        if min(self.expand_persist_steps, self.contract_persist_steps) < 1:
            raise ValueError("expand_persist_steps and contract_persist_steps must be >= 1")


@dataclass(frozen=True)
class MemoryView:
    """What the triggers read after a step (the same numbers the metrics export)."""

    residency: DraftResidency
    sd_disabled: bool
    """§6.1 condition (1): speculation is off (the caller's rule)."""
    num_free_blocks: int
    num_waiting_reqs: int
    can_contract: bool = True
    """Whether the region's live blocks fit in free blocks below the boundary now."""
    draft_outvalued: bool = False
    """The draft's memory is worth more as KV cache now (:func:`draft_outvalued`)."""


class ElasticTriggers:
    """Counts persisting conditions; :meth:`step` returns an action or ``None``."""

    def __init__(self, config: TriggerConfig) -> None:
        self.config = config
        self.num_scarce_steps = 0
        self.num_calm_steps = 0

    def step(self, view: MemoryView) -> MemoryAction | None:
        """Advance one scheduling step; the caller performs the returned action."""
        cfg = self.config
        if view.residency is DraftResidency.RESIDENT:
            off = view.sd_disabled or view.draft_outvalued
            scarce = off and view.num_free_blocks < cfg.tau_low_blocks
            self.num_scarce_steps = self.num_scarce_steps + 1 if scarce else 0
            if self.num_scarce_steps >= cfg.expand_persist_steps:
                self.num_scarce_steps = 0
                return MemoryAction.EXPAND
        elif view.residency is DraftResidency.OFFLOADED:
            calm = (
                view.num_waiting_reqs == 0
                and view.num_free_blocks > cfg.num_region_blocks + cfg.tau_low_blocks
                and view.can_contract
            )
            self.num_calm_steps = self.num_calm_steps + 1 if calm else 0
            if self.num_calm_steps >= cfg.contract_persist_steps:
                self.num_calm_steps = 0
                return MemoryAction.CONTRACT
        return None


def draft_outvalued(
    draft_value: DraftValue,
    num_waiting_reqs: int,
    num_used_blocks: int,
    num_region_blocks: int,
    max_num_reqs: int,
) -> bool:
    """Whether the draft's memory is worth more as KV cache than as a draft right now.

    Requests wait, so the batch is bounded by blocks: an offload would let it grow from
    ``num_reqs`` to about ``num_reqs * (used + region) / used`` (at most
    ``max_num_reqs``), and a plain step decodes about that many more tokens per second.
    ``draft_value`` returns (``Policy.speculation_gain``, ``num_reqs``): the gain bounds
    what speculation gains at this batch size, and the draft is outvalued when the growth
    beats it. It is a ranking of the policy's arms, so it is called only once requests
    wait and there is a region to free. A gain of ``None`` (a policy without estimates)
    never is outvalued.
    """
    if num_waiting_reqs == 0 or num_used_blocks < 1 or num_region_blocks < 1:
        return False
    speculation_gain, num_reqs = draft_value()
    if speculation_gain is None or num_reqs < 1:
        return False
    grown = min(max_num_reqs, num_reqs * (num_used_blocks + num_region_blocks) / num_used_blocks)
    return grown / num_reqs > speculation_gain
