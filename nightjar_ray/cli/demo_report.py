"""The main job's per-phase numbers: replica reports from the policy actor, vLLM's
spec-decode counters, and the table.

Each replica's engine reports its cumulative telemetry to the policy actor at
every sync; a phase's gamma distribution is the difference between the
reports taken right after the phase ended and right after the previous one. The
acceptance figures are the differences of vLLM's counters on Ray's metrics port
(:mod:`nightjar_ray.loadgen.counters`) over the phase.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from nightjar_ray.cli.load import PhaseResult
from nightjar_ray.loadgen.counters import SpecDecodeCounts, spec_decode_figures
from nightjar_ray.serve.context import NAMESPACE

ACTOR_PREFIX = "nightjar-policy.nightjar."
FRESH_TIMEOUT_S = 60.0

Reports = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class PhaseEngineStats:
    """What the engines did during one phase (summed over replicas)."""

    steps_by_gamma: tuple[int, ...]
    num_switches: int
    catch_up_s: float
    num_resident: int
    num_replicas: int

    def gamma_distribution(self) -> str:
        total = sum(self.steps_by_gamma)
        if total == 0:
            return "(no decoding steps)"
        return " ".join(f"{g}:{100 * n / total:.0f}%" for g, n in enumerate(self.steps_by_gamma))


@dataclass(frozen=True)
class PhaseReport:
    """One phase: the client's records, the engines' stats, vLLM's counts (None when
    the metrics port had none)."""

    phase: PhaseResult
    engine: PhaseEngineStats
    spec_decode: SpecDecodeCounts | None

    def acceptance(self) -> str:
        """``rate% / tokens per step``, or ``-`` where a figure is missing."""
        figures = spec_decode_figures(self.spec_decode) if self.spec_decode else {}
        rate, per_step = (
            figures.get("spec_decode_acceptance_rate"),
            figures.get("spec_decode_tokens_per_step"),
        )
        rate_s = "-" if not isinstance(rate, float) else f"{rate:.0f}%"
        step_s = "-" if not isinstance(per_step, float) else f"{per_step:.2f}"
        return f"{rate_s}/{step_s}"


class ReplicaReports:
    """Reads the replicas' latest telemetry from the deployment's policy actor."""

    def __init__(self, actor: Any, num_replicas: int) -> None:
        self._actor, self._num_replicas = actor, num_replicas

    @classmethod
    def connect(cls, num_replicas: int, timeout_s: float = FRESH_TIMEOUT_S) -> ReplicaReports:
        import ray

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            names = [
                a["name"]
                for a in ray.util.list_named_actors(all_namespaces=True)
                if a["namespace"] == NAMESPACE and a["name"].startswith(ACTOR_PREFIX)
            ]
            if names:
                return cls(ray.get_actor(names[0], namespace=NAMESPACE), num_replicas)
            time.sleep(0.5)
        raise RuntimeError("the Nightjar policy actor did not appear")

    def wait_fresh(self, after_s: float, timeout_s: float = FRESH_TIMEOUT_S) -> Reports:
        """Every replica's report, once each was taken after ``after_s`` (wall clock)."""
        import ray

        deadline = time.monotonic() + timeout_s
        while True:
            status = ray.get(self._actor.status.remote())
            fresh = {
                name: rec["report"]
                for name, rec in status["replicas"].items()
                if rec["report"] is not None and rec["last_report_s"] > after_s
            }
            if len(fresh) >= self._num_replicas or time.monotonic() > deadline:
                return fresh
            time.sleep(0.25)

    @staticmethod
    def delta(before: Reports, after: Reports) -> PhaseEngineStats:
        steps: list[int] = []
        switches, catch_up, resident = 0, 0.0, 0
        for name, now in after.items():
            prev = before.get(name)
            counts = now["steps_by_gamma"]
            old = prev["steps_by_gamma"] if prev else [0] * len(counts)
            steps = steps or [0] * len(counts)
            steps = [s + n - o for s, n, o in zip(steps, counts, old, strict=True)]
            switches += now["num_switches"] - (prev["num_switches"] if prev else 0)
            catch_up += now["catch_up_seconds"] - (prev["catch_up_seconds"] if prev else 0.0)
            resident += bool(now["draft_resident"])
        return PhaseEngineStats(tuple(steps), switches, catch_up, resident, len(after))


def print_report(results: list[PhaseReport]) -> None:
    """One row per phase (see module docstring)."""
    header = (
        f"{'phase':<6} {'conc':>4} {'reqs':>5} {'fail':>4} {'out tok/s':>9} "
        f"{'TTFT ms mean/p90':>17} {'TPOT ms mean/p90':>17} {'accept/tok-step':>15} "
        f"{'switches':>8} {'draft':>8}  gamma distribution (share of steps)"
    )
    print("\nPer phase (OpenAI endpoint, streaming, greedy):")
    print(header)
    for report in results:
        phase, engine = report.phase, report.engine
        ttft, tpot = phase.ttft_ms(), phase.tpot_ms()
        print(
            f"{phase.name:<6} {phase.concurrency:>4} {len(phase.ok):>5} {phase.num_failed:>4} "
            f"{phase.output_tokens_per_s():>9.1f} {ttft[0]:>8.1f}/{ttft[1]:<8.1f} "
            f"{tpot[0]:>8.1f}/{tpot[1]:<8.1f} {report.acceptance():>15} "
            f"{engine.num_switches:>8} "
            f"{engine.num_resident}/{engine.num_replicas} res  {engine.gamma_distribution()}"
        )
    print(
        "accept: draft tokens accepted (vLLM's counters); tok-step: output tokens per "
        "request per step, steps without speculation included."
    )
    print("draft: replicas whose draft model is resident on the device at the phase's end.")
