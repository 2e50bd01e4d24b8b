"""Results of a simulated run and their summary (the load generator's metrics).

Every request of a run finishes, so its record (:class:`RequestRecord`, sent at its
arrival) has both a first token and a finish time.

* throughput: (prompt + output tokens) / makespan, the paper's "total token throughput";
  output throughput counts generated tokens only. Makespan runs from t=0 to the last
  finish, so a policy that drains the queue sooner has the higher throughput.
* TTFT = first token - arrival; TPOT = (finish - first token) / (output tokens - 1);
  E2E = finish - arrival. Means, and p99 where noted.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from nightjar_ray.sim.elastic import MemoryEvent
from nightjar_ray.workload import RequestRecord


@dataclass(frozen=True)
class StepRecord:
    """One engine step on the gamma timeline."""

    time_s: float
    """Clock at the end of the step."""
    duration_s: float
    num_reqs: int
    gamma: int
    num_running: int
    num_waiting: int
    num_free_blocks: int


@dataclass(frozen=True)
class SimResult:
    records: tuple[RequestRecord, ...]
    timeline: tuple[StepRecord, ...]
    memory_events: tuple[MemoryEvent, ...]
    num_steps: int
    num_preemptions: int
    catchup_s: float
    """Total draft catch-up time (C_switch paid)."""


@dataclass(frozen=True)
class Summary:
    num_requests: int
    makespan_s: float
    throughput_tokens_per_s: float
    output_throughput_tokens_per_s: float
    mean_ttft_s: float
    p99_ttft_s: float
    mean_tpot_s: float
    mean_e2e_s: float
    p99_e2e_s: float
    mean_gamma: float
    num_preemptions: int
    num_offloads: int


def _p99(values: Sequence[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def finish_s(record: RequestRecord) -> float:
    """When a simulated request finished (every request of a run does)."""
    return _measured(record, record.finish_s)


def _measured(record: RequestRecord, value_s: float | None) -> float:
    if value_s is None:
        raise ValueError(f"request {record.req_id} did not finish")
    return value_s


def summarize(result: SimResult) -> Summary:
    recs = result.records
    if not recs:
        raise ValueError("no finished requests to summarize")
    makespan = max(finish_s(r) for r in recs)
    prompt = sum(r.num_prompt_tokens for r in recs)
    output = sum(r.num_output_tokens for r in recs)
    tpots = [t for r in recs if (t := r.tpot_s) is not None]
    ttfts = [_measured(r, r.ttft_s) for r in recs]
    e2es = [_measured(r, r.e2e_s) for r in recs]
    decode_steps = [s for s in result.timeline if s.num_reqs > 0]
    return Summary(
        num_requests=len(recs),
        makespan_s=makespan,
        throughput_tokens_per_s=(prompt + output) / makespan,
        output_throughput_tokens_per_s=output / makespan,
        mean_ttft_s=statistics.fmean(ttfts),
        p99_ttft_s=_p99(ttfts),
        mean_tpot_s=statistics.fmean(tpots) if tpots else 0.0,
        mean_e2e_s=statistics.fmean(e2es),
        p99_e2e_s=_p99(e2es),
        mean_gamma=statistics.fmean(s.gamma for s in decode_steps) if decode_steps else 0.0,
        num_preemptions=result.num_preemptions,
        num_offloads=sum(1 for e in result.memory_events if e.kind == "expand"),
    )
