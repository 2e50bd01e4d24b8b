"""The draft KV catch-up is real: with draft == target, acceptance stays high
across off/on switches, and collapses when the catch-up is disabled."""

import itertools

import pytest

from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import (
    SpecCounters,
    draft_stats,
    offline_engine,
    run_batch,
    spec_counters,
)
from nightjar_ray.models.pair import ModelPair

from .conftest import SMALL_ENGINE, SPEC_EXTRA

pytestmark = pytest.mark.engine


def switching_run(
    pair: ModelPair, prompts: list[list[int]], catch_up: bool
) -> tuple[SpecCounters, int]:
    testing = {"forced_gammas": [0, 3], "forced_steps_per_gamma": 4}
    config = NightjarConfig(testing={**testing, "skip_catch_up": not catch_up})
    with offline_engine(pair, config, spec_extra=SPEC_EXTRA, **SMALL_ENGINE) as llm:
        run_batch(llm, prompts, max_tokens=64)
        steps = draft_stats(llm)["steps"]
        counters = spec_counters(llm)
    resumes = sum(
        1
        for a, b in itertools.pairwise(steps)
        if a["num_spec_tokens"] == 0 and b["num_spec_tokens"] > 0
    )
    return counters, resumes


def test_acceptance_survives_switches_with_catch_up(
    copy_pair: ModelPair, prompts: list[list[int]]
) -> None:
    caught_up, resumes = switching_run(copy_pair, prompts, catch_up=True)
    assert resumes >= 4
    assert caught_up.num_draft_tokens > 100
    assert caught_up.acceptance_rate >= 0.9


def test_acceptance_collapses_without_catch_up(
    copy_pair: ModelPair, prompts: list[list[int]]
) -> None:
    stale, resumes = switching_run(copy_pair, prompts, catch_up=False)
    assert resumes >= 4
    assert stale.num_draft_tokens > 100
    assert stale.acceptance_rate < 0.6
