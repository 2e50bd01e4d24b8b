"""The app on a two-node Ray cluster on one machine (``ray.cluster_utils.Cluster``).

The head keeps the machine's address and the worker node takes ``127.0.0.2``, as a second
host would have its own; each node exports metrics on its own port. Both nodes advertise
one ``nightjar_replica_slot`` and a replica's placement-group bundle asks for one, so the
deployment's two replicas run on different nodes; the OpenAI ingress is pinned to the head
(a worker has only the CPUs its replica takes), as ``nightjar-ray chaos`` places them.
Debian's Prometheus scrapes both ports.

One cluster and one app for the module; the first test to ask for ``settled`` drives
traffic until both replicas observed steps and the pool holds the sum of their pushes.
Once the replicas are placed, a spare node (``127.0.0.3``, one slot) joins. The node
faults come last in the file (pytest keeps its order) because they remove nodes: the
worker node under load (its replica comes back on the spare), then the spare, with the
policy actor killed under load while it is down. Every request there has a client timeout
(:data:`CLIENT_TIMEOUT_S`): a hung request fails the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.cli import faults
from nightjar_ray.cli.chaos_nodes import app_with_ingress_on_head, pin_one_replica_per_node
from nightjar_ray.cli.local_cluster import REPLICA_SLOT, LocalCluster, NodeSpec
from nightjar_ray.metrics.definitions import METRICS_BY_NAME
from nightjar_ray.ops.render import PrometheusClient
from nightjar_ray.serve.context import NAMESPACE
from tests.ops.prometheus import prometheus_server
from tests.support import free_port, wait_until

from .conftest import MODEL_ID, app_args, expected_pool_count, post

pytestmark = pytest.mark.engine

APP = "njmulti"
SLOT = REPLICA_SLOT
"""One per node: a replica's bundle takes a node's only slot."""
WORKER_IP = "127.0.0.2"
PROMPTS = ["def parse(self, args):", "import json\nclass Config:", "return value if"]
STEPS = METRICS_BY_NAME["nightjar_steps"].exported_name


@dataclass(frozen=True)
class Cluster:
    url: str
    head_node_id: str
    worker_node_id: str
    spare_node_id: str
    """A third node with a free slot, added once the replicas are placed."""
    targets: dict[str, str]
    """Node ID -> the ``host:port`` Prometheus scrapes for that node's metrics."""
    node_ips: dict[str, str]
    prometheus: PrometheusClient
    snapshot_dir: Path
    nodes: LocalCluster

    def completion(self, prompt: str, max_tokens: int) -> int:
        body = {"model": MODEL_ID, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        status, _ = post(f"{self.url}/v1/completions", body)
        return status


def _status() -> dict[str, Any]:
    import ray

    status: dict[str, Any] = ray.get(faults.policy_actor(APP).status.remote(), timeout=30)
    return status


@pytest.fixture(scope="module")
def cluster(nightjar_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    import ray
    from ray import serve

    nodes = LocalCluster(NodeSpec(4, {SLOT: 1}, free_port()))
    http_port, snapshot_dir = free_port(), tmp_path_factory.mktemp("pool")
    try:
        worker_id = nodes.add_node(NodeSpec(2, {SLOT: 1}, free_port()))
        ray.init(address=nodes.address, include_dashboard=False)
        live = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
        assert set(live) == {nodes.head_node_id, worker_id}
        assert live[worker_id]["NodeManagerAddress"] == WORKER_IP
        targets = {
            i: f"{n['NodeManagerAddress']}:{n['MetricsExportPort']}" for i, n in live.items()
        }
        serve.start(proxy_location="HeadOnly", http_options={"port": http_port})
        args = app_args(snapshot_dir, {"num_replicas": 2})
        pin_one_replica_per_node(args)
        workdir = tmp_path_factory.mktemp("prometheus")
        with prometheus_server(workdir, list(targets.values())) as prom_url:
            serve.run(app_with_ingress_on_head(args), name=APP, route_prefix="/")
            # the replicas are placed (head, worker): the spare's slot stays free for a
            # replica that loses its node
            spare_id = nodes.add_node(NodeSpec(2, {SLOT: 1}))
            yield Cluster(
                url=f"http://127.0.0.1:{http_port}",
                head_node_id=nodes.head_node_id,
                worker_node_id=worker_id,
                spare_node_id=spare_id,
                targets=targets,
                node_ips={i: n["NodeManagerAddress"] for i, n in live.items()},
                prometheus=PrometheusClient(prom_url),
                snapshot_dir=snapshot_dir,
                nodes=nodes,
            )
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
        nodes.shutdown()


@pytest.fixture(scope="module")
def settled(cluster: Cluster) -> dict[str, Any]:
    """The policy actor's status once both replicas observed steps, pushed all of them and
    decide from the pooled table (bursts of requests until then)."""
    replicas = set(faults.replica_nodes(APP))
    assert len(replicas) == 2

    def burst() -> None:
        with ThreadPoolExecutor(6) as pool:
            codes = list(pool.map(lambda i: cluster.completion(PROMPTS[i % 3], 24), range(18)))
        assert set(codes) == {200}, codes

    def pooled() -> dict[str, Any] | None:
        status = _status()
        reps = [status["replicas"].get(r) for r in replicas]
        reports = [r["report"] for r in reps if r and r["report"]]
        if len(reports) < 2 or not all(report["num_observed_steps"] for report in reports):
            burst()
            return None
        fingerprint = status["fingerprint"]
        done = all(
            r["pushed_count"] == pytest.approx(expected_pool_count(fingerprint, r["report"]))
            and r["report"]["policy_count"] == pytest.approx(status["pool_count"])
            for r in reps
            if r
        )
        return status if done else None

    # the poll interval leaves a sync (0.5 s) between a burst and the next reading
    return wait_until(pooled, 300, 2.0, "both replicas to observe steps and the pool to settle")


def test_the_replicas_run_on_different_nodes(cluster: Cluster) -> None:
    """Each replica's bundle holds a node's only slot, so the two share no node."""
    assert all(pg["bundles"][0][SLOT] == 1 for pg in faults.replica_groups(APP).values())
    nodes = faults.replica_nodes(APP)
    assert len(nodes) == 2 and set(nodes.values()) == {cluster.head_node_id, cluster.worker_node_id}


def test_the_policy_actor_runs_on_the_head_whichever_node_creates_it(cluster: Cluster) -> None:
    """The app's actor is on the head; so is one a replica on the worker node would create
    (a task there creates one under another name)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    assert faults.actor_node(faults.policy_actor(APP)) == cluster.head_node_id

    def create_and_locate(snapshot_dir: str) -> tuple[str, str]:
        from nightjar_ray.serve.policy_actor import get_or_create_policy_actor

        def node_of(_actor: Any) -> str:
            node_id: str = ray.get_runtime_context().get_node_id()
            return node_id

        fingerprint = {"policy": "nightjar"}
        actor = get_or_create_policy_actor(
            "nightjar-policy.test.worker", NAMESPACE, fingerprint, snapshot_dir, on_head=True
        )
        there: str = ray.get(actor.__ray_call__.remote(node_of))
        ray.kill(actor, no_restart=True)
        return node_of(None), there

    on_worker = NodeAffinitySchedulingStrategy(cluster.worker_node_id, soft=False)
    task = ray.remote(num_cpus=0, scheduling_strategy=on_worker)(create_and_locate)
    here, there = ray.get(task.remote(str(cluster.snapshot_dir)), timeout=120)
    assert (here, there) == (cluster.worker_node_id, cluster.head_node_id)


def test_both_replicas_pool_through_one_actor(settled: dict[str, Any]) -> None:
    replicas = faults.replica_nodes(APP)
    reps = [settled["replicas"][r] for r in replicas]
    assert all(r["pushed_count"] > 0 and r["report"]["num_observed_steps"] > 0 for r in reps)
    assert settled["pool_count"] == pytest.approx(sum(r["pushed_count"] for r in reps))
    assert set(settled["replicas"]) == set(replicas)


def test_each_engine_core_joins_its_replicas_node(settled: dict[str, Any]) -> None:
    """The engine-core process of the replica on the worker node reached this cluster's
    actor (its report is there) through the worker node's raylet, not the head's."""
    joined = {r: settled["replicas"][r]["report"]["node_id"] for r in faults.replica_nodes(APP)}
    assert joined == faults.replica_nodes(APP)


def test_prometheus_scrapes_each_replicas_series_from_its_own_node(
    cluster: Cluster, settled: dict[str, Any]
) -> None:
    replicas = faults.replica_nodes(APP)

    def both() -> list[dict[str, Any]] | None:
        series = cluster.prometheus.query(f"sum by (replica, instance, NodeAddress) ({STEPS})")
        return series if {s["metric"].get("replica") for s in series} >= set(replicas) else None

    series = wait_until(both, 60, 1.0, f"{STEPS} of both replicas in Prometheus")
    seen = {
        (s["metric"]["replica"], s["metric"]["instance"], s["metric"]["NodeAddress"])
        for s in series
    }
    expected = {(r, cluster.targets[n], cluster.node_ips[n]) for r, n in replicas.items()}
    assert seen == expected
    assert len({address for _, _, address in seen}) == 2


# Node faults: they remove nodes, so they run last (pytest keeps the file's order): the
# worker node first (its replica moves to the spare), then the spare (the actor is killed
# while it is down).

CLIENT_TIMEOUT_S = 60.0
"""A request with no byte for this long is hung, which fails the test."""
FAULT_PROMPTS = [tuple(range(20 + i, 40 + i)) for i in range(3)]


def _in_flight_during(run: Any, start_s: float, end_s: float) -> set[int]:
    """Requests in flight at some moment of [start_s, end_s]: sent by ``end_s`` and not
    finished before ``start_s`` (a request the fault fails at once finishes inside it)."""
    return {
        r.req_id
        for r in run.records
        if r.sent_s <= end_s and (r.finish_s is None or r.finish_s >= start_s)
    }


def test_only_a_live_worker_node_can_be_removed(cluster: Cluster) -> None:
    with pytest.raises(ValueError, match=r"node_id: .* is not a live worker node"):
        cluster.nodes.remove_node(cluster.head_node_id)
    assert cluster.nodes.worker_node_ids == [cluster.worker_node_id, cluster.spare_node_id]


def test_losing_a_worker_node_under_load_brings_its_replica_back_on_the_spare(
    cluster: Cluster, settled: dict[str, Any]
) -> None:
    """Remove the worker node under open-loop load: its replica comes back on the spare
    node, only requests in flight at the loss fail, none hangs, every successful greedy
    output equals its reference, and requests after the recovery all succeed."""
    from nightjar_ray.loadgen.chaos import chaos_requests, reference_texts, run_chaos
    from nightjar_ray.loadgen.client import run_open_loop

    before = faults.replica_nodes(APP)
    (lost,) = [r for r, n in before.items() if n == cluster.worker_node_id]
    references = reference_texts(cluster.url, MODEL_ID, FAULT_PROMPTS, 16)
    requests = chaos_requests(FAULT_PROMPTS, 2.0, 16.0, 16, seed=0)

    def recovered() -> bool:
        return faults.replicas_moved(APP, lost, cluster.worker_node_id, 2)

    report, run = run_chaos(
        "node-loss", cluster.url, MODEL_ID, requests, references,
        lambda: cluster.nodes.remove_node(cluster.worker_node_id), recovered, 4.0, 300.0,
        client_timeout_s=CLIENT_TIMEOUT_S,
    )  # fmt: skip
    print(f"node loss -> 2 healthy replicas: {report.recovery_s} s; {report}")
    assert report.recovery_s is not None, report
    assert report.num_hung == 0 and report.num_mismatched == 0, report
    assert set(faults.replica_nodes(APP).values()) == {cluster.head_node_id, cluster.spare_node_id}
    failed = {r.req_id for r in run.records if not r.ok}
    in_flight = _in_flight_during(run, report.fault_at_s, report.fault_at_s + 1.0)
    timings = [(r.req_id, r.sent_s, r.finish_s, r.error) for r in run.records if not r.ok]
    assert failed <= in_flight, (timings, report)
    assert report.num_compared > len(failed), report
    (moved,) = set(faults.replica_nodes(APP)) - set(before)
    after = asyncio.run(
        run_open_loop(
            cluster.url, MODEL_ID, chaos_requests(FAULT_PROMPTS, 4.0, 4.0, 16, seed=1),
            timeout_s=CLIENT_TIMEOUT_S,
        )
    )  # fmt: skip
    texts = {(r.status, r.text) for r in after.records}
    assert texts <= {("ok", text) for text in references.values()}, texts

    def moved_replica_served() -> bool:
        report = _status()["replicas"].get(moved, {}).get("report")
        return bool(report and report["num_observed_steps"])

    wait_until(moved_replica_served, 60, 0.5, f"the moved replica {moved} to serve and sync")


def test_killing_the_policy_actor_while_a_node_is_down_fails_no_request(
    cluster: Cluster, settled: dict[str, Any]
) -> None:
    """Remove the spare (its replica has no free slot to go to), then kill the policy
    actor under load: no request fails or hangs, the actor restarts on the head, restores
    its snapshot, and the surviving replica syncs with it again."""
    from nightjar_ray.loadgen.chaos import chaos_requests, reference_texts, run_chaos

    (lost,) = [r for r, n in faults.replica_nodes(APP).items() if n == cluster.spare_node_id]
    cluster.nodes.remove_node(cluster.spare_node_id)

    def one_left() -> bool:
        return not any(name.endswith(f"#{lost}") for name in faults.llm_replicas(APP))

    wait_until(one_left, 60, 0.5, f"Serve to drop replica {lost} of the removed node")
    references = reference_texts(cluster.url, MODEL_ID, FAULT_PROMPTS, 16)
    killed: dict[str, float] = {}

    def fault() -> None:
        killed["at"] = faults.kill_policy_actor(APP)

    def recovered() -> bool:
        return "at" in killed and faults.policy_actor_recovered(APP, killed["at"], 1)

    report, _ = run_chaos(
        "actor-kill-node-down", cluster.url, MODEL_ID,
        chaos_requests(FAULT_PROMPTS, 2.0, 12.0, 16, seed=2), references, fault, recovered,
        3.0, 120.0, client_timeout_s=CLIENT_TIMEOUT_S,
    )  # fmt: skip
    print(f"actor kill (a node down) -> restored and synced: {report.recovery_s} s; {report}")
    assert report.recovery_s is not None, report
    assert report.num_failed == 0 and report.num_hung == 0, report
    assert report.num_compared > 0 and report.num_mismatched == 0, report
    assert faults.actor_node(faults.policy_actor(APP)) == cluster.head_node_id
    status = _status()
    (survivor,) = faults.replica_nodes(APP)
    assert status["restored"] and status["replicas"][survivor]["last_exchange_s"] > killed["at"]
