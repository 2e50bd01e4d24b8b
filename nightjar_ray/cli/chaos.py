"""``nightjar-ray chaos``: faults under load against a local deployment of the main job's app.

Scenarios: ``actor-kill`` (kill the policy actor; goal: zero failed requests),
``replica-kill`` (two replicas, kill one; goal: only requests in flight on it fail, Serve
replaces it) and ``memory`` (forced elastic-memory events under load: the draft offloaded
and reloaded every few steps and the KV cache compacted, on a small KV budget; goal:
zero failed requests; references come from a second app without the forced events, deleted
before the load starts). Prints and writes a JSON report: failed requests, recovery time
(for ``memory``: until offloads, reloads and contractions were all seen after the mark),
and whether every successful greedy output equals its prompt's reference.

``rank-kill`` serves the 32B preset's shape on the pair (tensor parallelism 2, ranks as
actors of vLLM's Ray executor on the CPU platform, ``engine/ray_cpu.py``) and kills one
rank's actor; goal: the replica fails fast and Serve replaces it, no request hangs.
``node-loss`` and ``actor-kill-node-down`` build a three-node cluster on this machine
(``cli/chaos_nodes.py``), two replicas one per node, and remove the node of one replica
(then, for the second, kill the policy actor while that node is down); goal: only
requests in flight on the lost replica fail, and it comes back on the spare node.
Every request runs under ``--client-timeout-s``: one that gets no byte for that long
counts as hung, and any hung request fails the run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightjar_ray.cli.args import add_header, headers_of, output_file
from nightjar_ray.cli.chaos_nodes import NODE_SCENARIOS
from nightjar_ray.engine.ray_cpu import RAY_CPU_RESOURCE

if TYPE_CHECKING:
    from nightjar_ray.cli.local_cluster import LocalCluster

APP = "chaos"
SCENARIOS = ("actor-kill", "replica-kill", "memory", "rank-kill", *NODE_SCENARIOS)
TWO_REPLICAS = ("replica-kill", *NODE_SCENARIOS)
NUM_RANKS = 2
"""Tensor-parallel ranks of the ``rank-kill`` deployment."""
MEMORY_CHAOS: dict[str, Any] = {
    "engine_kwargs": {"block_size": 32, "kv_cache_memory_bytes": 6_000_000},
    "testing": {
        "chaos_offload_steps": 8,
        "chaos_cycle_steps": 3,
        "chaos_region_blocks": 32,
    },
}
"""The ``memory`` scenario: ~72 blocks of 32 tokens, the top 32 compacted and given back
every 3 steps, the draft offloaded and reloaded every 8 steps."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "chaos",
        help="Faults under load: kill the policy actor, a replica, a rank, a node; memory events.",
    )
    p.add_argument("--scenario", choices=SCENARIOS, required=True, help="The fault to inject.")
    p.add_argument(
        "--pair",
        choices=("default", "tiny"),
        default="tiny",
        help="Generated model pair the deployment serves.",
    )
    p.add_argument("--rate", type=float, default=2.0, help="Requests/s during the run.")
    p.add_argument("--duration-s", type=float, default=30.0, help="Length of the load.")
    p.add_argument(
        "--fault-at-s", type=float, default=10.0, help="When the fault comes, from the start."
    )
    p.add_argument("--max-tokens", type=int, default=16, help="Output tokens per request.")
    p.add_argument(
        "--http-port", type=int, default=8000, help="Port of the local Serve HTTP proxy."
    )
    p.add_argument(
        "--client-timeout-s",
        type=float,
        default=120.0,
        help="A request with no byte for this long counts as hung (and fails the run).",
    )
    add_header(p)
    p.add_argument(
        "--out", type=output_file, default=Path("chaos-report.json"), help="JSON report file."
    )
    p.set_defaults(func=run)


def _deploy(
    args: argparse.Namespace,
    replicas: int,
    name: str = APP,
    memory_chaos: bool = False,
    cluster: LocalCluster | None = None,
) -> str:
    import ray
    from ray import serve

    from nightjar_ray.cli.chaos_nodes import app_with_ingress_on_head, pin_one_replica_per_node
    from nightjar_ray.cli.demo import demo_app_args
    from nightjar_ray.serve import build_app

    if cluster is not None and not ray.is_initialized():
        ray.init(address=cluster.address, log_to_driver=False)
        http = {"host": "127.0.0.1", "port": args.http_port}
        serve.start(proxy_location="HeadOnly", http_options=http)
    elif not ray.is_initialized():
        ranks: dict[str, float] = (
            {RAY_CPU_RESOURCE: NUM_RANKS} if args.scenario == "rank-kill" else {}
        )
        ray.init(address="local", num_cpus=16, resources=ranks, log_to_driver=False)
        serve.start(http_options={"host": "127.0.0.1", "port": args.http_port})
    app_args = demo_app_args(args.pair, replicas)
    app_args["runtime_env"] = {"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1"}}
    if args.scenario == "rank-kill":
        ranks_on_ray(app_args)
    if cluster is not None:
        pin_one_replica_per_node(app_args)
    if memory_chaos:
        app_args["engine_kwargs"].update(MEMORY_CHAOS["engine_kwargs"])
        app_args["nightjar"]["testing"] = MEMORY_CHAOS["testing"]
    route = "/" if name == APP else f"/{name}"
    print(f"deploying {name}: {replicas} replica(s) of the {args.pair} pair...", file=sys.stderr)
    app = build_app(app_args) if cluster is None else app_with_ingress_on_head(app_args)
    serve.run(app, name=name, route_prefix=route)
    return f"http://127.0.0.1:{args.http_port}{'' if route == '/' else route}"


def ranks_on_ray(app_args: dict[str, Any]) -> None:
    """The 32B TP=2 preset's engine keys, CPU values: one bundle and one core per rank."""
    app_args["engine_kwargs"].update(
        tensor_parallel_size=NUM_RANKS, distributed_executor_backend="ray"
    )
    app_args["engine_kwargs"]["speculative_config"]["draft_tensor_parallel_size"] = NUM_RANKS
    app_args["placement_group_config"] = {"bundles": [{"CPU": 1, RAY_CPU_RESOURCE: 1}] * NUM_RANKS}
    binding = "|".join(str(core) for core in range(NUM_RANKS))
    app_args["runtime_env"]["env_vars"]["VLLM_CPU_OMP_THREADS_BIND"] = binding


def _references(
    args: argparse.Namespace,
    prompts: list[tuple[int, ...]],
    cluster: LocalCluster | None,
    headers: dict[str, str],
) -> tuple[str, Any]:
    """Deploy the app and take each prompt's greedy reference; for ``memory`` from a
    separate app without the forced memory events (deleted afterwards), the same engine
    otherwise."""
    from ray import serve

    from nightjar_ray.cli.demo import MODEL_ID
    from nightjar_ray.loadgen.chaos import reference_texts

    replicas = 2 if args.scenario in TWO_REPLICAS else 1
    if args.scenario != "memory":
        url = _deploy(args, replicas, cluster=cluster)
        return url, reference_texts(url, MODEL_ID, prompts, args.max_tokens, headers)
    ref_url = _deploy(args, 1, name=f"{APP}-reference")
    references = reference_texts(ref_url, MODEL_ID, prompts, args.max_tokens, headers)
    serve.delete(f"{APP}-reference")
    return _deploy(args, 1, memory_chaos=True), references


def _fault(scenario: str, replicas: int) -> tuple[Any, Any]:
    from nightjar_ray.cli import faults

    state: dict[str, Any] = {}
    if scenario == "memory":

        def fault() -> None:  # the events run all along; count from here
            state["at"] = faults.memory_event_counts(APP) or {}

        def recovered() -> bool:
            now = faults.memory_event_counts(APP)
            if "at" not in state or now is None:
                return False
            kinds = ("offload", "reload", "contract")
            return all(now.get(k, 0) > state["at"].get(k, 0) for k in kinds)

    elif scenario == "actor-kill":

        def fault() -> None:
            state["at"] = faults.kill_policy_actor(APP)

        def recovered() -> bool:
            return "at" in state and faults.policy_actor_recovered(APP, state["at"], replicas)

    elif scenario == "rank-kill":

        def fault() -> None:
            state["name"] = faults.kill_one_rank()

        def recovered() -> bool:
            return "name" in state and faults.ranks_replaced(APP, state["name"], NUM_RANKS)

    else:

        def fault() -> None:
            state["name"] = faults.kill_one_replica(APP)

        def recovered() -> bool:
            return "name" in state and faults.replicas_replaced(APP, state["name"], replicas)

    return fault, recovered


def run(args: argparse.Namespace) -> int:
    headers_of(args, os.environ)  # a malformed --header fails before any cluster starts
    if args.scenario not in NODE_SCENARIOS:
        return _run(args, None)
    import ray
    from ray import serve

    from nightjar_ray.cli.chaos_nodes import HEAD, NUM_WORKERS, WORKER
    from nightjar_ray.cli.local_cluster import local_cluster

    print(f"starting a local cluster: a head and {NUM_WORKERS} worker nodes", file=sys.stderr)
    with local_cluster(HEAD, [WORKER] * NUM_WORKERS) as cluster:
        try:
            return _run(args, cluster)
        finally:
            serve.shutdown()  # type: ignore[no-untyped-call]
            ray.shutdown()


def _run(args: argparse.Namespace, cluster: LocalCluster | None) -> int:
    from nightjar_ray.cli.chaos_nodes import node_fault
    from nightjar_ray.cli.demo import MODEL_ID
    from nightjar_ray.loadgen.chaos import chaos_requests, run_chaos

    replicas = 2 if args.scenario in TWO_REPLICAS else 1
    prompts = [tuple(range(20 + i, 60 + i)) for i in range(4)]
    headers = headers_of(args, os.environ)
    url, references = _references(args, prompts, cluster, headers)
    requests = chaos_requests(prompts, args.rate, args.duration_s, args.max_tokens, seed=0)
    facts: dict[str, Any] = {}
    if cluster is not None:
        fault, recovered, facts = node_fault(args.scenario, APP, cluster, replicas)
    else:
        fault, recovered = _fault(args.scenario, replicas)
    started = time.time()
    report, run_result = run_chaos(
        args.scenario, url, MODEL_ID, requests, references, fault, recovered, args.fault_at_s,
        client_timeout_s=args.client_timeout_s, headers=headers,
    )  # fmt: skip
    # in flight on a lost replica: sent before the fault, or within 1 s (the router learns
    # of the loss) but not after a later fault (the actor kill of actor-kill-node-down)
    grace_s = min(1.0, facts.get("actor_killed_after_s", 1.0))
    failed = [r for r in run_result.records if not r.ok]
    late = [r.req_id for r in failed if r.sent_s > report.fault_at_s + grace_s]
    out = {
        **asdict(report),
        "failed_requests": [(r.req_id, round(r.sent_s, 3), r.status) for r in failed],
        "failed_after_fault": late,
        "wall_s": time.time() - started,
    }
    if facts:
        out["fault"] = facts
    if args.scenario == "memory":
        from nightjar_ray.cli import faults

        out["memory_events"] = faults.memory_event_counts(APP)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    ok = report.recovery_s is not None and report.num_mismatched == 0 and report.num_hung == 0
    if args.scenario in ("actor-kill", "memory"):
        ok = ok and report.num_failed == 0
    elif args.scenario in TWO_REPLICAS:  # only requests in flight on the lost replica fail
        ok = ok and not late
    # rank-kill: the only replica is replaced, so requests may fail meanwhile (none may hang)
    return 0 if ok else 1
