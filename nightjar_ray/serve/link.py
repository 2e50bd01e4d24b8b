"""The engine-core side of Serve: pooling and metrics from a background thread.

The scheduler runs in vLLM's engine-core process, which the replica spawns and
which is not a Ray worker. At start-up the scheduler calls
:func:`start_serve_link`; its thread joins the replica's Ray cluster through
the replica's node (the GCS address and node IP of its :class:`ServeContext`)
and then, forever:

- every ``metrics_interval_s``: publishes the engine's telemetry as
  ``nightjar_*`` metrics through ``ray.util.metrics``;
- every ``pooling.sync_interval_s``: exchanges statistics with the policy actor
  (push the delta since the last pooled table, load the new pooled table plus
  what was observed meanwhile) and reports telemetry to it.

Why this path: the policy state and the step counters live in this process, so
a thread here reaches them without a relay; vLLM's utility calls reach the
``EngineCore``, not the scheduler, and its stat loggers carry fixed fields. The
step loop never waits on Ray: the thread holds the policy lock only while it
copies tables in memory. If the actor is unreachable the replica keeps its own
statistics (nothing is lost: the next delta still holds them) and retries.

NOTE: ``ray.init(address="auto")`` is not used: it takes the cluster the host's last
``ray start`` recorded (or any local one), which on a host running two clusters need not
be the replica's; and on a host running several nodes of one cluster, a driver attaches
to the head's raylet, so the engine's metrics would leave through the head's port.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from nightjar_ray.driver.step_driver import StepDriver
from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.policy.pooling import StatsExchange, stats_fingerprint
from nightjar_ray.serve.context import SERVE_CONTEXT_ENV, ServeContext
from nightjar_ray.serve.policy_pool import total_count

logger = logging.getLogger(__name__)

RPC_TIMEOUT_S = 10.0
CONNECT_RETRY_S = 2.0


class ServeLink:
    """Background pooling + metrics of one engine (see module docstring)."""

    def __init__(
        self,
        context: ServeContext,
        config: NightjarConfig,
        step_driver: StepDriver,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.context = context
        self._config = config
        self._step_driver = step_driver
        self._clock = clock
        self.fingerprint = stats_fingerprint(config.policy, config.policy_config())
        self._exchange = StatsExchange(step_driver.policy, step_driver.policy_lock)
        self._actor: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nightjar-serve-link", daemon=True)
        self.last_sync_s: float | None = None
        self.num_syncs = 0
        self.num_sync_errors = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def sync_age_s(self) -> float | None:
        return None if self.last_sync_s is None else self._clock() - self.last_sync_s

    def _run(self) -> None:
        if not self._connect():
            return
        from nightjar_ray.metrics.ray_export import RayMetricsExporter

        exporter = RayMetricsExporter(self.context.metric_tags())
        pooling = self._config.pooling
        next_sync = self._clock()
        tick = min(self._config.metrics_interval_s, pooling.sync_interval_s)
        while True:
            if pooling.enabled and self._clock() >= next_sync:
                self.sync_once()
                next_sync = self._clock() + pooling.sync_interval_s
            try:
                exporter.export(
                    self._step_driver.telemetry.read(),
                    self.sync_age_s(),
                    (self.num_syncs, self.num_sync_errors),
                )
            except Exception as e:  # a metrics hiccup must not end pooling
                logger.warning("nightjar: metrics export failed: %r", e)
            if self._stop.wait(tick):
                return

    def _connect(self) -> bool:
        import ray

        while not self._stop.is_set():
            try:
                ray.init(
                    address=self.context.gcs_address,
                    _node_ip_address=self.context.node_ip_address,
                    namespace=self.context.namespace,
                    ignore_reinit_error=True,
                    logging_level=logging.WARNING,
                    log_to_driver=False,
                )
                return True
            except Exception as e:  # any failure: keep deciding locally, retry
                logger.warning("nightjar: cannot join the Ray cluster yet: %r", e)
                self._stop.wait(CONNECT_RETRY_S)
        return False

    def sync_once(self) -> bool:
        """One exchange with the policy actor; ``False`` (and local decisions) on failure."""
        import ray

        def push(delta: dict[str, Any]) -> dict[str, Any]:
            if self._actor is None:
                self._actor = ray.get_actor(self.context.actor_name, self.context.namespace)
            ref = self._actor.exchange.remote(self.context.replica, self.fingerprint, delta)
            pooled: dict[str, Any] = ray.get(ref, timeout=RPC_TIMEOUT_S)
            return pooled

        try:
            loaded = self._exchange.exchange(push)
            self.last_sync_s = self._clock()
            self.num_syncs += 1
            self._report(total_count(loaded))
            return True
        except Exception as e:  # actor down, restarting or rejecting: decide locally
            self._actor = None
            self.num_sync_errors += 1
            log = logger.warning if self.num_sync_errors < 5 else logger.debug
            log("nightjar: policy sync with %s failed: %r", self.context.actor_name, e)
            return False

    def _report(self, policy_count: float) -> None:
        """Send telemetry, the policy's count and the Ray node this process joined."""
        import ray

        reading = self._step_driver.telemetry.read().to_json()
        reading["policy_count"] = policy_count
        reading["num_syncs"] = self.num_syncs
        reading["num_sync_errors"] = self.num_sync_errors
        reading["node_id"] = ray.get_runtime_context().get_node_id()
        self._actor.report.remote(self.context.replica, reading)


def start_serve_link(
    raw_context: str, config: NightjarConfig, step_driver: StepDriver
) -> ServeLink:
    """Start the link of a Serve replica's engine (``raw_context``: the env variable)."""
    link = ServeLink(ServeContext.from_env(raw_context), config, step_driver)
    link.start()
    return link


def start_from_engine(config: NightjarConfig, step_driver: StepDriver) -> ServeLink | None:
    """The engine's start hook (``SERVE_START_HOOK``): in the engine process of a Serve
    replica (``SERVE_CONTEXT_ENV`` set by the replica), start its link; else nothing."""
    raw = os.environ.get(SERVE_CONTEXT_ENV)
    return None if not raw else start_serve_link(raw, config, step_driver)
