"""The local contenders of ``nightjar-ray bench-serve``: one Serve app per contender on a
Ray cluster of its own (the generated pair, each with its own ``nightjar.policy``), and
their counters read from the policy actors before an app is deleted.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from pathlib import Path
from typing import Any

from nightjar_ray.loadgen.bench import CONTENDER_EXTRAS, CONTENDERS

MODEL_ID = "bench"
KV_BLOCKS = 128
POOL_DIR = "policy-pool"
"""The folder under ``--out`` that holds the run's policy-pool snapshots."""


def contender_args(
    pair: str,
    policy: str,
    params: dict[str, Any],
    extras: dict[str, Any] | None = None,
    enforce_eager: bool = False,
    snapshot_dir: str | None = None,
) -> dict[str, Any]:
    """One contender's app config: the main job's config with another policy and, from
    ``extras``, other ``nightjar:`` fields (``nightjar-elastic``: elastic memory on);
    ``snapshot_dir``: where its policy actor keeps the pool (the run's own directory, so
    no contender starts from what an earlier run learned)."""
    from nightjar_ray.cli.demo import demo_app_args

    args = demo_app_args(pair, 1)
    args["model_loading_config"]["model_id"] = MODEL_ID
    args["runtime_env"] = {"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1"}}
    # NOTE: every contender is resident at once; 128 blocks of vLLM's CPU block size
    # (128 tokens) hold 16k tokens, the scenarios' peak concurrency, and no more.
    args["engine_kwargs"]["num_gpu_blocks_override"] = KV_BLOCKS
    if enforce_eager:
        args["engine_kwargs"]["enforce_eager"] = True
    nightjar = {**args["nightjar"], "policy": policy, "policy_params": params, **(extras or {})}
    if snapshot_dir is not None:
        nightjar["pooling"] = {**nightjar.get("pooling", {}), "snapshot_dir": snapshot_dir}
    args["nightjar"] = nightjar
    return args


def fresh_pool_dir(out: Path) -> Path:
    """``out/policy-pool``, emptied: where this run's policy actors snapshot their pools
    (every contender starts cold; the pools learned stay beside the results)."""
    pools = (out / POOL_DIR).resolve()
    shutil.rmtree(pools, ignore_errors=True)
    pools.mkdir(parents=True)
    return pools


def start_serve(http_port: int, max_apps: int) -> str:
    import ray
    from ray import serve

    ray.init(address="local", num_cpus=max(32, 4 * max_apps), log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": http_port})
    return f"http://127.0.0.1:{http_port}"


def deploy(pair: str, names: list[str], enforce_eager: bool, snapshot_dir: str) -> None:
    from ray import serve

    from nightjar_ray.serve import build_app

    for name in names:
        policy, params = CONTENDERS[name]
        print(f"deploying {name} ({policy} {params or ''})", file=sys.stderr, flush=True)
        extras = CONTENDER_EXTRAS.get(name)
        app = build_app(contender_args(pair, policy, params, extras, enforce_eager, snapshot_dir))
        serve.run(app, name=name, route_prefix=f"/{name}")


def app_counts(app: str) -> dict[str, Any] | None:
    """One app's whole-run counters summed over its replicas' latest reports to its policy
    actor: steps per gamma, decisions per mode, elastic-memory events; ``None`` when the
    actor cannot be read."""
    import ray
    from ray.exceptions import RayError

    from nightjar_ray.cli.faults import policy_actor

    try:
        status = ray.get(policy_actor(app).status.remote(), timeout=10)
    except (RayError, RuntimeError):
        return None
    reports = [replica.get("report") or {} for replica in status["replicas"].values()]
    return sum_reports(reports)


def sum_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Replicas' reports to the policy actor summed into one app's counters (memory events
    by count; their seconds are dropped)."""
    total: dict[str, Any] = {"steps_by_gamma": [], "decisions_by_mode": {}, "memory_events": {}}
    for report in reports:
        counts = {
            "steps_by_gamma": [int(n) for n in report.get("steps_by_gamma", ())],
            "decisions_by_mode": {
                k: int(n) for k, n in report.get("decisions_by_mode", {}).items()
            },
            "memory_events": {k: int(n) for k, (n, _s) in report.get("memory_events", {}).items()},
        }
        total = add_counts(total, counts)
    return total


def retire(names: list[str], counts: dict[str, Any]) -> None:
    """Read each app's counters into ``counts`` (a name in several waves sums them), then
    delete the apps and their detached policy actors so the next wave has the memory."""
    import ray
    from ray import serve

    from nightjar_ray.cli.faults import policy_actor

    for name in names:
        c = app_counts(name)
        print(f"counters {name}: {c}", file=sys.stderr, flush=True)
        if name in counts:  # NOTE: unreadable counters in any wave make the app's total None
            prev = counts[name]
            c = None if prev is None or c is None else add_counts(prev, c)
        counts[name] = c
        serve.delete(name)
        with contextlib.suppress(RuntimeError, ValueError):  # no actor left to free
            ray.kill(policy_actor(name), no_restart=True)


def add_counts(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two apps' (or waves') counters summed; ``steps_by_gamma`` may differ in length."""
    sa, sb = list(a["steps_by_gamma"]), list(b["steps_by_gamma"])
    n = max(len(sa), len(sb))
    steps = [x + y for x, y in zip(sa + [0] * (n - len(sa)), sb + [0] * (n - len(sb)), strict=True)]
    out: dict[str, Any] = {"steps_by_gamma": steps}
    for key in ("decisions_by_mode", "memory_events"):
        out[key] = {k: a[key].get(k, 0) + b[key].get(k, 0) for k in {*a[key], *b[key]}}
    return out
