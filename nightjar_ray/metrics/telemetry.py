"""Counters of one engine, bumped by the scheduler's step loop and read by a reporter.

The step loop only adds to ints and floats and replaces one frozen snapshot, so
it never waits on a lock, on Ray or on the network; a background thread (the
Serve link) calls :meth:`EngineTelemetry.read` every few seconds and publishes
differences. Every mapping here has fixed keys, so a concurrent read never sees
a dict change size.

::

    scheduler (engine-core main thread)          link thread (every interval)
    on_step / on_observed / on_catch_up   -->    read() -> TelemetryReading
    set_load(LoadSnapshot)                       -> Prometheus (ray.util.metrics)
    record_memory_event(kind, seconds)           -> policy actor report (JSON)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MEMORY_EVENT_KINDS = ("offload", "reload", "expand", "contract")
"""Elastic-memory events (the memory controller reports them; Serve exports them)."""

DECISION_MODES = ("explore", "exploit", "queue", "gated")
"""``queue``: the queue-aware objective chose gamma (requests were waiting)."""


@dataclass(frozen=True)
class LoadSnapshot:
    """Queue depth and KV blocks after one ``schedule()``: what the memory triggers read
    and what the metrics export (one object, so both see the same values)."""

    num_waiting_reqs: int
    num_running_reqs: int
    num_free_blocks: int
    num_total_blocks: int


@dataclass(frozen=True)
class TelemetryReading:
    """Cumulative counters at one instant (JSON-able through :meth:`to_json`)."""

    num_steps: int
    steps_by_gamma: tuple[int, ...]
    decisions_by_mode: dict[str, int]
    num_observed_steps: int
    observed_tokens: int
    observed_seconds: float
    observed_depth_reqs: int
    """Drafted requests behind the observed steps' acceptance depths, summed over the
    depths each step tried (the count the policy's ``reach_rate`` table gains)."""
    num_switches: int
    num_drafted_reqs: int
    """Request-steps the draft ran over (steps that speculated)."""
    num_undrafted_reqs: int
    """Request-steps the draft skipped in steps that speculated (per-request gate)."""
    catch_up_seconds: float
    catch_up_tokens: int
    last_gamma: int
    last_num_reqs: int
    draft_resident: bool
    load: LoadSnapshot | None
    memory_events: dict[str, tuple[int, float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TelemetryReading:
        raw = dict(data)
        raw["steps_by_gamma"] = tuple(raw["steps_by_gamma"])
        raw["load"] = None if raw.get("load") is None else LoadSnapshot(**raw["load"])
        raw["memory_events"] = {k: (int(n), float(s)) for k, (n, s) in raw["memory_events"].items()}
        return cls(**raw)


class EngineTelemetry:
    """Counters of one engine (see module docstring)."""

    def __init__(self, gamma_max: int, *, draft_resident: bool = True) -> None:
        if gamma_max < 0:
            raise ValueError(f"gamma_max must be >= 0, got {gamma_max}")
        self.steps_by_gamma = [0] * (gamma_max + 1)
        self.decisions_by_mode = dict.fromkeys(DECISION_MODES, 0)
        self.num_observed_steps = 0
        self.observed_tokens = 0
        self.observed_depth_reqs = 0
        self.observed_seconds = 0.0
        self.num_switches = 0
        self.num_drafted_reqs = 0
        self.num_undrafted_reqs = 0
        self.catch_up_seconds = 0.0
        self.catch_up_tokens = 0
        self.last_gamma = 0
        self.last_num_reqs = 0
        self.draft_resident = draft_resident
        self.load: LoadSnapshot | None = None
        self.memory_events = {kind: [0, 0.0] for kind in MEMORY_EVENT_KINDS}

    def on_step(
        self,
        gamma: int,
        num_reqs: int,
        *,
        explored: bool,
        consulted: bool,
        gated: bool = False,
        queued: bool = False,
        num_drafted_reqs: int = 0,
        num_undrafted_reqs: int = 0,
    ) -> None:
        """One scheduled step ran with ``gamma`` (a switch if it resumes speculation);
        ``gated``: the draft gate overrode the policy's gamma with 0; ``queued``: the
        queue-aware objective chose it; the draft ran over ``num_drafted_reqs`` of the
        step's requests and skipped ``num_undrafted_reqs``."""
        self.num_switches += self.last_gamma == 0 and gamma > 0
        self.steps_by_gamma[gamma] += 1
        if gated:
            self.decisions_by_mode["gated"] += 1
        elif consulted:
            mode = "explore" if explored else "queue" if queued else "exploit"
            self.decisions_by_mode[mode] += 1
        self.num_drafted_reqs += num_drafted_reqs
        self.num_undrafted_reqs += num_undrafted_reqs
        self.last_gamma = gamma
        self.last_num_reqs = num_reqs

    def on_observed(self, num_tokens: int, duration_s: float, num_depth_reqs: int = 0) -> None:
        """A step the policy learned from: its tokens and wall time (goodput), and the
        drafted requests behind its acceptance depths."""
        self.num_observed_steps += 1
        self.observed_tokens += num_tokens
        self.observed_seconds += duration_s
        self.observed_depth_reqs += num_depth_reqs

    def on_catch_up(self, seconds: float, num_tokens: int) -> None:
        """Draft KV catch-up work done by the workers since the last report."""
        self.catch_up_seconds += seconds
        self.catch_up_tokens += num_tokens

    def set_load(self, load: LoadSnapshot) -> None:
        self.load = load

    def record_memory_event(self, kind: str, duration_s: float) -> None:
        """Count one elastic-memory event (``MEMORY_EVENT_KINDS``) and its duration."""
        entry = self.memory_events.get(kind)
        if entry is None:
            raise ValueError(f"unknown memory event {kind!r}; one of {MEMORY_EVENT_KINDS}")
        if not duration_s >= 0.0:
            raise ValueError(f"memory event duration must be >= 0, got {duration_s}")
        entry[0] += 1
        entry[1] += duration_s

    def read(self) -> TelemetryReading:
        """A consistent-enough copy of every counter (each field read once)."""
        return TelemetryReading(
            num_steps=sum(self.steps_by_gamma),
            steps_by_gamma=tuple(self.steps_by_gamma),
            decisions_by_mode=dict(self.decisions_by_mode),
            num_observed_steps=self.num_observed_steps,
            observed_tokens=self.observed_tokens,
            observed_seconds=self.observed_seconds,
            observed_depth_reqs=self.observed_depth_reqs,
            num_switches=self.num_switches,
            num_drafted_reqs=self.num_drafted_reqs,
            num_undrafted_reqs=self.num_undrafted_reqs,
            catch_up_seconds=self.catch_up_seconds,
            catch_up_tokens=self.catch_up_tokens,
            last_gamma=self.last_gamma,
            last_num_reqs=self.last_num_reqs,
            draft_resident=self.draft_resident,
            load=self.load,
            memory_events={k: (int(v[0]), float(v[1])) for k, v in self.memory_events.items()},
        )
