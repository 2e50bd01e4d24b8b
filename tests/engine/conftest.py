"""Shared fixtures of the engine tests: generated model pairs, prompts, engine sizes.

Every engine test starts real vLLM (CPU) engines on models generated here
(``nightjar_ray.models.pair``), so nothing is downloaded. Engines under test are
started per test or module and shut down after; the plain engines that decode
reference outputs are shared by the session (``reference_engines``, tests/conftest.py).
The copy and lossy pairs share their target (same spec and seed), so one plain engine
serves both.

Engines under test run vLLM's engine core and (single-rank) worker in the test process
(:func:`engines_in_the_test_process`): the same vLLM code without two spawned processes
that each import vLLM (~30 s of a 2-core machine per engine). A module that measures the
engine's processes, or must cross their boundary, says so with
``pytest.mark.spawned_engines``; the production path (spawned engine core and workers)
also runs under the Serve tests, the TP tests' ranks and the lossless module's spawned
case.
"""

import json
import random
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.engine.offline import random_prompts
from nightjar_ray.engine.selfcheck import LOAD_PROMPT_LENGTHS
from nightjar_ray.models.pair import TINY_SPEC, ModelPair, generate_pair
from nightjar_ray.policy import StepResult, build_policy
from tests.reference_engines import IN_PROCESS_ENV

PROMPT_LENGTHS = (5, 17, 40, 90, 9, 64)
MAX_TOKENS = 40
SMALL_ENGINE = {"max_num_seqs": 8, "max_num_batched_tokens": 64, "max_model_len": 256}
"""A 64-token step budget: long prompts are chunked and share steps with decodes,
and catch-ups of long gaps are split across several draft forwards."""
TIGHT_ENGINE: dict[str, Any] = {
    "max_num_seqs": 8,
    "max_num_batched_tokens": 64,
    "max_model_len": 256,
    "block_size": 32,
    "kv_cache_memory_bytes": 6_000_000,
}
"""36 float32 blocks of 32 tokens with the lossy pair's draft layer: 8 running requests
fill the pool."""
TP2_ENGINE = {**TIGHT_ENGINE, "tensor_parallel_size": 2, "kv_cache_memory_bytes": 3_000_000}
"""Each rank holds half the KV heads: half the bytes give the same blocks."""
SPEC_EXTRA = {"num_speculative_tokens": 3}
"""``speculative_config`` fields of the Nightjar engines under test: gammas 0..3."""
TP2_SPEC = {**SPEC_EXTRA, "draft_tensor_parallel_size": 2}
TP2_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
"""One core per rank."""
LENGTHS = LOAD_PROMPT_LENGTHS
"""Prompt lengths of the tight-pool tests (the self-check's): more requests than the pool
holds at once."""


NUMBA_LOADED = "llvmlite.binding.ffi"
"""Once numba is imported (vLLM's ngram proposer does), vLLM 0.32 starts no engine in the
process: its CPU worker's kernel registration reads ``vars()`` of every module attribute
and llvmlite's ``lib`` has no mapping there (``triton_utils/dispatcher.py`` L138-139)."""


@pytest.fixture(scope="module", autouse=True)
def engines_in_the_test_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """Engines this module starts run in the test process, unless it is marked
    ``spawned_engines``. Only one such engine runs at a time: vLLM's distributed groups
    are per process (the shared reference engines are spawned, tests/reference_engines)."""
    if request.node.get_closest_marker("spawned_engines") or NUMBA_LOADED in sys.modules:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(IN_PROCESS_ENV, "0")
        yield


@pytest.fixture(scope="session")
def lossy_pair(tmp_path_factory: pytest.TempPathFactory) -> ModelPair:
    """Tiny s=0.05 pair in float32: realistic rejections, stable greedy argmax."""
    out: Path = tmp_path_factory.mktemp("pairs") / "lossy"
    return generate_pair(out, replace(TINY_SPEC, dtype="float32"))


@pytest.fixture(scope="session")
def copy_pair(tmp_path_factory: pytest.TempPathFactory) -> ModelPair:
    """Draft weights identical to the target's (float32): acceptance ~1 when in sync."""
    out: Path = tmp_path_factory.mktemp("pairs") / "copy"
    return generate_pair(out, replace(TINY_SPEC, dtype="float32", draft="copy"))


@pytest.fixture(scope="session")
def prompts() -> list[list[int]]:
    per_length = [random_prompts(1, n, TINY_SPEC.vocab_size, seed=n)[0] for n in PROMPT_LENGTHS]
    return per_length


def speculating_snapshot(path: Path) -> Path:
    """A nightjar policy that has learned, at every batch size, that gamma 3 emits four
    tokens per request in a plain step's time: it speculates from the first step, so
    the long prompts' chunks share speculating steps (the gate still decides who)."""
    trained = build_policy("nightjar", {"gamma_max": 3}, rng=random.Random(0))
    for num_reqs in range(1, SMALL_ENGINE["max_num_seqs"] + 1):
        for step in range(200):
            gamma = trained.choose(num_reqs, 0)
            num_drafts = num_reqs * gamma
            duration_s = 0.01 + 0.0001 * gamma + step * 1e-9
            trained.observe(
                StepResult(
                    num_reqs, gamma, num_reqs + num_drafts, duration_s, num_drafts, num_drafts
                )
            )
    path.write_text(json.dumps(trained.snapshot()))
    return path
