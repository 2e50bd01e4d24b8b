"""``nightjar-ray bench-serve``: the side-by-side benchmark of policies behind the endpoint.

Starts a local Ray cluster, deploys one Serve app per contender (same generated pair, a
different ``nightjar.policy``), measures the machine's capacity (requests/s that ``off``
sustains under a saturating open loop) unless ``--capacity-rps`` is given, then runs
interleaved paired rounds of every scenario (``nightjar_ray.loadgen.bench``) and writes
``bench-serve.json``, a plot, and the report section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from nightjar_ray.loadgen.bench import BASELINE, CONTENDER_EXTRAS, CONTENDERS, scenarios

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
        "--trace", type=Path, default=Path("../shared/data/azure_llm_inference_trace_conv_2023.csv")
    )
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--out", type=Path, default=Path("bench-serve-results"))
    p.add_argument("--report", type=Path, help="Write the report section into this markdown.")
    p.set_defaults(func=run)


def contender_args(
    pair: str, policy: str, params: dict[str, Any], extras: dict[str, Any] | None = None
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
    nightjar = {**args["nightjar"], "policy": policy, "policy_params": params}
    args["nightjar"] = {**nightjar, **(extras or {})}
    return args


def _deploy(args: argparse.Namespace, contenders: list[str]) -> str:
    import ray
    from ray import serve

    from nightjar_ray.serve import build_app

    ray.init(num_cpus=max(32, 4 * len(contenders)), log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": args.http_port})
    for name in contenders:
        policy, params = CONTENDERS[name]
        print(f"deploying {name} ({policy} {params or ''})", file=sys.stderr, flush=True)
        app = build_app(contender_args(args.pair, policy, params, CONTENDER_EXTRAS.get(name)))
        serve.run(app, name=name, route_prefix=f"/{name}")
    return f"http://127.0.0.1:{args.http_port}"


def _calibrate(url: str, duration_s: float) -> float:
    """Requests/s ``off`` completes under an arrival rate far above what it can serve."""
    import asyncio
    import random

    from nightjar_ray.loadgen.arrivals import poisson
    from nightjar_ray.loadgen.bench import CHAT_OUTPUT, CHAT_PROMPT
    from nightjar_ray.loadgen.client import run_open_loop
    from nightjar_ray.loadgen.summary import summarize
    from nightjar_ray.loadgen.workload import synthetic_requests

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

    from nightjar_ray.serve.faults import policy_actor

    try:
        status = ray.get(policy_actor(app).status.remote(), timeout=10)
    except (RayError, RuntimeError):
        return None
    steps: list[int] = []
    modes: dict[str, int] = {}
    events: dict[str, int] = {}
    for replica in status["replicas"].values():
        report = replica.get("report") or {}
        for g, n in enumerate(report.get("steps_by_gamma", ())):
            steps += [0] * (g + 1 - len(steps))
            steps[g] += int(n)
        for mode, n in report.get("decisions_by_mode", {}).items():
            modes[mode] = modes.get(mode, 0) + int(n)
        for kind, (n, _s) in report.get("memory_events", {}).items():
            events[kind] = events.get(kind, 0) + int(n)
    return {"steps_by_gamma": steps, "decisions_by_mode": modes, "memory_events": events}


def _counts(contenders: list[str]) -> dict[str, dict[str, Any] | None]:
    counts = {name: _app_counts(name) for name in contenders}
    for name, c in counts.items():
        print(f"counters {name}: {c}", file=sys.stderr, flush=True)
    return counts


def run(args: argparse.Namespace) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    from nightjar_ray.loadgen.bench import endpoint_runner, run_rounds
    from nightjar_ray.loadgen.report import markdown, plot_ratios, write_section

    contenders = [c for c in args.contenders.split(",") if c]
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown or BASELINE not in contenders:
        raise SystemExit(f"bench-serve: unknown {unknown} or no {BASELINE!r} in --contenders")
    table = scenarios(args.trace if args.trace.exists() else None)
    chosen = [table[s] for s in args.scenarios.split(",") if s in table]
    url = _deploy(args, contenders)
    capacity = args.capacity_rps or _calibrate(url, min(args.duration_s, 60.0))
    print(f"capacity: {capacity:.3f} requests/s", file=sys.stderr, flush=True)

    def on_run(rnd: int, scenario: str, contender: str, s: dict[str, Any]) -> None:
        print(
            f"round {rnd} {scenario:<14} {contender:<12} {s['output_throughput']:7.1f} tok/s"
            f"  E2E {s['mean_e2el_ms']:8.0f} ms  failed {s['failed']}",
            file=sys.stderr,
            flush=True,
        )

    started = time.time()
    result = run_rounds(
        endpoint_runner(url, MODEL_ID), contenders, chosen, args.rounds, capacity,
        args.duration_s, 1000, on_run,
    )  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"capacity_rps": capacity, "rounds": args.rounds, "duration_s": args.duration_s,
            "pair": args.pair, "wall_s": time.time() - started, "cpus": os.cpu_count(),
            "counters": _counts(contenders)}  # fmt: skip
    (args.out / "bench-serve.json").write_text(json.dumps({"meta": meta, **result.summaries}))
    plot_ratios(result, args.out / "ratios.png")
    header = (
        f"Pair `{args.pair}`, {args.rounds} interleaved rounds x {args.duration_s:.0f} s per "
        f"scenario, capacity {capacity:.3f} req/s ({os.cpu_count()} CPUs). Command: "
        f"`nightjar-ray bench-serve {' '.join(sys.argv[2:])}`."
    )
    section = markdown(result, header)
    if args.report:
        write_section(args.report, section)
    print(section)
    return 0
