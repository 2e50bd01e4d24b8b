"""How far the cost model's own per-step choice goes on the workload suite.

    python benchmarks/suite_oracles.py [--cache /tmp/suite-statics.pkl] [--jobs 2] [--cells]

Two diagnostics, each run as nightjar is (true skip at gamma 0, elastic memory), with no
learning and no probes, judged by the suite's goals against the statics (cached as
``suite_sweep.py`` caches them):

- ``batch-oracle``: the cost model's fastest gamma per batch size at 512 tokens of context
  and the dataset's mean acceptance (``sim.experiments.batch_oracle``);
- ``context-oracle``: the same, read at each step's own mean decode context, which a
  policy keyed by batch size alone cannot see (the KV read grows with it, and with it
  what speculation amortizes).

Deterministic: no policy RNG. What a learning policy reaches cold is compared with these
in docs/benchmarks.md ("Workload suite (simulator)").
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root, for ``benchmarks.*``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.suite_sweep import Case, cases, run_all, statics_of
from nightjar_ray.cli.simulate_suite import suite_contenders
from nightjar_ray.policy.base import Policy, StepResult, validate_result
from nightjar_ray.policy.stats import PolicyStats
from nightjar_ray.sim.calibration import token_latency_s
from nightjar_ray.sim.experiments import (
    BATCH_ORACLE_CONTEXT_TOKENS,
    LoadRow,
    RunKnobs,
    batch_oracle,
    build_contender_policy,
    oracle_label,
    server_options,
)
from nightjar_ray.sim.metrics import Summary, summarize
from nightjar_ray.sim.presets import SETTINGS, Setting, get_setting
from nightjar_ray.sim.server import ServerOptions, SimServer
from nightjar_ray.sim.suite import SUITE
from nightjar_ray.sim.suite_report import MAX_E2E_OF_BEST_STATIC, SuiteCell

ORACLES = ("batch-oracle", "context-oracle")
GAMMA_MAX = 4
CONTEXT_BUCKET_TOKENS = 32
"""The context-oracle reads the cost model at the step's mean context rounded to this."""


class ContextOracle(Policy):
    """The cost model's fastest gamma at the step's batch size and ``context_tokens`` (the
    running decodes' mean context, which :class:`ContextServer` sets before each choice)."""

    name = "context-oracle"

    def __init__(self, setting: Setting) -> None:
        self.context_tokens = float(BATCH_ORACLE_CONTEXT_TOKENS)
        acc = setting.acceptance_for("sharegpt")

        @cache
        def fastest(num_reqs: int, context_bucket: int) -> int:
            ctx = context_bucket * CONTEXT_BUCKET_TOKENS + CONTEXT_BUCKET_TOKENS // 2
            arms = range(GAMMA_MAX + 1)
            lat = [token_latency_s(setting, num_reqs, g, ctx, acc) for g in arms]
            return min(arms, key=lat.__getitem__)

        self._fastest = fastest

    @property
    def gamma_max(self) -> int:
        return GAMMA_MAX

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        bucket = int(self.context_tokens) // CONTEXT_BUCKET_TOKENS
        return self._fastest(max(1, num_reqs), bucket)

    def observe(self, result: StepResult) -> None:
        validate_result(result, GAMMA_MAX)

    def export_stats(self) -> PolicyStats:
        return PolicyStats(self.name)

    def load_stats(self, stats: PolicyStats) -> None:
        self.check_stats_owner(stats)


class ContextServer(SimServer):
    """A simulator that hands ``oracle`` its running decodes' mean context before each
    choice."""

    def __init__(self, setting: Setting, oracle: ContextOracle, options: ServerOptions) -> None:
        super().__init__(setting, oracle, options)
        self.oracle = oracle

    def _choose(self, num_reqs: int, max_skip_tokens: int) -> int:
        decodes = [r for r in self.scheduler.running if not r.is_prefilling]
        if decodes:
            self.oracle.context_tokens = sum(r.num_computed for r in decodes) / len(decodes)
        return super()._choose(num_reqs, max_skip_tokens)


def run_oracle(task: tuple[Case, str]) -> Summary:
    case, label = task
    setting = get_setting(case.setting)
    c = batch_oracle(setting, "sharegpt")
    options = server_options(setting, c, "sharegpt", case.seed, RunKnobs())
    if label == "batch-oracle":
        policy = build_contender_policy(setting, c, case.seed)
        return summarize(SimServer(setting, policy, options).run(case.requests))
    server = ContextServer(setting, ContextOracle(setting), options)
    return summarize(server.run(case.requests))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--settings", default=",".join(SETTINGS))
    p.add_argument("--workloads", default=",".join(SUITE))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--cache", default="/tmp/suite-statics.pkl")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--cells", action="store_true", help="every cell, not only misses")
    args = p.parse_args()
    args.length_scale = 1
    all_cases = list(cases(args))
    statics = [c for c in suite_contenders({}, False) if c.label != "nightjar"]
    cache, _ = run_all(all_cases, statics, [], args)
    keys = [(i, label) for i in range(len(all_cases)) for label in ORACLES]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        summaries = pool.map(run_oracle, [(all_cases[i], label) for i, label in keys])
        runs = dict(zip(keys, summaries, strict=True))
    for label in ORACLES:
        passed = {"all": 0, "issue": 0}
        worst = 1.0
        for i, case in enumerate(all_cases):
            by = statics_of(cache, case, statics, 1)
            row = LoadRow("", by | {label: runs[(i, label)]}, oracle_label(by))
            cell = SuiteCell(case.setting, case.workload, case.seed, row)
            ok = cell.e2e_of_best_static(label) <= MAX_E2E_OF_BEST_STATIC
            passed["all"] += ok
            passed["issue"] += ok and case.workload != "mixed"
            worst = min(worst, cell.of_best_static(label))
            if args.cells or not ok:
                print(
                    f"{label}: {case.setting:11s} {case.workload:14s} s{case.seed} "
                    f"thr/best static {cell.of_best_static(label):.3f} "
                    f"E2E/best static's {cell.e2e_of_best_static(label):.3f} ({row.oracle_label})"
                )
        print(
            f"== {label}: mean E2E within {MAX_E2E_OF_BEST_STATIC}x of the best static's in "
            f"{passed['all']} of {len(all_cases)} cells ({passed['issue']} without mixed); "
            f"worst throughput / best static {worst:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
