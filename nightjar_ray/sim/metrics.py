"""Results of a simulated run and their summary (the load generator's metrics).

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


@dataclass(frozen=True)
class RequestRecord:
    req_id: int
    arrival_s: float
    first_token_s: float
    finish_s: float
    num_prompt_tokens: int
    num_output_tokens: int
    num_preemptions: int

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        if self.num_output_tokens < 2:
            return None
        return (self.finish_s - self.first_token_s) / (self.num_output_tokens - 1)


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


def summarize(result: SimResult) -> Summary:
    recs = result.records
    if not recs:
        raise ValueError("no finished requests to summarize")
    makespan = max(r.finish_s for r in recs)
    prompt = sum(r.num_prompt_tokens for r in recs)
    output = sum(r.num_output_tokens for r in recs)
    tpots = [t for r in recs if (t := r.tpot_s) is not None]
    decode_steps = [s for s in result.timeline if s.num_reqs > 0]
    return Summary(
        num_requests=len(recs),
        makespan_s=makespan,
        throughput_tokens_per_s=(prompt + output) / makespan,
        output_throughput_tokens_per_s=output / makespan,
        mean_ttft_s=statistics.fmean(r.ttft_s for r in recs),
        p99_ttft_s=_p99([r.ttft_s for r in recs]),
        mean_tpot_s=statistics.fmean(tpots) if tpots else 0.0,
        mean_e2e_s=statistics.fmean(r.e2e_s for r in recs),
        p99_e2e_s=_p99([r.e2e_s for r in recs]),
        mean_gamma=statistics.fmean(s.gamma for s in decode_steps) if decode_steps else 0.0,
        num_preemptions=result.num_preemptions,
        num_offloads=sum(1 for e in result.memory_events if e.kind == "expand"),
    )
