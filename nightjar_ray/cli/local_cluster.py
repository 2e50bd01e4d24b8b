"""A Ray cluster of several nodes on one machine, for faults that lose a node.

Built on ``ray.cluster_utils.Cluster`` (Ray's own utility for this): the head keeps the
machine's address, each further node takes its own loopback address (``127.0.0.2``, ...)
as a second host would have its own IP. Every node may advertise a :data:`REPLICA_SLOT`;
a replica whose placement-group bundle asks for one slot runs where a slot is free, so
nodes with one slot each hold one replica each.

The cluster is this process's: it never becomes the host's default for
``address="auto"`` (other Ray users on the host must not be sent to it), and
:meth:`LocalCluster.shutdown` stops only its own nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

REPLICA_SLOT = "nightjar_replica_slot"
"""Custom resource of a node that may hold one replica (one per node here)."""
WORKER_IPS = tuple(f"127.0.0.{i}" for i in range(2, 10))
"""Loopback addresses the worker nodes take, in order."""


@dataclass(frozen=True)
class NodeSpec:
    """One node to start: its logical CPUs and custom resources (``None``: Ray picks the
    metrics export port)."""

    num_cpus: int
    resources: dict[str, float]
    metrics_export_port: int | None = None


class LocalCluster:
    """A head and worker nodes on this machine; nodes are named by their Ray node ID."""

    def __init__(self, head: NodeSpec) -> None:
        from ray._common.utils import reset_ray_address
        from ray.cluster_utils import Cluster

        args: dict[str, Any] = {
            "num_cpus": head.num_cpus,
            "resources": head.resources,
            "include_dashboard": False,
        }
        if head.metrics_export_port is not None:
            args["metrics_export_port"] = head.metrics_export_port
        self._cluster = Cluster(initialize_head=True, head_node_args=args)
        # NOTE: Cluster records itself as the host's default cluster for address="auto".
        reset_ray_address()
        self._workers: dict[str, Any] = {}

    @property
    def address(self) -> str:
        """The GCS address a driver passes to ``ray.init``."""
        address: str = self._cluster.address
        return address

    @property
    def head_node_id(self) -> str:
        head: Any = self._cluster.head_node
        node_id: str = head.node_id
        return node_id

    @property
    def worker_node_ids(self) -> list[str]:
        """Live worker nodes, in the order they were added."""
        return list(self._workers)

    def add_node(self, spec: NodeSpec) -> str:
        """Start a worker node on the next free loopback address; returns its node ID once
        it is registered."""
        used = {node.node_ip_address for node in self._cluster.worker_nodes}
        ip = next((ip for ip in WORKER_IPS if ip not in used), None)
        if ip is None:
            raise ValueError(f"at most {len(WORKER_IPS)} worker nodes, all in use")
        args: dict[str, Any] = {"num_cpus": spec.num_cpus, "resources": spec.resources}
        if spec.metrics_export_port is not None:
            args["metrics_export_port"] = spec.metrics_export_port
        node = self._cluster.add_node(node_ip_address=ip, **args)
        node_id: str = node.node_id
        self._workers[node_id] = node
        return node_id

    def remove_node(self, node_id: str) -> None:
        """Stop a worker node and every process of it (its raylet and the workers, hence
        the actors and replicas on it); the head cannot be removed."""
        node = self._workers.pop(node_id, None)
        if node is None:
            raise ValueError(f"node_id: {node_id!r} is not a live worker node of this cluster")
        self._cluster.remove_node(node)

    def shutdown(self) -> None:
        """Stop every node still running (workers first, then the head)."""
        self._workers.clear()
        self._cluster.shutdown()  # type: ignore[no-untyped-call]


@contextmanager
def local_cluster(head: NodeSpec, workers: list[NodeSpec]) -> Iterator[LocalCluster]:
    """A :class:`LocalCluster` with ``workers`` added, shut down on exit."""
    cluster = LocalCluster(head)
    try:
        for spec in workers:
            cluster.add_node(spec)
        yield cluster
    finally:
        cluster.shutdown()
