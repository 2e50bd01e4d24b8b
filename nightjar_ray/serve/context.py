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


def policy_actor_name(app: str, deployment: str, fingerprint: dict[str, Any]) -> str:
    """One actor per (app, deployment, statistics fingerprint).

    The fingerprint's hash is part of the name, so a redeploy that changes what a
    cell means (gamma_max, keys) gets a fresh pool instead of a rejected one, and a
    rolling update's old and new replicas never share a table.
    """
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:10]
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{app}.{deployment}")
    return f"nightjar-policy.{safe}.{digest}"
