"""Tensor parallelism on vLLM's Ray executor under Serve: the 32B preset's shape
(``tensor_parallel_size: 2``, ``distributed_executor_backend: ray``, draft TP 2) on the
tiny pair, CPU values, real Ray, real Ray Serve LLM and real vLLM.

The ranks are vLLM's own ``RayWorkerProc`` actors in the replica's placement group, on
the CPU platform with a Ray resource key (``engine/ray_cpu.py``). One local cluster and
one app for the module; the last test kills one rank's actor (the replica fails and
Serve replaces it), so it runs last.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.cli import faults
from nightjar_ray.cli.chaos import NUM_RANKS, ranks_on_ray
from nightjar_ray.engine.ray_cpu import RAY_CPU_RESOURCE
from nightjar_ray.models.pair import generate_pair
from nightjar_ray.serve.config import GENERATED_PAIRS, cache_dir
from tests.reference_engines import ReferenceEngines
from tests.support import free_port, wait_until

from .conftest import MODEL_ID, app_args, post

pytestmark = pytest.mark.engine

APP = "njtp"
PROMPTS = [[(7 * i + 3 * j) % 1000 + 2 for j in range(5 + 9 * i)] for i in range(6)]
MAX_TOKENS = 40
CLIENT_TIMEOUT_S = 120.0
"""A request not answered in this time counts as hung."""


def tp_args(snapshot_dir: Path) -> dict[str, Any]:
    """The 32B TP=2 preset's engine keys with CPU values; forced memory cycles."""
    args = app_args(
        snapshot_dir,
        testing={"chaos_cycle_steps": 5, "chaos_offload_steps": 9, "self_check": True},
    )
    ranks_on_ray(args)  # the chaos command's rank-kill deployment, on the test pair
    return args


@dataclass
class App:
    url: str
    snapshot_dir: Path

    def completion(self, prompt: Any, max_tokens: int = MAX_TOKENS) -> tuple[int, Any]:
        body = {
            "model": MODEL_ID,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "return_token_ids": True,
        }
        return post(f"{self.url}/v1/completions", body, timeout_s=CLIENT_TIMEOUT_S)


@pytest.fixture(scope="module")
def app(nightjar_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    import ray
    from ray import serve

    from nightjar_ray.serve import build_app

    http_port = free_port()
    snapshot_dir = tmp_path_factory.mktemp("pool")
    # logical CPUs for the proxy and controller; one rank slot per rank
    ray.init(
        address="local",
        num_cpus=8,
        resources={RAY_CPU_RESOURCE: NUM_RANKS},
        include_dashboard=False,
    )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": http_port})
        serve.run(build_app(tp_args(snapshot_dir)), name=APP, route_prefix="/")
        yield App(f"http://127.0.0.1:{http_port}", snapshot_dir)
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()


def rank_stats(method: str) -> list[dict[str, Any]]:
    """``method`` of every rank, through the replica's engine (vLLM's collective RPC)."""
    from ray import serve

    handle = serve.get_deployment_handle(f"{faults.LLM_DEPLOYMENT}:{MODEL_ID}", APP)
    result: list[dict[str, Any]] = handle.collective_rpc.remote(method=method).result(timeout_s=60)
    return result


def _served(app: App, prompts: list[list[int]]) -> list[list[int]]:
    with ThreadPoolExecutor(len(prompts)) as pool:
        replies = list(pool.map(app.completion, prompts))
    for status, body in replies:
        assert status == 200, body
    return [body["choices"][0]["token_ids"] for _, body in replies]


def test_ranks_run_as_ray_actors_in_the_replicas_placement_group(app: App) -> None:
    import ray

    assert [name.rsplit("_", 1)[-1] for name, _ in faults.rank_actors()] == ["TP0", "TP1"]
    # the replica's placement group: one bundle per rank, each with a rank slot
    groups = [
        g
        for g in ray.util.placement_group_table().values()
        if g["state"] == "CREATED"
        and sum(b.get(RAY_CPU_RESOURCE, 0) for b in g["bundles"].values()) == NUM_RANKS
    ]
    assert len(groups) == 1
    # the ranks hold both slots (nothing else asks for the resource)
    assert ray.available_resources().get(RAY_CPU_RESOURCE, 0.0) == 0.0


def test_greedy_outputs_equal_the_single_rank_engine_under_memory_cycles(
    app: App, reference_engines: ReferenceEngines
) -> None:
    """Concurrent greedy requests while forced compaction and offload/reload cycles run:
    token-identical to one plain rank; after every event both ranks hold the same
    blocks and draft residency (each rank's own record)."""
    served = _served(app, PROMPTS)
    pair = generate_pair(cache_dir() / "pairs" / "tiny", GENERATED_PAIRS["tiny"])
    engine = app_args(app.snapshot_dir)["engine_kwargs"]
    limits = {k: engine[k] for k in ("max_model_len", "max_num_seqs", "max_num_batched_tokens")}
    assert served == reference_engines.outputs(pair, PROMPTS, MAX_TOKENS, **limits)
    ranks = rank_stats("nightjar_memory_stats")
    assert len(ranks) == NUM_RANKS
    history = ranks[0]["history"]
    commands = {c for _, _, step in history for c in step}
    assert {"offload", "reload"} <= commands
    assert len({num_blocks for num_blocks, _, _ in history}) >= 2  # contracted and expanded
    same = ("history", "num_moved_blocks", "num_blocks", "num_max_blocks", "num_released_bytes")
    assert [ranks[0][k] for k in same] == [ranks[1][k] for k in same]
    drafts = [r["draft"] for r in ranks]
    assert drafts[0]["num_offloads"] == drafts[1]["num_offloads"] > 0
    assert all(d["weights_identical"] for d in drafts)


def test_the_policy_pools_through_the_actor(app: App) -> None:
    import ray

    def pooled() -> dict[str, Any] | None:
        app.completion(PROMPTS[0], 16)
        status: dict[str, Any] = ray.get(faults.policy_actor(APP).status.remote(), timeout=30)
        return status if status["pool_count"] > 0 and status["replicas"] else None

    status = wait_until(pooled, 120, 0.5, "the policy pool to hold observations")
    (record,) = status["replicas"].values()
    assert record["pushed_count"] == status["pool_count"]


def test_killing_one_rank_fails_the_replica_fast_and_serve_replaces_it(app: App) -> None:
    """Kill TP1's actor under load: every request ends (success or an error) within the
    client timeout, Serve starts a new replica with new ranks, and it serves the same
    greedy outputs."""

    before = _served(app, PROMPTS[:2])
    with ThreadPoolExecutor(6) as pool:
        load = [pool.submit(app.completion, PROMPTS[i % len(PROMPTS)], 64) for i in range(6)]
        time.sleep(1.0)  # requests in flight (the kill is the event under test)
        killed = faults.kill_one_rank(1)
        killed_at = time.monotonic()
        outcomes = [f.result(timeout=CLIENT_TIMEOUT_S + 10) for f in load]
    assert all(status in (200, 500, 503) for status, _ in outcomes), outcomes
    assert killed.endswith("_TP1")
    wait_until(
        lambda: faults.ranks_replaced(APP, killed, NUM_RANKS),
        300,
        1.0,
        "Serve to replace the replica and its ranks",
    )
    after = wait_until(lambda: _try_served(app, PROMPTS[:2]), 300, 2.0, "the new replica to serve")
    recovery_s = time.monotonic() - killed_at
    assert after == before, recovery_s


def _try_served(app: App, prompts: list[list[int]]) -> list[list[int]] | None:
    replies = [app.completion(p) for p in prompts]
    if any(status != 200 for status, _ in replies):
        return None
    return [body["choices"][0]["token_ids"] for _, body in replies]
