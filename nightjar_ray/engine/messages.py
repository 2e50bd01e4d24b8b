"""The two typed messages between the scheduler and the workers, one each way per step.

vLLM 0.32 has no extension slot on its step objects, so each message rides as one
attribute on vLLM's own object, written and read only through this module::

    scheduler --StepMessage--> every worker   on SchedulerOutput, before the forward pass
    worker    --WorkerReport-> scheduler      on ModelRunnerOutput (rank 0's is read)

Both are frozen dataclasses of plain values, so they cross the executor's process
boundary (mp queues on CPU, Ray on GPU) as they are. Importing this module does not
import vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nightjar_ray.memory.events import MemoryEvent

_MESSAGE_ATTR = "nightjar_step_message"
_REPORT_ATTR = "nightjar_worker_report"


@dataclass(frozen=True)
class StepMessage:
    """What every worker applies or records before this step's forward pass."""

    memory_event: MemoryEvent | None = None
    """Memory work of this step boundary (``None``: nothing to do)."""
    scheduler_counts: dict[str, Any] = field(default_factory=dict)
    """The scheduler's cumulative memory counts (JSON-able), so one ``collective_rpc``
    reads both sides (``nightjar_memory_stats()["scheduler"]``)."""
    undrafted_req_ids: frozenset[str] = frozenset()
    """Requests of this step the draft skips while the others speculate (per-request
    draft eligibility); empty when the step drafts every request or plays gamma 0."""


@dataclass(frozen=True)
class DraftEventCounts:
    """A worker's cumulative draft offloads and reloads with their seconds."""

    num_offloads: int
    offload_s: float
    num_reloads: int
    reload_s: float


WORKER_EVENT_KINDS = ("expand", "contract", "reload")
"""Elastic-memory events a worker times its own share of (:class:`WorkerEventTimes`)."""


@dataclass(frozen=True)
class WorkerEventTimes:
    """One rank's cumulative share of elastic-memory events on the step loop: per kind of
    :data:`WORKER_EVENT_KINDS`, the events it applied and their seconds.

    expand: the draft's offload and the commit of the grown region's pages; contract: the
    block moves and the release of the region's pages; reload: the commit of the draft's
    KV pages and the reload's dispatch (the load itself runs beside the step loop)."""

    counts: tuple[int, ...] = (0, 0, 0)
    seconds: tuple[float, ...] = (0.0, 0.0, 0.0)

    def with_event(self, kind: str, seconds: float) -> WorkerEventTimes:
        """These times plus one ``kind`` event of ``seconds``."""
        if kind not in WORKER_EVENT_KINDS:
            raise ValueError(f"kind must be one of {WORKER_EVENT_KINDS}, got {kind!r}")
        i = WORKER_EVENT_KINDS.index(kind)
        counts, spent = list(self.counts), list(self.seconds)
        counts[i] += 1
        spent[i] += seconds
        return WorkerEventTimes(tuple(counts), tuple(spent))

    def to_json(self) -> dict[str, list[float]]:
        """``{kind: [count, seconds]}``, the shape of the scheduler's ``memory_events``."""
        return {
            kind: [n, s]
            for kind, n, s in zip(WORKER_EVENT_KINDS, self.counts, self.seconds, strict=True)
        }


@dataclass(frozen=True)
class WorkerReport:
    """Facts a worker states with each step output, all cumulative or current."""

    catch_up_s: float = 0.0
    """Seconds of draft catch-up forwards since start (or the last stats reset)."""
    num_catch_up_tokens: int = 0
    """Tokens those catch-ups processed."""
    num_max_blocks: int | None = None
    """N_max: the block count this rank's KV arena can hold (elastic memory only)."""
    draft_ready: bool = False
    """A started background reload has finished loading the draft's weights."""
    draft_events: DraftEventCounts | None = None
    """Offloads and reloads so far (``None`` without a draft offloader)."""
    event_times: WorkerEventTimes | None = None
    """This rank's share of the elastic-memory events so far (``None`` without elastic
    memory)."""


def attach_step_message(scheduler_output: Any, message: StepMessage) -> None:
    setattr(scheduler_output, _MESSAGE_ATTR, message)


def read_step_message(scheduler_output: Any) -> StepMessage | None:
    message: StepMessage | None = getattr(scheduler_output, _MESSAGE_ATTR, None)
    return message


def attach_worker_report(model_runner_output: Any, report: WorkerReport) -> None:
    setattr(model_runner_output, _REPORT_ATTR, report)


def read_worker_report(model_runner_output: Any) -> WorkerReport | None:
    report: WorkerReport | None = getattr(model_runner_output, _REPORT_ATTR, None)
    return report
