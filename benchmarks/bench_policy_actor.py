"""One policy actor under many replicas: where one actor per model stops keeping up.

    python benchmarks/bench_policy_actor.py [--replicas 10 100 1000] [--duration-s 30]
        [--sync-interval-s 2.0] [--fleets 2] [--out benchmarks/results/bench-policy-actor.json]

For each replica count, on a private local Ray instance (``ray.init(address="local")``):
one real policy actor (``get_or_create_policy_actor`` with a thin subclass that times
its own work; snapshots on disk as in production) and ``--fleets`` caller actors that
each simulate a share of the replicas. A synthetic replica is the engine's own objects
without vLLM: the default ``NightjarConfig``'s policy, a ``StepDriver`` (policy lock and
telemetry) and a ``ServeLink``; between syncs it runs ``--steps-per-sync`` policy steps
(choose + observe, batch size drifting by a random walk), and every sync interval its
link runs ``ServeLink.sync_once``, the production exchange: push the delta, load the
pooled table, report telemetry. Replicas start at random phases and re-arm their timer
after each sync, as the link does; each caller thread serves a slice of replicas, so
``--fleets * --threads`` syncs are in flight at most (by default one thread per replica
up to 1,000 replicas, in two processes).

Measured after ``--warmup-s``, for ``--duration-s``:
- actor: wall time of each ``exchange`` inside the actor (parse, merge, snapshot write
  when due, the pooled table's JSON), of each snapshot write, the snapshot's size, and the
  actor process's CPU per sync (both calls, Ray's own threads included) and per second;
- callers: p50/p99 of a whole sync as a replica sees it (``sync_once``), the achieved
  exchange rate against the offered one (replicas / sync interval), how late syncs
  started (a caller that falls behind shows here, not as actor latency) and the callers'
  CPU seconds per second.
A scale keeps up when the achieved rate is within ``KEEP_UP_RATE_FRACTION`` of the
offered one and p99 is below the sync interval.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nightjar_ray.driver.step_driver import StepDriver
from nightjar_ray.engine.config import NightjarConfig, PoolingConfig
from nightjar_ray.policy import StepResult
from nightjar_ray.policy.pooling import stats_fingerprint
from nightjar_ray.serve.context import NAMESPACE, ServeContext, policy_actor_name
from nightjar_ray.serve.link import ServeLink
from nightjar_ray.serve.policy_actor import PolicyActor, get_or_create_policy_actor
from nightjar_ray.serve.policy_pool import SNAPSHOT_INTERVAL_S, PolicyPool
from nightjar_ray.serve.policy_snapshot import snapshot_location

KEEP_UP_RATE_FRACTION = 0.9
LATE_FRACTION = 0.1
ACCEPTANCE = 0.7
"""Per-token draft acceptance of the synthetic steps (tokens per step follow from it)."""
STEP_BASE_S = 0.02
"""Synthetic step time at batch size 1, gamma 0."""
APP = "bench-policy-actor"


class TimedPolicyPool(PolicyPool):
    """The real pool; each snapshot write is timed (``(end wall s, seconds)``)."""

    def __init__(self, fingerprint: dict[str, Any], path: str | None, interval_s: float) -> None:
        super().__init__(fingerprint, path, clock=time.time, snapshot_interval_s=interval_s)
        self.snapshot_writes: list[tuple[float, float]] = []

    def _save(self) -> bool:
        t0 = time.perf_counter()
        saved = super()._save()
        self.snapshot_writes.append((time.time(), time.perf_counter() - t0))
        return saved


class TimedPolicyActor(PolicyActor):
    """The real actor; each ``exchange`` is timed with the process's CPU clock after it."""

    snapshot_interval_s = SNAPSHOT_INTERVAL_S

    def __init__(self, fingerprint: dict[str, Any], path: str | None) -> None:
        super().__init__(fingerprint, None)
        self._pool = TimedPolicyPool(fingerprint, path, self.snapshot_interval_s)
        self._exchanges: list[tuple[float, float, float]] = []
        self._num_reports = 0

    def exchange(
        self, replica: str, fingerprint: dict[str, Any], delta: dict[str, Any]
    ) -> dict[str, Any]:
        t0 = time.perf_counter()
        pooled = super().exchange(replica, fingerprint, delta)
        self._exchanges.append((time.time(), time.perf_counter() - t0, time.process_time()))
        return pooled

    def report(self, replica: str, telemetry: dict[str, Any]) -> None:
        super().report(replica, telemetry)
        self._num_reports += 1

    def timings(self) -> dict[str, Any]:
        assert isinstance(self._pool, TimedPolicyPool)
        return {
            "exchanges": self._exchanges,
            "snapshot_writes": self._pool.snapshot_writes,
            "num_reports": self._num_reports,
        }


class SyntheticReplica:
    """A replica's policy, step driver and Serve link, stepped without an engine."""

    def __init__(self, name: str, actor_name: str, seed: int, max_batch: int) -> None:
        config = NightjarConfig(seed=seed)
        self.driver = StepDriver(
            config.build_policy(), gamma_cap=config.num_speculative_tokens, clock=time.monotonic
        )
        import ray

        context = ServeContext(
            APP,
            "synthetic",
            name,
            "synthetic",
            actor_name,
            ray.get_runtime_context().gcs_address,
            ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
        )
        self.link = ServeLink(context, config, self.driver)
        self._rng = random.Random(seed)
        self._max_batch = max_batch
        self._num_reqs = self._rng.randint(1, max_batch)

    def run_steps(self, num_steps: int) -> None:
        """``num_steps`` engine steps: choose, a synthetic outcome, observe (under the lock)."""
        policy, telemetry, rng = self.driver.policy, self.driver.telemetry, self._rng
        for _ in range(num_steps):
            b = min(self._max_batch, max(1, self._num_reqs + rng.randint(-2, 2)))
            self._num_reqs = b
            with self.driver.policy_lock:
                gamma = policy.choose(b, 0)
                accepted = sum(
                    next((i for i in range(gamma) if rng.random() > ACCEPTANCE), gamma)
                    for _ in range(min(b, 8))
                ) * max(1, b // 8)
                duration_s = STEP_BASE_S * (1 + b / 64) * (1 + 0.15 * gamma) * rng.uniform(0.9, 1.1)
                policy.observe(StepResult(b, gamma, b + accepted, duration_s, b * gamma, accepted))
            telemetry.on_step(gamma, b, explored=False, consulted=True)
            telemetry.on_observed(b + accepted, duration_s)


class ReplicaFleet:
    """Ray actor body: a slice of the synthetic replicas, synced by a few threads."""

    def __init__(self, names: list[str], actor_name: str, seed: int, args: dict[str, Any]) -> None:
        self._args = args
        self._replicas = [
            SyntheticReplica(name, actor_name, seed + i, args["max_batch"])
            for i, name in enumerate(names)
        ]
        for replica in self._replicas:
            replica.run_steps(args["warm_steps"])
        self._rng = random.Random(seed)
        self._stop = threading.Event()

    def run(self, start_s: float, measure_from_s: float, end_s: float) -> dict[str, Any]:
        """Sync every replica every interval from ``start_s`` (wall clock) to ``end_s``;
        what was measured from ``measure_from_s`` on."""
        num_threads = max(1, min(self._args["threads"], len(self._replicas)))
        out: dict[str, list[float]] = {"sync_s": [], "sync_cpu_s": [], "late_s": [], "failed": []}
        threads = [
            threading.Thread(
                target=self._serve_slice,
                args=(self._replicas[i::num_threads], start_s, measure_from_s, end_s, out),
            )
            for i in range(num_threads)
        ]
        for t in threads:
            t.start()
        self._stop.wait(max(0.0, measure_from_s - time.time()))
        cpu0, wall0 = time.process_time(), time.time()
        for t in threads:
            t.join()
        return {**out, "cpu_s": time.process_time() - cpu0, "wall_s": time.time() - wall0}

    def _serve_slice(
        self,
        replicas: list[SyntheticReplica],
        start_s: float,
        measure_from_s: float,
        end_s: float,
        out: dict[str, list[float]],
    ) -> None:
        interval = self._args["sync_interval_s"]
        due = [(start_s + self._rng.uniform(0.0, interval), i) for i in range(len(replicas))]
        heapq.heapify(due)
        while due:
            due_s, i = heapq.heappop(due)
            if due_s >= end_s:
                continue
            self._stop.wait(max(0.0, due_s - time.time()))
            started_s, t0, cpu0 = time.time(), time.perf_counter(), time.thread_time()
            ok = replicas[i].link.sync_once()
            if started_s >= measure_from_s:
                out["sync_s"].append(time.perf_counter() - t0)
                out["sync_cpu_s"].append(time.thread_time() - cpu0)
                out["late_s"].append(started_s - due_s)
                out["failed"].append(float(not ok))
            replicas[i].run_steps(self._args["steps_per_sync"])
            heapq.heappush(due, (time.time() + interval, i))

    def ready(self) -> int:
        return len(self._replicas)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="One policy actor under many synthetic replicas.")
    parser.add_argument("--replicas", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument(
        "--duration-s", type=float, default=30.0, help="Measured seconds per scale."
    )
    parser.add_argument("--warmup-s", type=float, default=None, help="Default: 2 sync intervals.")
    parser.add_argument(
        "--sync-interval-s",
        type=float,
        default=PoolingConfig().sync_interval_s,
        help="Seconds between a replica's exchanges (default: pooling.sync_interval_s).",
    )
    parser.add_argument("--fleets", type=int, default=2, help="Caller processes.")
    parser.add_argument(
        "--threads", type=int, default=500, help="Caller threads (syncs in flight) per fleet."
    )
    parser.add_argument(
        "--steps-per-sync", type=int, default=20, help="Policy steps between syncs."
    )
    parser.add_argument("--warm-steps", type=int, default=300, help="Policy steps before the run.")
    parser.add_argument(
        "--max-batch", type=int, default=256, help="Largest batch size (max_num_seqs)."
    )
    parser.add_argument(
        "--snapshot-interval-s",
        type=float,
        default=SNAPSHOT_INTERVAL_S,
        help="The pool's least seconds between snapshot writes (0: after every change).",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results/bench-policy-actor.json")
    )
    return parser


def percentiles(samples: Sequence[float] | np.ndarray) -> tuple[float | None, float | None]:
    """p50 and p99 (numpy's linear interpolation); ``None`` without samples."""
    if len(samples) == 0:
        return None, None
    p50, p99 = np.percentile(np.asarray(samples, dtype=float), [50, 99])
    return float(p50), float(p99)


def actor_summary(timings: dict[str, Any], window: tuple[float, float]) -> dict[str, Any]:
    """The actor's own work inside ``window`` (wall clock seconds)."""
    exchanges = np.asarray(timings["exchanges"], dtype=float).reshape(-1, 3)
    inside = (exchanges[:, 0] >= window[0]) & (exchanges[:, 0] < window[1])
    writes = np.asarray(timings["snapshot_writes"], dtype=float).reshape(-1, 2)
    writes = writes[(writes[:, 0] >= window[0]) & (writes[:, 0] < window[1])]
    exchange_p50, exchange_p99 = percentiles(exchanges[inside, 1])
    write_p50, write_p99 = percentiles(writes[:, 1])
    # CPU clock read after each exchange: the window's CPU is last-in-window minus last-before
    first = int(np.argmax(inside)) if inside.any() else None
    cpu_per_sync = busy = None
    if first is not None and first > 0:
        last = int(np.nonzero(inside)[0][-1])
        cpu_s = exchanges[last, 2] - exchanges[first - 1, 2]
        cpu_per_sync = cpu_s / (last - first + 1)
        busy = cpu_s / (exchanges[last, 0] - exchanges[first - 1, 0])
    return {
        "actor_exchange_p50_s": exchange_p50,
        "actor_exchange_p99_s": exchange_p99,
        "actor_exchange_mean_s": float(exchanges[inside, 1].mean()) if inside.any() else None,
        "snapshot_write_p50_s": write_p50,
        "snapshot_write_p99_s": write_p99,
        "num_snapshot_writes": len(writes),
        "actor_cpu_per_sync_s": cpu_per_sync,
        "actor_cpu_s_per_s": busy,
        "num_actor_exchanges": int(inside.sum()),
    }


def caller_summary(
    callers: list[dict[str, Any]], num_replicas: int, args: argparse.Namespace
) -> dict[str, Any]:
    sync_s = np.concatenate([np.asarray(c["sync_s"], dtype=float) for c in callers])
    sync_p50, sync_p99 = percentiles(sync_s)
    _, late_p99 = percentiles(
        np.concatenate([np.asarray(c["late_s"], dtype=float) for c in callers])
    )
    cpu_p50, _ = percentiles(
        np.concatenate([np.asarray(c["sync_cpu_s"], dtype=float) for c in callers])
    )
    return {
        "offered_rate_per_s": num_replicas / args.sync_interval_s,
        "achieved_rate_per_s": len(sync_s) / args.duration_s,
        "sync_p50_s": sync_p50,
        "sync_p99_s": sync_p99,
        "sync_max_s": float(sync_s.max()) if len(sync_s) else None,
        "sync_start_late_p99_s": late_p99,
        "caller_cpu_per_sync_p50_s": cpu_p50,
        "caller_cpu_s_per_s": sum(c["cpu_s"] for c in callers) / max(c["wall_s"] for c in callers),
        "num_syncs": len(sync_s),
        "num_failed_syncs": int(sum(sum(c["failed"]) for c in callers)),
    }


def start_fleets(num_replicas: int, actor_name: str, args: argparse.Namespace) -> list[Any]:
    """``--fleets`` caller actors sharing the replicas ``replica-0`` .. ``replica-N-1``."""
    import ray

    fleet_args = {
        "max_batch": args.max_batch,
        "warm_steps": args.warm_steps,
        "steps_per_sync": args.steps_per_sync,
        "threads": args.threads,
        "sync_interval_s": args.sync_interval_s,
    }
    names = [f"replica-{i}" for i in range(num_replicas)]
    num_fleets = min(args.fleets, num_replicas)
    fleet_cls = ray.remote(ReplicaFleet)
    return [
        fleet_cls.options(num_cpus=0).remote(
            names[k::num_fleets], actor_name, args.seed + k * num_replicas, fleet_args
        )
        for k in range(num_fleets)
    ]


def run_scale(num_replicas: int, args: argparse.Namespace) -> dict[str, Any]:
    """One actor and its fleets for ``num_replicas`` replicas; killed afterwards."""
    import ray

    config = NightjarConfig()
    fingerprint = stats_fingerprint(config.policy, config.policy_config())
    actor_name = policy_actor_name(APP, f"replicas-{num_replicas}", fingerprint)
    snapshot_dir = tempfile.mkdtemp(prefix="nj-bpa-pool-")
    actor_cls = type(
        "TimedPolicyActor",
        (TimedPolicyActor,),
        {"snapshot_interval_s": args.snapshot_interval_s},
    )
    actor = get_or_create_policy_actor(
        actor_name, NAMESPACE, fingerprint, snapshot_dir, actor_cls=actor_cls
    )
    fleets: list[Any] = []
    try:
        fleets = start_fleets(num_replicas, actor_name, args)
        ray.get([f.ready.remote() for f in fleets])
        start_s = time.time() + 1.0
        measure_from_s = start_s + args.warmup_s
        end_s = measure_from_s + args.duration_s
        callers = ray.get([f.run.remote(start_s, measure_from_s, end_s) for f in fleets])
        timings = ray.get(actor.timings.remote())
        path = Path(snapshot_location(snapshot_dir, actor_name))
        snapshot_bytes = path.stat().st_size if path.is_file() else None
    finally:
        for handle in [*fleets, actor]:
            ray.kill(handle)
        shutil.rmtree(snapshot_dir, ignore_errors=True)
    row: dict[str, Any] = {"num_replicas": num_replicas, "load_avg_1m": os.getloadavg()[0]}
    row.update(caller_summary(callers, num_replicas, args))
    row.update(actor_summary(timings, (measure_from_s, end_s)))
    row["snapshot_bytes"] = snapshot_bytes
    add_verdicts(row, args.sync_interval_s)
    return row


def add_verdicts(row: dict[str, Any], sync_interval_s: float) -> None:
    """``keeps_up`` (the run as measured); ``callers_fell_behind`` (syncs started late by
    more than ``LATE_FRACTION`` of the interval: the caller processes, not the actor, set
    the rate); the actor's capacity from its CPU per sync on one free core."""
    row["keeps_up"] = bool(
        row["achieved_rate_per_s"] >= KEEP_UP_RATE_FRACTION * row["offered_rate_per_s"]
        and row["sync_p99_s"] is not None
        and row["sync_p99_s"] < sync_interval_s
    )
    late = row["sync_start_late_p99_s"]
    row["callers_fell_behind"] = late is not None and late > LATE_FRACTION * sync_interval_s
    cpu = row["actor_cpu_per_sync_s"]
    row["actor_capacity_syncs_per_s"] = None if not cpu else 1.0 / cpu
    row["actor_capacity_replicas"] = None if not cpu else sync_interval_s / cpu


HEADER = (
    f"{'replicas':>8} {'offered':>8} {'achieved':>8} {'p50_ms':>8} {'p99_ms':>8}"
    f" {'late_ms':>8} {'act_ms':>8} {'snap_ms':>8} {'cpu_ms':>8} {'cpu_s/s':>8}"
    f" {'snap_B':>8} {'keeps':>5}"
)
"""Columns: syncs/s offered and achieved; a sync's p50/p99 and p99 start lateness as the
replicas see them; the actor's p50 exchange, p50 snapshot write and CPU per sync (ms);
the actor's CPU seconds per second; the snapshot's bytes; whether the run kept up."""


def print_row(row: dict[str, Any]) -> None:
    def ms(key: str) -> str:
        value = row[key]
        return f"{'-':>8}" if value is None else f"{value * 1e3:8.2f}"

    cpu_s_per_s = row["actor_cpu_s_per_s"]
    print(
        f"{row['num_replicas']:>8} {row['offered_rate_per_s']:8.1f}"
        f" {row['achieved_rate_per_s']:8.1f} {ms('sync_p50_s')} {ms('sync_p99_s')}"
        f" {ms('sync_start_late_p99_s')} {ms('actor_exchange_p50_s')}"
        f" {ms('snapshot_write_p50_s')} {ms('actor_cpu_per_sync_s')}"
        f" {'-' if cpu_s_per_s is None else f'{cpu_s_per_s:.2f}':>8}"
        f" {row['snapshot_bytes'] or 0:>8} {'yes' if row['keeps_up'] else 'NO':>5}",
        flush=True,
    )


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    import logging

    import ray

    if args.warmup_s is None:
        args.warmup_s = 2 * args.sync_interval_s
    temp_dir = tempfile.mkdtemp(prefix="nj-bpa-ray-")
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=256 << 20,
        _temp_dir=temp_dir,
        logging_level=logging.WARNING,
    )
    print(HEADER)
    rows = []
    try:
        for num_replicas in args.replicas:
            rows.append(run_scale(num_replicas, args))
            print_row(rows[-1])
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    kept_up = [r["num_replicas"] for r in rows if r["keeps_up"]]
    result = {
        "command": " ".join(["python benchmarks/bench_policy_actor.py", *argv]),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "cpu_count": os.cpu_count(),
        "rows": rows,
        "largest_kept_up": max(kept_up) if kept_up else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if min(args.replicas) < 1 or args.duration_s <= 0 or args.fleets < 1 or args.threads < 1:
        raise SystemExit("--replicas, --duration-s, --fleets and --threads must be positive")
    return run(args, argv)


if __name__ == "__main__":
    sys.exit(main())
