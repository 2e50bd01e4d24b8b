"""Faults to inject under load, and checks that the app recovered (for ``loadgen.chaos``).

Run in a driver connected to the app's Ray cluster. Used by ``nightjar-ray chaos`` (the
faults) and ``nightjar-ray bench-serve`` (the policy actor's status); nothing under
``serve/`` needs them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from nightjar_ray.serve.context import NAMESPACE, policy_actor_prefix

if TYPE_CHECKING:
    from nightjar_ray.cli.local_cluster import LocalCluster

REPLICA_PREFIX = "SERVE_REPLICA::"
LLM_DEPLOYMENT = "NightjarLLMServer"


def deployment_name(model: str) -> str:
    """The Serve deployment of ``model`` (Ray Serve LLM names it after the model ID)."""
    return f"{LLM_DEPLOYMENT}:" + model.replace("/", "--").replace(".", "_")


def policy_actor(app: str, model: str | None = None) -> Any:
    """The policy actor handle of the app (of its model ``model`` in an app of several;
    one per model and fingerprint; must be unique)."""
    import ray

    prefix = policy_actor_prefix(app, model)
    names = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == NAMESPACE and a["name"].startswith(prefix)
    ]
    if len(names) != 1:
        raise RuntimeError(f"expected one policy actor named {prefix}*, found {names}")
    return ray.get_actor(names[0], namespace=NAMESPACE)


def kill_policy_actor(app: str, model: str | None = None) -> float:
    """Kill the policy actor (Ray restarts it); returns the time of the kill."""
    import ray

    ray.kill(policy_actor(app, model), no_restart=False)
    return time.time()


def policy_actor_recovered(
    app: str, killed_at: float, num_replicas: int, model: str | None = None
) -> bool:
    """The restarted actor restored its snapshot and ``num_replicas`` replicas exchanged
    with it since ``killed_at``."""
    import ray
    from ray.exceptions import RayError

    try:
        status = ray.get(policy_actor(app, model).status.remote(), timeout=10)
    except (RayError, RuntimeError):
        return False
    # NOTE: the policy pool lists every replica that ever pushed (a dead one stays listed, its
    # observations stay pooled), so count the replicas that exchanged since the kill.
    synced = sum(r["last_exchange_s"] > killed_at for r in status["replicas"].values())
    return bool(status["restored"] and synced >= num_replicas)


def llm_replicas(app: str, model: str | None = None) -> list[str]:
    """Names of the app's running Nightjar replica actors (of ``model`` only, if given)."""
    import ray

    deployment = LLM_DEPLOYMENT if model is None else f"{deployment_name(model)}#"
    prefix = f"{REPLICA_PREFIX}{app}#{deployment}"
    return sorted(
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(prefix)
    )


def kill_one_replica(app: str, model: str | None = None) -> str:
    """Kill one Nightjar replica (of ``model``, if given) for good (Serve must start a new
    one); returns its name."""
    import ray

    names = llm_replicas(app, model)
    if not names:
        raise RuntimeError(f"no Nightjar replica of app {app!r} to kill")
    ray.kill(ray.get_actor(names[0], namespace="serve"), no_restart=True)
    return names[0]


def replicas_replaced(app: str, killed: str, target: int, model: str | None = None) -> bool:
    """Serve runs ``target`` healthy Nightjar replicas (of ``model``, if given) again, none
    of them ``killed``."""
    from ray import serve

    names = llm_replicas(app, model)
    if killed in names or len(names) < target:
        return False
    status = serve.status().applications.get(app)
    if status is None:
        return False
    for name, deployment in status.deployments.items():
        ours = name.startswith(LLM_DEPLOYMENT) if model is None else name == deployment_name(model)
        if ours:
            running = {str(k).rsplit(".", 1)[-1]: v for k, v in deployment.replica_states.items()}
            return running.get("RUNNING", 0) >= target
    return False


def memory_event_counts(app: str) -> dict[str, int] | None:
    """Elastic-memory events (``offload``, ``reload``, ``expand``, ``contract``) summed over
    the replicas' latest reports to the policy actor; ``None`` when it cannot be read."""
    import ray
    from ray.exceptions import RayError

    try:
        status = ray.get(policy_actor(app).status.remote(), timeout=10)
    except (RayError, RuntimeError):
        return None
    counts: dict[str, int] = {}
    for replica in status["replicas"].values():
        for kind, (count, _seconds) in (
            (replica.get("report") or {}).get("memory_events", {}).items()
        ):
            counts[kind] = counts.get(kind, 0) + int(count)
    return counts


RANK_ACTOR_PREFIX = "vllm_Worker_"
"""vLLM's Ray executor names each rank's actor ``vllm_Worker_<engine>_TP<rank>``."""


def rank_actors() -> list[tuple[str, str]]:
    """(name, namespace) of every live vLLM rank actor on the cluster, sorted."""
    import ray

    named = ray.util.list_named_actors(all_namespaces=True)
    return sorted(
        (a["name"], a["namespace"]) for a in named if a["name"].startswith(RANK_ACTOR_PREFIX)
    )


def kill_one_rank(rank: int = 1) -> str:
    """Kill the actor of tensor-parallel ``rank`` (of the first engine); returns its name."""
    import ray

    victims = [(n, ns) for n, ns in rank_actors() if n.endswith(f"_TP{rank}")]
    if not victims:
        raise RuntimeError(f"no vLLM rank actor for TP rank {rank} to kill")
    name, namespace = victims[0]
    ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
    return name


def ranks_replaced(app: str, killed: str, num_ranks: int) -> bool:
    """The app runs one healthy replica again whose ``num_ranks`` rank actors are all new."""
    names = [name for name, _ in rank_actors()]
    if killed in names or len(names) < num_ranks:
        return False
    return replicas_replaced(app, "", 1)


def actor_node(handle: Any) -> str:
    """The node an actor runs on, asked of the actor itself."""
    import ray

    def node_of(_actor: Any) -> str:  # nested: Ray ships it by value, not by this module
        import ray

        node_id: str = ray.get_runtime_context().get_node_id()
        return node_id

    node_id: str = ray.get(handle.__ray_call__.remote(node_of), timeout=60)
    return node_id


def replica_groups(app: str) -> dict[str, dict[str, Any]]:
    """Replica ID -> the placement group of a placed Nightjar replica (Serve names the
    group after the replica actor; a group whose node was lost is not ``CREATED``)."""
    from ray.util import placement_group_table

    prefix = f"{REPLICA_PREFIX}{app}#{LLM_DEPLOYMENT}"
    return {
        pg["name"].rsplit("#", 1)[-1]: pg
        for pg in placement_group_table().values()
        if pg["name"].startswith(prefix) and pg["state"] == "CREATED"
    }


def replica_nodes(app: str) -> dict[str, str]:
    """Replica ID -> the node its replica (bundle 0 of its placement group) runs on."""
    return {r: pg["bundles_to_node_id"][0] for r, pg in replica_groups(app).items()}


def remove_node_of_one_replica(app: str, cluster: LocalCluster) -> tuple[str, str]:
    """Remove the worker node of one Nightjar replica (not the head, which holds Serve's
    controller and the policy actor); returns (replica ID, node ID)."""
    on_workers = sorted(
        (node, replica)
        for replica, node in replica_nodes(app).items()
        if node in cluster.worker_node_ids
    )
    if not on_workers:
        raise RuntimeError(f"no replica of app {app!r} runs on a worker node")
    node, replica = on_workers[0]
    cluster.remove_node(node)
    return replica, node


def replicas_moved(app: str, lost_replica: str, lost_node: str, target: int) -> bool:
    """Serve runs ``target`` healthy Nightjar replicas again, none of them ``lost_replica``
    and none on ``lost_node``."""
    nodes = replica_nodes(app)
    if lost_replica in nodes or lost_node in nodes.values() or len(nodes) < target:
        return False
    if any(name.endswith(f"#{lost_replica}") for name in llm_replicas(app)):
        return False
    return replicas_replaced(app, "", target)
