"""``nightjar-ray bench-serve``: the side-by-side benchmark of policies behind the endpoint.

Starts a local Ray cluster, deploys one Serve app per contender (same generated pair, a
different ``nightjar.policy``), measures the machine's capacity (requests/s that ``off``
sustains under a saturating open loop) unless ``--capacity-rps`` is given, then runs
interleaved paired rounds of every scenario (``nightjar_ray.loadgen.bench``) and writes
``bench-serve.json``, a plot and, with ``--report``, the report section of a markdown file
(``docs/benchmarks.md``'s). More contenders than ``--max-resident`` run in waves
(``plan_waves``); ``--render`` rebuilds the report from saved JSON files without a cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from nightjar_ray.loadgen.bench import (
    BASELINE,
    CONTENDER_EXTRAS,
    CONTENDERS,
    BenchResult,
    plan_waves,
    scenarios,
)
from nightjar_ray.workload.trace import TRACE_ENV, resolve_trace

MODEL_ID = "bench"
KV_BLOCKS = 128


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("bench-serve", help="Side-by-side benchmark of the policies.")
    p.add_argument("--pair", choices=("default", "tiny"), default="default")
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--scenarios", default="low,medium,high,burst,prefill-heavy,trace")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--duration-s", type=float, default=120.0, help="Per scenario and round.")
    p.add_argument("--capacity-rps", type=float, help="Skip calibration: requests/s of off.")
    p.add_argument(
        "--trace",
        type=Path,
        help=f"Azure-format trace CSV of the trace scenario (default: ${TRACE_ENV}; without"
        " either, the trace scenario is left out).",
    )
    p.add_argument(
        "--enforce-eager",
        action="store_true",
        help="Start every engine without torch.compile (quicker start; then the timings are"
        " of eager engines).",
    )
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--out", type=Path, default=Path("bench-serve-results"))
    p.add_argument("--report", type=Path, help="Write the report section into this markdown.")
    p.add_argument(
        "--max-resident",
        type=int,
        default=6,
        help="Most apps deployed at once; more contenders run in waves, each with off and"
        " off-aa again.",
    )
    p.add_argument(
        "--render",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="No cluster: rebuild the report and plot from saved bench-serve.json files,"
        " merged as successive waves.",
    )
    p.set_defaults(func=run)


def contender_args(
    pair: str,
    policy: str,
    params: dict[str, Any],
    extras: dict[str, Any] | None = None,
    enforce_eager: bool = False,
) -> dict[str, Any]:
    """One contender's app config: the main job's config with another policy and, from
    ``extras``, other ``nightjar:`` fields (``nightjar-elastic``: elastic memory on)."""
    from nightjar_ray.cli.demo import demo_app_args

    args = demo_app_args(pair, 1)
    args["model_loading_config"]["model_id"] = MODEL_ID
    args["runtime_env"] = {"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1"}}
    # NOTE: every contender is resident at once; 128 blocks of vLLM's CPU block size
    # (128 tokens) hold 16k tokens, the scenarios' peak concurrency, and no more.
    args["engine_kwargs"]["num_gpu_blocks_override"] = KV_BLOCKS
    if enforce_eager:
        args["engine_kwargs"]["enforce_eager"] = True
    nightjar = {**args["nightjar"], "policy": policy, "policy_params": params}
    args["nightjar"] = {**nightjar, **(extras or {})}
    return args


def _start(http_port: int, max_apps: int) -> str:
    import ray
    from ray import serve

    ray.init(address="local", num_cpus=max(32, 4 * max_apps), log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": http_port})
    return f"http://127.0.0.1:{http_port}"


def _deploy(pair: str, names: list[str], enforce_eager: bool) -> None:
    from ray import serve

    from nightjar_ray.serve import build_app

    for name in names:
        policy, params = CONTENDERS[name]
        print(f"deploying {name} ({policy} {params or ''})", file=sys.stderr, flush=True)
        extras = CONTENDER_EXTRAS.get(name)
        app = build_app(contender_args(pair, policy, params, extras, enforce_eager))
        serve.run(app, name=name, route_prefix=f"/{name}")


def _calibrate(url: str, duration_s: float) -> float:
    """Requests/s ``off`` completes under an arrival rate far above what it can serve."""
    import asyncio
    import random

    from nightjar_ray.loadgen.bench import CHAT_OUTPUT, CHAT_PROMPT
    from nightjar_ray.loadgen.client import run_open_loop
    from nightjar_ray.loadgen.summary import summarize
    from nightjar_ray.loadgen.workload import synthetic_requests
    from nightjar_ray.workload.arrivals import poisson

    reqs = synthetic_requests(
        poisson(5.0), duration_s, CHAT_PROMPT, CHAT_OUTPUT, 1000, random.Random(99)
    )
    summary = summarize(asyncio.run(run_open_loop(f"{url}/{BASELINE}", MODEL_ID, reqs)))
    return float(summary["request_throughput"])


def _app_counts(app: str) -> dict[str, Any] | None:
    """One app's whole-run counters summed over its replicas' latest reports to its policy
    actor: steps per gamma, decisions per mode, elastic-memory events; ``None`` when the
    actor cannot be read."""
    import ray
    from ray.exceptions import RayError

    from nightjar_ray.cli.faults import policy_actor

    try:
        status = ray.get(policy_actor(app).status.remote(), timeout=10)
    except (RayError, RuntimeError):
        return None
    reports = [replica.get("report") or {} for replica in status["replicas"].values()]
    return sum_reports(reports)


def sum_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Replicas' reports to the policy actor summed into one app's counters (memory events
    by count; their seconds are dropped)."""
    total: dict[str, Any] = {"steps_by_gamma": [], "decisions_by_mode": {}, "memory_events": {}}
    for report in reports:
        counts = {
            "steps_by_gamma": [int(n) for n in report.get("steps_by_gamma", ())],
            "decisions_by_mode": {
                k: int(n) for k, n in report.get("decisions_by_mode", {}).items()
            },
            "memory_events": {k: int(n) for k, (n, _s) in report.get("memory_events", {}).items()},
        }
        total = add_counts(total, counts)
    return total


def _retire(names: list[str], counts: dict[str, Any]) -> None:
    """Read each app's counters into ``counts`` (a name in several waves sums them), then
    delete the apps and their detached policy actors so the next wave has the memory."""
    import ray
    from ray import serve

    from nightjar_ray.cli.faults import policy_actor

    for name in names:
        c = _app_counts(name)
        print(f"counters {name}: {c}", file=sys.stderr, flush=True)
        if name in counts:  # NOTE: unreadable counters in any wave make the app's total None
            prev = counts[name]
            c = None if prev is None or c is None else add_counts(prev, c)
        counts[name] = c
        serve.delete(name)
        with contextlib.suppress(RuntimeError, ValueError):  # no actor left to free
            ray.kill(policy_actor(name), no_restart=True)


def add_counts(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two apps' (or waves') counters summed; ``steps_by_gamma`` may differ in length."""
    sa, sb = list(a["steps_by_gamma"]), list(b["steps_by_gamma"])
    n = max(len(sa), len(sb))
    steps = [x + y for x, y in zip(sa + [0] * (n - len(sa)), sb + [0] * (n - len(sb)), strict=True)]
    out: dict[str, Any] = {"steps_by_gamma": steps}
    for key in ("decisions_by_mode", "memory_events"):
        out[key] = {k: a[key].get(k, 0) + b[key].get(k, 0) for k in {*a[key], *b[key]}}
    return out


def _on_run(rnd: int, scenario: str, contender: str, s: dict[str, Any]) -> None:
    print(
        f"round {rnd} {scenario:<14} {contender:<16} {s['output_throughput']:7.1f} tok/s"
        f"  E2E {s['mean_e2el_ms']:8.0f} ms  failed {s['failed']}",
        file=sys.stderr,
        flush=True,
    )


def _trace(args: argparse.Namespace) -> Path | None:
    """The trace scenario's CSV: ``--trace``, else ``$NIGHTJAR_TRACE``; without either the
    scenario is left out (and said so); a named file that is not there is an error."""
    if args.trace is None and not os.environ.get(TRACE_ENV):
        if "trace" in args.scenarios.split(","):
            print(f"bench-serve: no --trace or ${TRACE_ENV}: no trace scenario", file=sys.stderr)
        return None
    try:
        return resolve_trace(args.trace, os.environ)
    except ValueError as e:
        raise SystemExit(f"bench-serve: {e}") from None


def _measure(
    args: argparse.Namespace, waves: list[list[str]], trace: Path | None
) -> tuple[BenchResult, dict[str, Any]]:
    """Deploy, run and retire each wave in turn; returns the runs and the run's meta."""
    from nightjar_ray.loadgen.bench import endpoint_runner, run_rounds

    table = scenarios(trace)
    chosen = [table[s] for s in args.scenarios.split(",") if s in table]
    url = _start(args.http_port, max(len(w) for w in waves))
    capacity, result = args.capacity_rps, BenchResult()
    counts: dict[str, Any] = {}
    started = time.time()
    for i, names in enumerate(waves):
        print(f"wave {i}: {','.join(names)}", file=sys.stderr, flush=True)
        _deploy(args.pair, names, args.enforce_eager)
        if capacity is None:
            capacity = _calibrate(url, min(args.duration_s, 60.0))
            print(f"capacity: {capacity:.3f} requests/s", file=sys.stderr, flush=True)
        run_rounds(
            endpoint_runner(url, MODEL_ID), names, chosen, args.rounds, capacity,
            args.duration_s, 1000, _on_run, result, i,
        )  # fmt: skip
        _retire(names, counts)
    meta = {"capacity_rps": capacity, "rounds": args.rounds, "duration_s": args.duration_s,
            "pair": args.pair, "wall_s": time.time() - started, "cpus": os.cpu_count(),
            "waves": waves, "counters": counts,
            "command": "nightjar-ray bench-serve " + " ".join(sys.argv[2:])}  # fmt: skip
    return result, meta


def _load(paths: list[Path]) -> tuple[BenchResult, dict[str, Any]]:
    """Saved runs merged as successive waves; they must share pair, capacity and
    duration (their rounds would not be the same requests otherwise)."""
    result, metas = BenchResult(), []
    for path in paths:
        data = json.loads(path.read_text())
        metas.append(data["meta"])
        result.merge(BenchResult.from_json(data))
    for key in ("pair", "capacity_rps", "duration_s"):
        values = {round(m[key], 3) if isinstance(m[key], float) else m[key] for m in metas}
        if len(values) > 1:
            raise SystemExit(f"bench-serve --render: the files differ in {key}: {values}")
    runs = "; ".join(f"`{m['command']}`" for m in metas if "command" in m)
    meta = {**metas[0], "files": [str(p) for p in paths], "runs": runs}
    return result, meta


def run(args: argparse.Namespace) -> int:
    from nightjar_ray.loadgen.report import markdown, plot_ratios, write_section

    args.out.mkdir(parents=True, exist_ok=True)
    if args.render:
        result, meta = _load(args.render)
        command = "--render " + " ".join(str(p) for p in args.render)
    else:
        contenders = [c for c in args.contenders.split(",") if c]
        unknown = sorted(set(contenders) - set(CONTENDERS))
        if unknown or BASELINE not in contenders:
            raise SystemExit(f"bench-serve: unknown {unknown} or no {BASELINE!r} in --contenders")
        try:
            waves = plan_waves(contenders, args.max_resident)
        except ValueError as e:
            raise SystemExit(f"bench-serve: --max-resident: {e}") from e
        result, meta = _measure(args, waves, _trace(args))
        command = " ".join(sys.argv[2:])
        (args.out / "bench-serve.json").write_text(json.dumps({"meta": meta, **result.summaries}))
    plot_ratios(result, args.out / "ratios.png")
    header = (
        f"Pair `{meta['pair']}`, {meta['rounds']} interleaved rounds x {meta['duration_s']:.0f} s"
        f" per scenario, {result.num_waves()} wave(s), capacity {meta['capacity_rps']:.3f} req/s"
        f" ({meta['cpus']} CPUs). Command: `nightjar-ray bench-serve {command}`"
        + (f" (the saved runs: {meta['runs']})." if meta.get("runs") else ".")
    )
    section = markdown(result, header)
    if args.report:
        write_section(args.report, section)
    print(section)
    return 0
