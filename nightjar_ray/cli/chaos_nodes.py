"""The node scenarios of ``nightjar-ray chaos``, on a three-node cluster on this machine.

The head (Serve's controller and proxy, the policy actor, the ingress) and two worker
nodes each advertise one :data:`REPLICA_SLOT`; the two replicas ask for one slot each,
so they run on two nodes and the third node's slot is free for a replica that loses
its node. The OpenAI ingress is pinned to the head and a worker node has exactly the
CPUs one replica's placement group takes, so nothing but a replica lands on a worker.

- ``node-loss``: remove the worker node of one replica (its processes are stopped, as
  when a node is drained or its pod deleted). Recovered: Serve runs two healthy replicas
  again, none on the lost node.
- ``actor-kill-node-down``: the same, then, once Serve has dropped the lost replica,
  kill the policy actor. Recovered: the actor restarted on the head, restored its
  snapshot, and a live replica synced with it since the kill.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nightjar_ray.cli import faults
from nightjar_ray.cli.local_cluster import REPLICA_SLOT, LocalCluster, NodeSpec

NODE_SCENARIOS = ("node-loss", "actor-kill-node-down")
HEAD = NodeSpec(num_cpus=8, resources={REPLICA_SLOT: 1})
WORKER = NodeSpec(num_cpus=2, resources={REPLICA_SLOT: 1})
"""A replica's placement group takes 2 CPUs (its bundle's and the replica actor's)."""
NUM_WORKERS = 2
DROP_TIMEOUT_S = 60.0
"""How long ``actor-kill-node-down`` waits for Serve to drop the lost replica."""


def pin_one_replica_per_node(app_args: dict[str, Any]) -> None:
    """Each replica's bundle asks for one node's only slot."""
    app_args["placement_group_config"] = {"bundles": [{"CPU": 1, REPLICA_SLOT: 1}]}


def app_with_ingress_on_head(app_args: dict[str, Any]) -> Any:
    """``build_app``'s application with the OpenAI ingress on the head node.

    NOTE: Serve spreads the ingress over the nodes; on a worker it would take a CPU a
    replica needs there, and the node loss would take the ingress with the replica.
    """
    from nightjar_ray.serve.builder import build_app
    from nightjar_ray.serve.policy_actor import HEAD_NODE_RESOURCE

    ingress = {"ray_actor_options": {"resources": {HEAD_NODE_RESOURCE: 0.001}}}
    return build_app({"llm_configs": [app_args], "ingress_deployment_config": ingress})


def node_fault(
    scenario: str, app: str, cluster: LocalCluster, replicas: int
) -> tuple[Callable[[], None], Callable[[], bool], dict[str, Any]]:
    """(fault, recovered, facts): ``facts`` fills in as the fault runs (JSON values, node
    IDs: the head, the lost replica and its node, where the replicas run after recovery;
    for ``actor-kill-node-down`` the seconds from the node loss to the actor kill, and
    from the kill to the actor restored on the head and synced)."""
    facts: dict[str, Any] = {"head_node": cluster.head_node_id}
    at: dict[str, float] = {}

    def lose_node() -> None:
        facts["lost_replica"], facts["lost_node"] = faults.remove_node_of_one_replica(app, cluster)

    if scenario == "node-loss":

        def recovered() -> bool:
            if "lost_node" not in facts or not faults.replicas_moved(
                app, facts["lost_replica"], facts["lost_node"], replicas
            ):
                return False
            facts["replica_nodes_after"] = faults.replica_nodes(app)
            return True

        return lose_node, recovered, facts

    def fault() -> None:
        lost_at = time.monotonic()
        lose_node()
        lost = f"#{facts['lost_replica']}"
        deadline = time.monotonic() + DROP_TIMEOUT_S
        while any(name.endswith(lost) for name in faults.llm_replicas(app)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"Serve still lists replica {lost} after {DROP_TIMEOUT_S} s")
            time.sleep(0.2)
        facts["actor_killed_after_s"] = time.monotonic() - lost_at
        at["killed"] = faults.kill_policy_actor(app)

    def actor_recovered() -> bool:
        if "killed" not in at or not faults.policy_actor_recovered(app, at["killed"], 1):
            return False
        if faults.actor_node(faults.policy_actor(app)) != cluster.head_node_id:
            facts["actor_off_head"] = True
            return False
        facts.setdefault("actor_recovery_s", time.time() - at["killed"])
        facts["actor_node_after"] = cluster.head_node_id
        return True

    return fault, actor_recovered, facts
