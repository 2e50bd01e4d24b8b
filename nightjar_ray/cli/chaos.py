"""``nightjar-ray chaos``: faults under load against a local deployment of the main job's app.

Scenarios: ``actor-kill`` (kill the policy actor; goal: zero failed requests) and
``replica-kill`` (two replicas, kill one; goal: only requests in flight on it fail, Serve
replaces it). Prints and writes a JSON report: failed requests, recovery time, and
whether every successful greedy output equals its prompt's reference.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

APP = "chaos"
SCENARIOS = ("actor-kill", "replica-kill")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "chaos", help="Faults under load: kill the policy actor or a replica."
    )
    p.add_argument("--scenario", choices=SCENARIOS, required=True)
    p.add_argument("--pair", choices=("default", "tiny"), default="tiny")
    p.add_argument("--rate", type=float, default=2.0, help="Requests/s during the run.")
    p.add_argument("--duration-s", type=float, default=30.0)
    p.add_argument("--fault-at-s", type=float, default=10.0)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--out", type=Path, default=Path("chaos-report.json"))
    p.set_defaults(func=run)


def _deploy(args: argparse.Namespace, replicas: int) -> str:
    import ray
    from ray import serve

    from nightjar_ray.cli.demo import demo_app_args
    from nightjar_ray.serve import build_app

    ray.init(num_cpus=16, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": args.http_port})
    app_args = demo_app_args(args.pair, replicas)
    app_args["runtime_env"] = {"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1"}}
    print(f"deploying {replicas} replica(s) of the {args.pair} pair...", file=sys.stderr)
    serve.run(build_app(app_args), name=APP, route_prefix="/")
    return f"http://127.0.0.1:{args.http_port}"


def _fault(scenario: str, replicas: int) -> tuple[Any, Any]:
    from nightjar_ray.serve import faults

    state: dict[str, Any] = {}
    if scenario == "actor-kill":

        def fault() -> None:
            state["at"] = faults.kill_policy_actor(APP)

        def recovered() -> bool:
            return "at" in state and faults.policy_actor_recovered(APP, state["at"], replicas)

    else:

        def fault() -> None:
            state["name"] = faults.kill_one_replica(APP)

        def recovered() -> bool:
            return "name" in state and faults.replicas_replaced(APP, state["name"], replicas)

    return fault, recovered


def run(args: argparse.Namespace) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    from nightjar_ray.cli.demo import MODEL_ID
    from nightjar_ray.loadgen.chaos import chaos_requests, reference_texts, run_chaos

    replicas = 2 if args.scenario == "replica-kill" else 1
    url = _deploy(args, replicas)
    prompts = [tuple(range(20 + i, 60 + i)) for i in range(4)]
    references = reference_texts(url, MODEL_ID, prompts, args.max_tokens)
    requests = chaos_requests(prompts, args.rate, args.duration_s, args.max_tokens, seed=0)
    fault, recovered = _fault(args.scenario, replicas)
    started = time.time()
    report, run_result = run_chaos(
        args.scenario, url, MODEL_ID, requests, references, fault, recovered, args.fault_at_s
    )
    late = [r.index for r in run_result.records if not r.ok and r.start_s > report.fault_at_s + 1.0]
    out = {**asdict(report), "failed_after_fault": late, "wall_s": time.time() - started}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    ok = report.recovery_s is not None and report.num_mismatched == 0
    ok = ok and (report.num_failed == 0 if args.scenario == "actor-kill" else not late)
    return 0 if ok else 1
