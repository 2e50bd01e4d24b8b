"""Scheduler side of forced draft offload/reload cycles (chaos and tests).

Every ``cycle_steps`` steps :class:`DraftCycle` alternates an offload and a reload; the
scheduler sends it on that step's ``SchedulerOutput`` and every worker applies it before
the step's forward pass (``worker_memory.py``)::

    step k:    offload           -> gamma clamped to 0 from this step; policy not asked
    step k+N:  reload + resume   -> the weights are back before the forward pass; every
                                    request's draft KV is stale from position 0 (both the
                                    scheduler's and every worker's lag tracker), so the
                                    catch-up rebuilds it before the draft proposes again

The §6.1 triggers drive the same commands from ``memory_controller.py``, where the
reload runs in the background and ``resume`` comes steps later.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from nightjar_ray.engine.memory_event import MemoryEvent


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

    def before_schedule(self) -> MemoryEvent | None:
        """Run at the start of ``schedule()``; this step's draft commands, if any."""
        self._steps += 1
        if self._steps < self.cycle_steps:
            return None
        self._steps = 0
        self.resident = not self.resident
        if self.resident:
            self.stats.num_reload_commands += 1
            return MemoryEvent(draft_commands=("reload", "resume"))
        self.stats.num_offload_commands += 1
        return MemoryEvent(draft_commands=("offload",))
