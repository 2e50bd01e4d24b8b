"""Shared fixtures of the engine tests: generated model pairs and prompts.

Every engine test starts real vLLM (CPU) engines on models generated here
(``nightjar_ray.models.pair``), so nothing is downloaded. Engines are
started per test or module and shut down after, to keep memory flat.
"""

from dataclasses import replace
from pathlib import Path

import pytest

from nightjar_ray.engine.offline import random_prompts
from nightjar_ray.models.pair import TINY_SPEC, ModelPair, generate_pair

PROMPT_LENGTHS = (5, 17, 40, 90, 9, 64)
MAX_TOKENS = 40
SMALL_ENGINE = {"max_num_seqs": 8, "max_num_batched_tokens": 64, "max_model_len": 256}
"""A 64-token step budget: long prompts are chunked and share steps with decodes,
and catch-ups of long gaps are split across several draft forwards."""


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
