"""An offline batch reports each request's E2E (the engine benchmark's latency figure)."""

import pytest

from nightjar_ray.engine.offline import run_batch
from nightjar_ray.models.pair import ModelPair
from tests.reference_engines import ReferenceEngines

from .conftest import SMALL_ENGINE

pytestmark = pytest.mark.engine


def test_each_request_of_a_batch_has_its_e2e_and_longer_outputs_take_longer(
    reference_engines: ReferenceEngines, lossy_pair: ModelPair, prompts: list[list[int]]
) -> None:
    llm = reference_engines.engine(lossy_pair, **SMALL_ENGINE)
    max_tokens = [2, 40, 4, 80]
    run = run_batch(llm, prompts[:4], max_tokens)
    assert run.e2e_s is not None and len(run.e2e_s) == 4
    assert all(0 < s <= run.duration_s for s in run.e2e_s)
    # the same prompts share every step until the short ones finish
    assert run.e2e_s[3] > run.e2e_s[1] > max(run.e2e_s[0], run.e2e_s[2])
