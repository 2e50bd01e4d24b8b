"""The self-check's lines: what each one concludes from an engine run's figures, and the report.

Every line is PASS or FAIL with a one-line detail and its figures (JSON-able). The report
passes only if every line passed: exit code 0, else 1. The functions here read plain
figures (token ids, the workers' JSON stats) and import no vLLM, so they are tested
without engines; ``engine/selfcheck.py`` runs the engines that produce the figures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

PAPER_TABLE6_S = {"expand": 143.9e-3, "contract": 11.9e-3, "reload": 21.9e-6}
"""The paper's Table 6 (a 30B model on 2 L20 GPUs): KV cache expansion, contraction
(Triton) and the draft reload's dispatch on the step loop, in seconds."""
EVENT_KINDS = ("expand", "contract", "offload", "reload")
ABSURD_EVENT_S = 10.0
"""An elastic-memory event slower than this on the step loop stalls serving: the latency
line fails (it is informational below it)."""


@dataclass(frozen=True)
class CheckLine:
    """One line of the report: ``name`` PASS or FAIL, why in one line, and its figures."""

    name: str
    passed: bool
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "FAIL"


def error_line(name: str, error: BaseException) -> CheckLine:
    """A FAIL line for a check whose engine run raised ``error`` (its first line)."""
    message = str(error).strip().splitlines()
    return CheckLine(name, False, f"{type(error).__name__}: {message[0] if message else ''}")


@dataclass(frozen=True)
class SelfCheckReport:
    """The lines of one self-check, in order, and the setup they ran with."""

    lines: tuple[CheckLine, ...]
    setup: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.lines) and all(line.passed for line in self.lines)

    @property
    def exit_code(self) -> int:
        """0 if every line passed, 1 otherwise."""
        return 0 if self.passed else 1

    def summary(self) -> CheckLine:
        failed = [line.name for line in self.lines if not line.passed]
        total = len(self.lines)
        if not self.lines:
            return CheckLine("summary", False, "no check ran")
        if failed:
            return CheckLine(
                "summary", False, f"{len(failed)} of {total} failed: {', '.join(failed)}"
            )
        return CheckLine("summary", True, f"all {total} checks passed")

    def format(self) -> str:
        """One row per line and the summary: name, PASS/FAIL, detail (plain text)."""
        rows = [*self.lines, self.summary()]
        width = max(len(line.name) for line in rows)
        return "\n".join(f"{line.name:<{width}}  {line.status}  {line.detail}" for line in rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "exit_code": self.exit_code,
            "setup": self.setup,
            "lines": [{**asdict(line), "status": line.status} for line in self.lines],
            "summary": asdict(self.summary()),
        }


def first_divergence(
    outputs: Sequence[list[int]], reference: Sequence[list[int]]
) -> dict[str, int]:
    """Identical prompts and the first differing (prompt, token) position (-1 if none)."""
    if len(outputs) != len(reference):
        raise ValueError(f"{len(outputs)} outputs for {len(reference)} reference outputs")
    identical = sum(o == r for o, r in zip(outputs, reference, strict=True))
    for i, (out, ref) in enumerate(zip(outputs, reference, strict=True)):
        if out != ref:
            token = next(
                (t for t, (a, b) in enumerate(zip(out, ref, strict=False)) if a != b),
                min(len(out), len(ref)),
            )
            return {"num_identical": identical, "prompt": i, "token": token}
    return {"num_identical": identical, "prompt": -1, "token": -1}


def _identity(
    outputs: Sequence[list[int]], reference: Sequence[list[int]]
) -> tuple[bool, str, dict[str, Any]]:
    """Whether ``outputs`` equal ``reference``, a phrase saying so, and the figures."""
    found = {"num_prompts": len(reference), **first_divergence(outputs, reference)}
    if found["prompt"] < 0:
        return (
            True,
            f"{len(reference)}/{len(reference)} prompts token-identical to stock vLLM",
            found,
        )
    return (
        False,
        (
            f"{found['num_identical']}/{len(reference)} prompts identical to stock vLLM; first "
            f"difference at prompt {found['prompt']}, token {found['token']}"
        ),
        found,
    )


def lossless_line(
    name: str, outputs: Sequence[list[int]], reference: Sequence[list[int]]
) -> CheckLine:
    """Greedy outputs under the engine's own policy against stock vLLM without speculation."""
    same, phrase, figures = _identity(outputs, reference)
    return CheckLine(name, same, phrase, figures)


def _check(checks: Sequence[tuple[bool, str]]) -> list[str]:
    """The messages of the conditions that do not hold."""
    return [message for ok, message in checks if not ok]


def gamma_schedule_line(
    name: str,
    outputs: Sequence[list[int]],
    reference: Sequence[list[int]],
    draft: dict[str, Any],
    schedule: Sequence[int],
) -> CheckLine:
    """A forced gamma schedule with 0 in it: outputs identical, every gamma played, no draft
    forward at gamma 0, and the draft caught up when speculation resumed (``draft``: the
    first worker's ``DraftSyncStats`` JSON)."""
    same, phrase, figures = _identity(outputs, reference)
    steps = draft["steps"]
    played = {g: sum(s["num_spec_tokens"] == g for s in steps) for g in sorted(set(schedule))}
    drafted_at_0 = sum(s["num_draft_forwards"] for s in steps if s["num_spec_tokens"] == 0)
    figures |= {
        "steps_by_gamma": played,
        "num_catch_ups": draft["num_catch_ups"],
        "num_catch_up_tokens": draft["num_catch_up_tokens"],
        "num_draft_forwards_at_gamma_0": drafted_at_0,
    }
    failures = _check([
        (same, phrase),
        (all(played.values()), f"gammas never played: {[g for g, n in played.items() if not n]}"),
        (drafted_at_0 == 0, f"{drafted_at_0} draft forwards in gamma-0 steps"),
        (draft["num_catch_up_tokens"] > 0, "no draft catch-up after a gamma-0 step"),
    ])  # fmt: skip
    if failures:
        return CheckLine(name, False, "; ".join(failures), figures)
    counts = ", ".join(f"{g}:{n}" for g, n in played.items())
    detail = (
        f"{phrase}; steps by gamma {counts}; {draft['num_catch_ups']} catch-ups "
        f"({draft['num_catch_up_tokens']} tokens)"
    )
    return CheckLine(name, True, detail, figures)


def _mib(num_bytes: int) -> str:
    return f"{num_bytes / 2**20:.1f} MiB"


def elastic_line(
    name: str,
    runs: Sequence[Sequence[list[int]]],
    reference: Sequence[list[int]],
    ranks: Sequence[dict[str, Any]],
) -> CheckLine:
    """Expand/offload/contract/reload cycles: outputs of every run identical, the pool back
    at its stock size, committed bytes never above stock vLLM's, the reloaded draft's
    weights bit-identical, every rank agreeing (``ranks``: each rank's memory stats)."""
    outputs = [token_ids for run in runs for token_ids in run]
    same, phrase, figures = _identity(outputs, list(reference) * len(runs))
    worker = ranks[0]
    sched, draft = worker["scheduler"], worker["draft"]
    stock_bytes = worker["stock_kv_bytes"] + draft.get("draft_bytes", 0)
    figures |= {
        "num_stock_blocks": worker["num_stock_blocks"],
        "num_max_blocks": worker["num_max_blocks"],
        "peak_num_blocks": sched.get("peak_num_blocks", 0),
        "num_blocks_after": sched.get("num_blocks", worker["num_blocks"]),
        "num_expansions": sched.get("num_expansions", 0),
        "num_contractions": sched.get("num_contractions", 0),
        "num_moved_blocks": worker["num_moved_blocks"],
        "num_reloads": draft.get("num_reloads", 0),
        "num_verified_reloads": draft.get("num_verified_reloads", 0),
        "weights_identical": draft.get("weights_identical", False),
        "peak_committed_bytes": worker["peak_committed_bytes"],
        "stock_committed_bytes": stock_bytes,
    }
    failures = _check(_elastic_conditions(figures, ranks))
    if not same:
        failures.insert(0, phrase)
    if failures:
        return CheckLine(name, False, "; ".join(failures), figures)
    f = figures
    detail = (
        f"{phrase} over {len(runs)} runs; pool {f['num_stock_blocks']} -> {f['peak_num_blocks']} "
        f"-> {f['num_blocks_after']} blocks ({f['num_expansions']} expansions, "
        f"{f['num_contractions']} contractions, {f['num_moved_blocks']} blocks moved); peak "
        f"committed {_mib(f['peak_committed_bytes'])} <= stock {_mib(stock_bytes)}; draft "
        f"weights bit-identical after {f['num_reloads']} reloads"
    )
    return CheckLine(name, True, detail, figures)


def _elastic_conditions(
    f: dict[str, Any], ranks: Sequence[dict[str, Any]]
) -> list[tuple[bool, str]]:
    n_stock, n_max, n_peak = f["num_stock_blocks"], f["num_max_blocks"], f["peak_num_blocks"]
    n_reloads, n_verified = f["num_reloads"], f["num_verified_reloads"]
    peak, stock = _mib(f["peak_committed_bytes"]), _mib(f["stock_committed_bytes"])
    same_keys = ("num_max_blocks", "num_moved_blocks", "history")
    agree = all([r[k] for k in same_keys] == [ranks[0][k] for k in same_keys] for r in ranks)
    return [
        (f["num_expansions"] >= 1 and f["num_contractions"] >= 1,
         f"{f['num_expansions']} expansions, {f['num_contractions']} contractions (need 1 each)"),
        (n_peak == n_max > n_stock, f"pool peaked at {n_peak} blocks, not N_max {n_max}"),
        (f["num_blocks_after"] == n_stock,
         f"pool ended at {f['num_blocks_after']} blocks, not its stock {n_stock}"),
        (0 < f["peak_committed_bytes"] <= f["stock_committed_bytes"],
         f"peak committed {peak} above stock {stock}"),
        (n_reloads >= 1 and n_verified == n_reloads and f["weights_identical"],
         f"draft reloads: {n_verified}/{n_reloads} verified, identical={f['weights_identical']}"),
        (agree, "tensor-parallel ranks disagree on the pool or the moves"),
    ]  # fmt: skip


def _worker_means(ranks: Sequence[dict[str, Any]], kind: str) -> tuple[int, float]:
    """Rank 0's count of ``kind`` events it timed and the slowest rank's mean seconds
    (every rank applies each event at the same step: the step waits for the slowest)."""
    means = []
    for rank in ranks:
        n, seconds = rank.get("worker_events", {}).get(kind, (0, 0.0))
        means.append(seconds / n if n else 0.0)
    count = int(ranks[0].get("worker_events", {}).get(kind, (0, 0.0))[0])
    return count, max(means)


def event_latencies(ranks: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Count and mean seconds of each elastic-memory event on the step loop, the
    scheduler's part and the workers' part (``ranks``: each rank's memory stats).

    expand and contract: the scheduler's pool change (its telemetry) plus the workers'
    share (offload and region commit; block moves and release). offload: the worker's
    draft offload alone (a part of its expand share). reload: the workers' commit of the
    draft's pages and the reload's dispatch (the load runs beside the step loop)."""
    worker = ranks[0]
    events, draft = worker["scheduler"].get("memory_events", {}), worker["draft"]
    out: dict[str, dict[str, float]] = {}
    for kind in ("expand", "contract"):
        n, seconds = events.get(kind, (0, 0.0))
        n_worker, worker_s = _worker_means(ranks, kind)
        scheduler_s = seconds / n if n else 0.0
        out[kind] = {
            "count": n,
            "num_worker_events": n_worker,
            "scheduler_s": scheduler_s,
            "worker_s": worker_s,
            "mean_s": scheduler_s + worker_s,
        }
    n_offloads = draft.get("num_offloads", 0)
    offload_s = draft.get("offload_s", 0.0) / n_offloads if n_offloads else 0.0
    out["offload"] = {"count": n_offloads, "worker_s": offload_s, "mean_s": offload_s}
    n_reloads, reload_s = _worker_means(ranks, "reload")
    n_dispatched = draft.get("num_reloads", 0)
    dispatch_s = draft.get("reload_dispatch_s", 0.0)
    out["reload"] = {
        "count": n_reloads,
        "worker_s": reload_s,
        "dispatch_s": dispatch_s / n_dispatched if n_dispatched else 0.0,
        "mean_s": reload_s,
    }
    return out


def _duration(seconds: float) -> str:
    """Milliseconds from 1 ms up, microseconds below (4 significant digits)."""
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.4g} ms"
    return f"{seconds * 1e6:.4g} us"


def _latency_text(kind: str, figure: dict[str, float]) -> str:
    text = f"{kind} {_duration(figure['mean_s'])}"
    if "scheduler_s" in figure:
        text += (
            f" (scheduler {_duration(figure['scheduler_s'])} + worker "
            f"{_duration(figure['worker_s'])})"
        )
    paper_s = figure.get("paper_s")
    if paper_s:
        text += f" = {figure['ratio']:.3g}x paper {_duration(paper_s)}"
    return text


def latency_line(name: str, ranks: Sequence[dict[str, Any]]) -> CheckLine:
    """Event latencies, scheduler and worker parts, next to the paper's Table 6
    (informational; fails only when an event never ran or took longer than
    ``ABSURD_EVENT_S``)."""
    latencies = event_latencies(ranks)
    parts, failures = [], []
    for kind in EVENT_KINDS:
        figure = latencies[kind]
        paper_s = PAPER_TABLE6_S.get(kind)
        if paper_s is not None:
            figure |= {"paper_s": paper_s, "ratio": figure["mean_s"] / paper_s}
        parts.append(_latency_text(kind, figure))
        if not figure["count"]:
            failures.append(f"no {kind} event ran")
        elif figure["mean_s"] > ABSURD_EVENT_S:
            failures.append(f"{kind} took {_duration(figure['mean_s'])} (> {ABSURD_EVENT_S:g} s)")
    detail = "; ".join(failures) if failures else ", ".join(parts)
    return CheckLine(name, not failures, detail, latencies)


def guarded(name: str, check: Callable[[], CheckLine]) -> CheckLine:
    """``check()``, or a FAIL line naming the error it raised."""
    try:
        return check()
    except Exception as e:  # one check's failure must not hide the others
        return error_line(name, e)
