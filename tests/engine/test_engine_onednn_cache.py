"""The CPU worker bounds oneDNN's primitive cache (``engine/onednn_cache.py``).

Two real engines on the default pair (12 layers: the size at which the growth
shows; the tiny pair's primitives are too small to tell apart from noise) run the
same prompts, one per step, each of a token count not run before, so every step
builds new oneDNN primitives: one engine with the worker's default bound, one
with the deployment asking for oneDNN's own default (1024 entries). Once vLLM's
per-layer caches are full, the bound must keep the worker's memory growth well
below the unbounded run's, and a deployment's value must win over the default.
"""

import random
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import psutil
import pytest

from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import offline_engine, random_prompts, run_batch
from nightjar_ray.engine.onednn_cache import (
    DEFAULT_ONEDNN_CACHE_CAPACITY,
    ONEDNN_CACHE_ENV,
    bound_onednn_cache,
)
from nightjar_ray.models.pair import ModelPair, PairSpec, generate_pair

pytestmark = [pytest.mark.engine, pytest.mark.spawned_engines]
"""Spawned: the growth is the worker process's, and the worker reads the bound at start."""

PROMPT_SIZES = random.Random(0).sample(range(8, 200), 192)
"""Distinct prefill sizes in a seeded order, one prompt per step: the first 64 fill
vLLM's per-layer caches (32 sizes each), the growth is measured over the other
128 (drawn from the same range, so evicted and new primitives are alike)."""
WARM_TOKENS, PROMPT_TOKENS = PROMPT_SIZES[:64], PROMPT_SIZES[64:]
ENGINE = {
    "max_num_seqs": 4,
    "max_num_batched_tokens": 256,
    "max_model_len": 256,
    "dtype": "float32",
}

NIGHTJAR = NightjarConfig(policy="off", elastic_memory={"enabled": False})
"""Elastic memory off: its KV arena commits KV pages as blocks are first written, growth
this test would count against the primitive cache."""


def engine_rss_bytes() -> int:
    """Resident bytes of this test process's vLLM processes (engine core, worker)."""
    total = 0
    for child in psutil.Process().children(recursive=True):
        try:
            if child.name().startswith("VLLM"):
                total += child.memory_info().rss
        except psutil.Error:
            continue
    return total


def growth_over_new_sizes_bytes(pair: ModelPair, capacity: str | None) -> int:
    """Engine RSS growth over :data:`PROMPT_TOKENS`, the deployment's capacity set
    to ``capacity`` (``None``: not set, the worker's default applies)."""
    with ExitStack() as stack:
        with pytest.MonkeyPatch.context() as mp:  # the worker inherits it at start
            if capacity is None:
                mp.delenv(ONEDNN_CACHE_ENV, raising=False)
            else:
                mp.setenv(ONEDNN_CACHE_ENV, capacity)
            llm = stack.enter_context(offline_engine(pair, NIGHTJAR, **ENGINE))
        for n in WARM_TOKENS:
            run_batch(llm, random_prompts(1, n, PairSpec().vocab_size, seed=n), 1)
        before = engine_rss_bytes()
        for n in PROMPT_TOKENS:
            run_batch(llm, random_prompts(1, n, PairSpec().vocab_size, seed=n), 1)
        return engine_rss_bytes() - before


@pytest.fixture(scope="module")
def growth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    pair = generate_pair(tmp_path_factory.mktemp("pairs") / "default", PairSpec())
    yield {
        "default": growth_over_new_sizes_bytes(pair, None),
        "oneDNN's 1024": growth_over_new_sizes_bytes(pair, "1024"),
    }


def test_worker_bounds_the_primitive_cache_by_default(growth: dict[str, int]) -> None:
    unbounded, bounded = growth["oneDNN's 1024"], growth["default"]
    assert unbounded > 128 << 20, f"the unbounded run should grow: {growth}"
    assert bounded < unbounded / 3, f"the default bound should cut the growth: {growth}"


def test_bound_keeps_a_deployment_value_and_rejects_a_bad_one() -> None:
    env: dict[str, Any] = {}
    assert bound_onednn_cache(env) == DEFAULT_ONEDNN_CACHE_CAPACITY
    assert env == {ONEDNN_CACHE_ENV: str(DEFAULT_ONEDNN_CACHE_CAPACITY)}
    assert bound_onednn_cache({ONEDNN_CACHE_ENV: "0"}) == 0
    for bad in ("-1", "lots"):
        with pytest.raises(ValueError, match=ONEDNN_CACHE_ENV):
            bound_onednn_cache({ONEDNN_CACHE_ENV: bad})
