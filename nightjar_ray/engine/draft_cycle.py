"""Scheduler side of forced draft offload/reload cycles (chaos and tests).

Every ``cycle_steps`` steps :class:`DraftCycle` alternates an ``offload`` and a
``reload`` command; the scheduler sends it on that step's ``SchedulerOutput`` and every
worker applies it before the step's forward pass (``engine/draft_offload.py``)::

    step k:    offload -> gamma clamped to 0 from this step; the policy is not asked
    step k+N:  reload  -> every request's draft KV is stale from position 0 (both the
                          scheduler's and every worker's lag tracker), so the catch-up
                          rebuilds it before the draft proposes again

The §6.1 triggers will drive the same commands (docs/memory.md, "What is left").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

DraftCommand = Literal["offload", "reload"]


@dataclass
class DraftCycleStats:
    num_offload_commands: int = 0
    num_reload_commands: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class DraftCycle:
    """Offload the draft every ``cycle_steps`` steps and reload it as many steps later."""

    def __init__(self, cycle_steps: int) -> None:
        if cycle_steps < 1:
            raise ValueError("cycle_steps must be >= 1")
        self.cycle_steps = cycle_steps
        self.resident = True
        self.stats = DraftCycleStats()
        self._steps = 0

    def before_schedule(self) -> DraftCommand | None:
        """Run at the start of ``schedule()``; the command for this step, if any."""
        self._steps += 1
        if self._steps < self.cycle_steps:
            return None
        self._steps = 0
        self.resident = not self.resident
        if self.resident:
            self.stats.num_reload_commands += 1
            return "reload"
        self.stats.num_offload_commands += 1
        return "offload"
