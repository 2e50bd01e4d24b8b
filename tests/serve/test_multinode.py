"""The app on a two-node Ray cluster on one machine (``ray.cluster_utils.Cluster``).

The head keeps the machine's address and the worker node takes ``127.0.0.2``, as a second
host would have its own; each node exports metrics on its own port. Both nodes advertise
one ``nightjar_replica_slot`` and a replica's placement-group bundle asks for one, so the
deployment's two replicas run on different nodes. Debian's Prometheus scrapes both ports.

One cluster and one app for the module; the first test to ask for ``settled`` drives
traffic until both replicas observed steps and the pool holds the sum of their pushes.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.cli import faults
from nightjar_ray.metrics.definitions import METRICS_BY_NAME
from nightjar_ray.ops.render import PrometheusClient
from nightjar_ray.serve.context import NAMESPACE
from tests.ops.prometheus import prometheus_server
from tests.support import free_port, wait_until

from .conftest import MODEL_ID, app_args, expected_pool_count, post

pytestmark = pytest.mark.engine

APP = "njmulti"
SLOT = "nightjar_replica_slot"
"""One per node: a replica's bundle takes a node's only slot."""
WORKER_IP = "127.0.0.2"
PROMPTS = ["def parse(self, args):", "import json\nclass Config:", "return value if"]
STEPS = METRICS_BY_NAME["nightjar_steps"].exported_name


@dataclass(frozen=True)
class Cluster:
    url: str
    head_node_id: str
    worker_node_id: str
    targets: dict[str, str]
    """Node ID -> the ``host:port`` Prometheus scrapes for that node's metrics."""
    node_ips: dict[str, str]
    prometheus: PrometheusClient
    snapshot_dir: Path

    def completion(self, prompt: str, max_tokens: int) -> int:
        body = {"model": MODEL_ID, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        status, _ = post(f"{self.url}/v1/completions", body)
        return status


def _actor_node(handle: Any) -> str:
    """The node an actor runs on, asked of the actor itself."""
    import ray

    def node_of(_actor: Any) -> str:  # nested: Ray ships it by value, not by this module
        import ray

        node_id: str = ray.get_runtime_context().get_node_id()
        return node_id

    node_id: str = ray.get(handle.__ray_call__.remote(node_of), timeout=60)
    return node_id


def _replica_groups() -> dict[str, dict[str, Any]]:
    """Replica ID -> its placement group (Serve names it after the replica actor)."""
    from ray.util import placement_group_table

    prefix = f"{faults.REPLICA_PREFIX}{APP}#{faults.LLM_DEPLOYMENT}"
    return {
        pg["name"].rsplit("#", 1)[-1]: pg
        for pg in placement_group_table().values()
        if pg["name"].startswith(prefix) and pg["state"] == "CREATED"
    }


def _replica_nodes() -> dict[str, str]:
    """Replica ID -> the node its replica (bundle 0 of its placement group) runs on."""
    return {r: pg["bundles_to_node_id"][0] for r, pg in _replica_groups().items()}


def _status() -> dict[str, Any]:
    import ray

    status: dict[str, Any] = ray.get(faults.policy_actor(APP).status.remote(), timeout=30)
    return status


@pytest.fixture(scope="module")
def cluster(nightjar_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    import ray
    from ray import serve
    from ray._common.utils import reset_ray_address
    from ray.cluster_utils import Cluster as RayCluster

    from nightjar_ray.serve import build_app

    head_args = {"num_cpus": 4, "resources": {SLOT: 1}, "include_dashboard": False}
    ray_cluster = RayCluster(
        initialize_head=True, head_node_args={**head_args, "metrics_export_port": free_port()}
    )
    # NOTE: Cluster records itself as the host's default cluster for address="auto"; nothing
    # here uses that, and other Ray clusters' users on this host must not be sent here.
    reset_ray_address()
    http_port, snapshot_dir = free_port(), tmp_path_factory.mktemp("pool")
    try:
        worker = ray_cluster.add_node(
            node_ip_address=WORKER_IP,
            num_cpus=2,
            resources={SLOT: 1},
            metrics_export_port=free_port(),
        )
        ray.init(address=ray_cluster.address, include_dashboard=False)
        nodes = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
        head_id = ray_cluster.head_node.node_id
        assert set(nodes) == {head_id, worker.node_id}
        targets = {
            i: f"{n['NodeManagerAddress']}:{n['MetricsExportPort']}" for i, n in nodes.items()
        }
        serve.start(proxy_location="HeadOnly", http_options={"port": http_port})
        args = app_args(snapshot_dir, {"num_replicas": 2})
        args["placement_group_config"] = {"bundles": [{"CPU": 1, SLOT: 1}]}
        workdir = tmp_path_factory.mktemp("prometheus")
        with prometheus_server(workdir, list(targets.values())) as prom_url:
            serve.run(build_app(args), name=APP, route_prefix="/")
            yield Cluster(
                url=f"http://127.0.0.1:{http_port}",
                head_node_id=head_id,
                worker_node_id=worker.node_id,
                targets=targets,
                node_ips={i: n["NodeManagerAddress"] for i, n in nodes.items()},
                prometheus=PrometheusClient(prom_url),
                snapshot_dir=snapshot_dir,
            )
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
        ray_cluster.shutdown()


@pytest.fixture(scope="module")
def settled(cluster: Cluster) -> dict[str, Any]:
    """The policy actor's status once both replicas observed steps, pushed all of them and
    decide from the pooled table (bursts of requests until then)."""
    replicas = set(_replica_nodes())
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
    assert all(pg["bundles"][0][SLOT] == 1 for pg in _replica_groups().values())
    nodes = _replica_nodes()
    assert len(nodes) == 2 and set(nodes.values()) == {cluster.head_node_id, cluster.worker_node_id}


def test_the_policy_actor_runs_on_the_head_whichever_node_creates_it(cluster: Cluster) -> None:
    """The app's actor is on the head; so is one a replica on the worker node would create
    (a task there creates one under another name)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    assert _actor_node(faults.policy_actor(APP)) == cluster.head_node_id

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
    replicas = _replica_nodes()
    reps = [settled["replicas"][r] for r in replicas]
    assert all(r["pushed_count"] > 0 and r["report"]["num_observed_steps"] > 0 for r in reps)
    assert settled["pool_count"] == pytest.approx(sum(r["pushed_count"] for r in reps))
    assert set(settled["replicas"]) == set(replicas)


def test_each_engine_core_joins_its_replicas_node(settled: dict[str, Any]) -> None:
    """The engine-core process of the replica on the worker node reached this cluster's
    actor (its report is there) through the worker node's raylet, not the head's."""
    joined = {r: settled["replicas"][r]["report"]["node_id"] for r in _replica_nodes()}
    assert joined == _replica_nodes()


def test_prometheus_scrapes_each_replicas_series_from_its_own_node(
    cluster: Cluster, settled: dict[str, Any]
) -> None:
    replicas = _replica_nodes()

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
