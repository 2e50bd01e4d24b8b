"""The central policy actor: one named, detached Ray actor per model of an app.

It wraps :class:`~nightjar_ray.serve.policy_pool.PolicyPool`. Replicas create it on
start-up if it does not exist yet (``get_if_exists``), so deploying an app never
leaves an actor behind when the config is invalid. It restarts on failure
(``max_restarts=-1``) and restores its pool from its snapshot (a local file or an
object-store object under ``pooling.snapshot_dir``, ``policy_snapshot.py``). With
``pooling.actor_node: head`` (the default) it runs on the Ray head node.
"""

from __future__ import annotations

import time
from typing import Any

from nightjar_ray.serve.policy_pool import PolicyPool
from nightjar_ray.serve.policy_snapshot import snapshot_location


class PolicyActor:
    """Ray actor body (see module docstring); every method is a remote call."""

    def __init__(self, fingerprint: dict[str, Any], snapshot_location: str | None) -> None:
        self._pool = PolicyPool(fingerprint, snapshot_location, clock=time.time)

    def exchange(
        self, replica: str, fingerprint: dict[str, Any], delta: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge a replica's delta, return the pooled table (``PolicyPool.exchange``)."""
        return self._pool.exchange(replica, fingerprint, delta)

    def report(self, replica: str, telemetry: dict[str, Any]) -> None:
        self._pool.report(replica, telemetry)

    def status(self) -> dict[str, Any]:
        return self._pool.status()


HEAD_NODE_RESOURCE = "node:__internal_head__"
"""The resource Ray gives the head node only (Ray Train and Ray Data pin their state actors
to the head with it)."""


def get_or_create_policy_actor(
    name: str,
    namespace: str,
    fingerprint: dict[str, Any],
    snapshot_dir: str,
    on_head: bool = True,
    *,
    actor_cls: type[PolicyActor] = PolicyActor,
) -> Any:
    """Handle of the named actor, created (detached, restartable, 0 CPUs) if absent;
    ``snapshot_dir``: a local directory or an object-store URI (``pooling.snapshot_dir``);
    ``on_head``: it asks for a sliver of :data:`HEAD_NODE_RESOURCE`, so it runs on the head.

    ``actor_cls``: the actor body; a benchmark passes a subclass that times its own work.

    NOTE: created from inside a replica, an actor would land in the replica's placement
    group and die (and never come back) when that replica is replaced; the explicit
    ``placement_group=None`` strategy keeps it out of any placement group. The head is
    named by its resource, not its node ID: a head restarted with GCS fault tolerance gets
    a new ID but the same resource, so the restarted actor still finds it.
    """
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    remote_cls = ray.remote(actor_cls)
    return remote_cls.options(
        name=name,
        namespace=namespace,
        lifetime="detached",
        get_if_exists=True,
        max_restarts=-1,
        max_task_retries=0,
        num_cpus=0,
        resources={HEAD_NODE_RESOURCE: 0.001} if on_head else {},
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=None),  # type: ignore[arg-type]
    ).remote(fingerprint, snapshot_location(snapshot_dir, name))
