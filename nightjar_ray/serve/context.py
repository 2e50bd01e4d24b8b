"""Who a replica is, handed from the Serve replica to vLLM's engine-core process.

The replica actor knows its Serve identity; the scheduler runs in the
engine-core process the replica spawns, which is not a Ray worker. The replica
writes a :class:`ServeContext` into an environment variable before it starts
vLLM; the spawned process inherits it (``SERVE_CONTEXT_ENV``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from typing import Any

NAMESPACE = "nightjar"
"""Ray namespace of the policy actors."""

SERVE_CONTEXT_ENV = "NIGHTJAR_SERVE_CONTEXT"
"""Environment variable the replica sets and vLLM's engine-core process reads."""


@dataclass(frozen=True)
class ServeContext:
    """A replica's identity, the policy actor it pools with, and the Ray cluster and node
    it runs on (the engine-core process joins exactly these)."""

    app: str
    deployment: str
    replica: str
    model: str
    actor_name: str
    gcs_address: str
    """The replica's cluster (``host:port`` of its GCS)."""
    node_ip_address: str
    """The IP address of the replica's Ray node."""
    namespace: str = NAMESPACE

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, raw: str) -> ServeContext:
        data: dict[str, Any] = json.loads(raw)
        return cls(**data)

    def metric_tags(self) -> dict[str, str]:
        """Labels of every nightjar_* series of this replica."""
        return {"deployment": self.deployment, "replica": self.replica, "model": self.model}


def policy_actor_name(app: str, model: str, fingerprint: dict[str, Any]) -> str:
    """One actor per (app, model ID, statistics fingerprint): two models of one app never
    share a pool.

    The hash covers the model ID and the fingerprint, so a redeploy that changes what a
    cell means (the largest gamma, keys) gets a fresh pool instead of a rejected one, a
    rolling update's old and new replicas never share a table, and two model IDs that
    read the same once made name-safe (``a/b``, ``a_b``) still get two actors.
    """
    key = json.dumps({"model": model, "fingerprint": fingerprint}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return f"{policy_actor_prefix(app, model)}{digest}"


def policy_actor_prefix(app: str, model: str | None = None) -> str:
    """What the names of ``app``'s policy actors (of ``model`` only, if given) start with."""
    parts = [app] if model is None else [app, model]
    return "nightjar-policy." + "".join(f"{_name_safe(part)}." for part in parts)


def _name_safe(text: str) -> str:
    """``text`` with every character outside ``[A-Za-z0-9_-]`` as ``_`` (no dots: a dot
    ends each part of an actor's name)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)
