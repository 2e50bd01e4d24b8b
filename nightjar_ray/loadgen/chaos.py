"""Faults under load: run open-loop load, inject a fault at a set time, report what broke.

The fault and the recovery check are callables (``nightjar_ray.cli.faults`` provides the
Ray ones: kill the policy actor, kill one replica), so this module stays free of Ray. The
requests cycle over a few prompts whose greedy outputs are recorded once before the run;
every successful request's text is compared with its prompt's reference, so a fault that
changed an output (not only one that failed a request) shows.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nightjar_ray.loadgen.client import TIMEOUT_STATUS, RunResult, run_open_loop
from nightjar_ray.workload import Prompt, RequestSpec
from nightjar_ray.workload.arrivals import poisson


@dataclass(frozen=True)
class ChaosReport:
    """Outcome of one fault under load (times in seconds from the run's start)."""

    scenario: str
    num_requests: int
    num_failed: int
    failed_statuses: tuple[str, ...]
    fault_at_s: float
    recovery_s: float | None
    """Seconds from the fault until the recovery check passed (None: it never did)."""
    num_hung: int
    """Requests that got no byte for the client timeout (a hang; any is a failure)."""
    num_compared: int
    num_mismatched: int
    """Successful requests whose text differs from their prompt's greedy reference."""
    mismatched: tuple[tuple[int, str, str], ...] = ()
    """(request ``req_id``, its text, the reference) of each mismatch."""


def chaos_requests(
    prompts: list[tuple[int, ...]], rate_rps: float, duration_s: float, max_tokens: int, seed: int
) -> list[RequestSpec]:
    """Poisson arrivals cycling over ``prompts`` (each request's prompt is index % len)."""
    times = poisson(rate_rps).times(duration_s, random.Random(seed))
    return [_spec(i, t, prompts[i % len(prompts)], max_tokens) for i, t in enumerate(times)]


def _spec(req_id: int, arrival_s: float, prompt: tuple[int, ...], max_tokens: int) -> RequestSpec:
    return RequestSpec(req_id, arrival_s, len(prompt), max_tokens, prompt)


def reference_texts(
    url: str,
    model: str,
    prompts: list[tuple[int, ...]],
    max_tokens: int,
    headers: Mapping[str, str] | None = None,
) -> dict[Prompt, str]:
    """Each prompt's greedy output, one request at a time, before any fault."""
    out: dict[Prompt, str] = {}
    for i, prompt in enumerate(prompts):
        spec = _spec(i, 0.0, prompt, max_tokens)
        (record,) = asyncio.run(run_open_loop(url, model, [spec], headers=headers)).records
        if not record.ok:
            raise RuntimeError(f"reference request failed: {record.status} {record.error}")
        out[prompt] = record.text or ""
    return out


def _inject(
    fault: Callable[[], None], recovered: Callable[[], bool], at_s: float, timeout_s: float,
    t0: float, result: dict[str, float],
) -> None:  # fmt: skip
    time.sleep(max(0.0, at_s - (time.monotonic() - t0)))
    result["fault_at_s"] = time.monotonic() - t0
    fault()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if recovered():
            result["recovered_at_s"] = time.monotonic() - t0
            return
        time.sleep(0.5)


def run_chaos(
    scenario: str,
    url: str,
    model: str,
    requests: list[RequestSpec],
    references: dict[Prompt, str],
    fault: Callable[[], None],
    recovered: Callable[[], bool],
    fault_at_s: float,
    recovery_timeout_s: float = 300.0,
    client_timeout_s: float = 120.0,
    headers: Mapping[str, str] | None = None,
) -> tuple[ChaosReport, RunResult]:
    """Send ``requests`` open loop (``headers`` on each); at ``fault_at_s`` call ``fault``;
    poll ``recovered``. A request that gets no byte for ``client_timeout_s`` ends as hung."""
    times: dict[str, float] = {}
    t0 = time.monotonic()
    injector = threading.Thread(
        target=_inject, args=(fault, recovered, fault_at_s, recovery_timeout_s, t0, times)
    )
    injector.start()
    run = asyncio.run(
        run_open_loop(url, model, requests, timeout_s=client_timeout_s, headers=headers)
    )
    injector.join()
    reference_of = {s.req_id: references[s.prompt] for s in requests if s.prompt is not None}
    ok = [r for r in run.records if r.ok]
    mismatched = tuple(
        (r.req_id, r.text or "", reference_of[r.req_id])
        for r in ok
        if r.text != reference_of[r.req_id]
    )
    failed = [r.status for r in run.records if not r.ok]
    hung = [r for r in run.records if r.status == TIMEOUT_STATUS]
    fault_at = times.get("fault_at_s", float("nan"))
    recovered_at = times.get("recovered_at_s")
    report = ChaosReport(
        scenario, len(run.records), len(failed), tuple(sorted(set(failed))), fault_at,
        None if recovered_at is None else recovered_at - fault_at, len(hung), len(ok),
        len(mismatched),
        mismatched,
    )  # fmt: skip
    return report, run
