"""Shared pieces of the Serve tests: the app config on the tiny generated pair and a
small HTTP client. Each module that deploys starts (and stops) its own local Ray
cluster; the pair is generated once per session into a temporary cache directory."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.loadgen.client import request_headers
from nightjar_ray.serve.config import CACHE_ENV

MODEL_ID = "tiny"
SECOND_MODEL_ID = "tiny-b"


@pytest.fixture(scope="session")
def nightjar_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``$NIGHTJAR_CACHE_DIR`` for the session (generated pairs land here)."""
    path = tmp_path_factory.mktemp("nightjar-cache")
    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(path)
    yield path
    if old is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = old


AUTOSCALING = {
    "min_replicas": 1,
    "initial_replicas": 1,
    "max_replicas": 2,
    "target_ongoing_requests": 8,
    "upscale_delay_s": 2.0,
    "downscale_delay_s": 600.0,
}
"""One replica until more than 8 requests are in flight, then two (kept for 10 minutes)."""


def app_args(
    snapshot_dir: Path, deployment: dict[str, Any] | None = None, **nightjar: Any
) -> dict[str, Any]:
    """The tiny pair with Nightjar (float32, so greedy outputs are stable)."""
    return {
        "model_loading_config": {"model_id": MODEL_ID, "model_source": "generated:tiny"},
        "engine_kwargs": {
            "speculative_config": {
                "method": "draft_model",
                "model": "generated:tiny/draft",
                "num_speculative_tokens": 3,
            },
            "max_model_len": 256,
            "max_num_seqs": 8,
            "max_num_batched_tokens": 64,
            # eager, as the offline test engines: a replica starts without torch.compile's
            # ~30 s on 2 cores (the compiled path: the main job in tests/ops, bench-serve)
            "enforce_eager": True,
        },
        "placement_group_config": {"bundles": [{"CPU": 1}]},
        "runtime_env": {"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1"}},
        "deployment_config": deployment or {"num_replicas": 1},
        "nightjar": {
            "pooling": {"sync_interval_s": 0.5, "snapshot_dir": str(snapshot_dir)},
            "metrics_interval_s": 0.5,
            **nightjar,
        },
    }


def second_model_args(snapshot_dir: Path) -> dict[str, Any]:
    """A second model on the tiny pair, its largest gamma (5) set by vLLM's
    ``num_speculative_tokens`` alone (its ``nightjar:`` block says nothing of it)."""
    args = app_args(snapshot_dir)
    args["model_loading_config"]["model_id"] = SECOND_MODEL_ID
    args["engine_kwargs"]["speculative_config"]["num_speculative_tokens"] = 5
    return args


def two_model_args(snapshot_dir: Path, deployment: dict[str, Any] | None = None) -> dict[str, Any]:
    """Ray Serve LLM's multi-model shape: :func:`app_args` (with ``deployment``) and
    :func:`second_model_args`, one ``llm_configs`` entry each."""
    return {"llm_configs": [app_args(snapshot_dir, deployment), second_model_args(snapshot_dir)]}


def expected_pool_count(fingerprint: dict[str, Any], report: dict[str, Any]) -> float:
    """The pool's count for a replica's observations (its report to the policy actor):
    steps (step-mean), else tokens in each table (the latency table, ``factored``'s
    requests per token, ``batch_curve``'s steps per token), plus ``factored``'s acceptance
    depths (``reach_rate``: drafted requests per depth; paired acceptance is the default
    and not part of the fingerprint)."""
    estimator = fingerprint.get("latency_estimator")
    if estimator == "step-mean":
        return float(report["num_observed_steps"])
    factored = estimator == "factored"
    num_tables = 1 + factored + (factored and bool(fingerprint.get("batch_curve")))
    depths = report["observed_depth_reqs"] if factored else 0
    return num_tables * report["observed_tokens"] + depths


def client_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """``headers``, or what every client sends: the API key when ``$NIGHTJAR_API_KEY``
    is set (a module that deploys with a key sets it)."""
    return dict(request_headers([], os.environ) if headers is None else headers)


def post(
    url: str,
    body: Any,
    raw: bytes | None = None,
    timeout_s: float = 300.0,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, Any]:
    """POST JSON (or ``raw`` bytes) with :func:`client_headers`; returns (status, parsed
    JSON or text). A reply not started within ``timeout_s`` raises (a hung request fails
    the test)."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", **client_headers(headers)}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, _parse(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, _parse(e.read())


def get(url: str, headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
    """GET with :func:`client_headers`; returns (status, parsed JSON or text)."""
    req = urllib.request.Request(url, headers=client_headers(headers))
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, _parse(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, _parse(e.read())


def _parse(data: bytes) -> Any:
    text = data.decode(errors="replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
