"""Greedy outputs are token-identical to plain decoding under every schedule.

Also checks, on the same runs, that gamma=0 steps run no draft forward, that
every step's decision is visible in the decision log, and that B counts the
decoding requests only (chunked prefills share steps with decodes here).
"""

import json
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import draft_stats, offline_engine, run_batch
from nightjar_ray.models.pair import ModelPair
from tests.reference_engines import IN_PROCESS_ENV, ReferenceEngines

from .conftest import MAX_TOKENS, SMALL_ENGINE, SPEC_EXTRA

pytestmark = pytest.mark.engine

FORCED_0_3 = {"testing": {"forced_gammas": [0, 3], "forced_steps_per_gamma": 3}}


@pytest.fixture(scope="module")
def reference(
    reference_engines: ReferenceEngines, lossy_pair: ModelPair, prompts: list[list[int]]
) -> list[list[int]]:
    """Plain decoding (no speculative config at all)."""
    return reference_engines.outputs(lossy_pair, prompts, MAX_TOKENS, **SMALL_ENGINE)


def run_nightjar(
    pair: ModelPair, prompts: list[list[int]], log: Path, method: str = "draft_model", **cfg: Any
) -> tuple[list[list[int]], dict[str, Any], list[dict[str, Any]]]:
    config = NightjarConfig(decision_log_path=str(log), **cfg)
    with offline_engine(pair, config, spec_extra=SPEC_EXTRA, method=method, **SMALL_ENGINE) as llm:
        outputs = run_batch(llm, prompts, MAX_TOKENS).token_ids
        stats = draft_stats(llm)
    decisions = [json.loads(line) for line in log.read_text().splitlines()]
    return outputs, stats, decisions


def test_nightjar_policy_is_lossless(
    lossy_pair: ModelPair, prompts: list[list[int]], reference: list[list[int]], tmp_path: Path
) -> None:
    outputs, _, decisions = run_nightjar(lossy_pair, prompts, tmp_path / "d.jsonl")
    assert outputs == reference
    consulted = [d for d in decisions if d["consulted"]]
    assert len({d["gamma"] for d in consulted}) > 1  # the bandit explored
    mixed = [d for d in decisions if d["num_scheduled_reqs"] > d["num_decode_reqs"] > 0]
    assert mixed, "expected steps where chunked prefills share the batch with decodes"
    assert all(d["num_reqs"] == d["num_decode_reqs"] for d in mixed)
    # the observation rule's input: prompt tokens of the chunks sharing a step, none otherwise
    assert all(d["num_prefill_tokens"] > 0 for d in mixed)
    pure = [d for d in decisions if d["num_scheduled_reqs"] == d["num_decode_reqs"]]
    assert pure and all(d["num_prefill_tokens"] == 0 for d in pure)
    assert any(d["observed"] and d["duration_s"] > 0 for d in decisions)


def test_fixed_policy_is_lossless(
    lossy_pair: ModelPair, prompts: list[list[int]], reference: list[list[int]], tmp_path: Path
) -> None:
    params = {"policy": "fixed", "policy_params": {"gamma": 3}}
    outputs, stats, decisions = run_nightjar(lossy_pair, prompts, tmp_path / "d.jsonl", **params)
    assert outputs == reference
    assert {d["gamma"] for d in decisions} == {3}
    assert stats["num_skipped_steps"] == 0
    check_acceptance_depths(decisions, 3)


def check_acceptance_depths(decisions: list[dict[str, Any]], gamma: int) -> None:
    """Each verifying step logs its drafted requests per acceptance depth (what the
    ``paired_acceptance`` estimator learns from): non-increasing, summing to the step's
    accepted drafts where every drafted request verified ``gamma``, with rejections."""
    verified = [d for d in decisions if d["verified_gamma"] == gamma and d["num_draft_tokens"]]
    full = [d for d in verified if d["num_reqs_reaching"][0] * gamma == d["num_draft_tokens"]]
    assert len(full) >= 10
    for d in verified:
        reaching = d["num_reqs_reaching"]
        assert len(reaching) == gamma + 1 and reaching == sorted(reaching, reverse=True)
        assert reaching[0] <= d["num_decode_reqs"]
    assert all(sum(d["num_reqs_reaching"][1:]) == d["num_accepted_tokens"] for d in full)
    assert any(d["num_reqs_reaching"][gamma] < d["num_reqs_reaching"][0] for d in full)
    assert any(d["num_reqs_reaching"][1] > 0 for d in full)


@pytest.mark.parametrize("processes", ["in-process", "spawned"])
def test_forced_0_3_schedule_is_lossless_and_skips_the_draft(
    lossy_pair: ModelPair,
    prompts: list[list[int]],
    reference: list[list[int]],
    tmp_path: Path,
    processes: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Also with the engine core and worker spawned, as vLLM and a replica start them:
    decisions, skips and catch-ups cross the processes' boundary as typed messages."""
    if processes == "spawned":
        monkeypatch.setenv(IN_PROCESS_ENV, "1")
    outputs, stats, decisions = run_nightjar(
        lossy_pair, prompts, tmp_path / "d.jsonl", **FORCED_0_3
    )
    assert outputs == reference
    steps = stats["steps"]
    # Decisions are visible per step and are what the workers executed.
    executed = [d["gamma"] for d in decisions if d["num_scheduled_reqs"] > 0]
    assert executed == [s["num_spec_tokens"] for s in steps]
    assert executed[:9] == [0, 0, 0, 3, 3, 3, 0, 0, 0]
    # gamma=0: no draft forward at all; gamma=3: first pass + 2 decode passes (+ catch-up).
    assert all(s["num_draft_forwards"] == 0 for s in steps if s["num_spec_tokens"] == 0)
    assert all(s["num_draft_forwards"] >= 3 for s in steps if s["num_spec_tokens"] == 3)
    # Resuming catches up; a 90-token prompt skipped at gamma=0 needs > 1 forward
    # under the 64-token budget.
    catch_ups = [s for s in steps if s["num_catch_up_tokens"] > 0]
    assert catch_ups and all(s["num_spec_tokens"] == 3 for s in catch_ups)
    assert max(s["num_draft_forwards"] for s in catch_ups) >= 5
    resumed = [d for d in decisions if d["gamma"] == 3 and d["verified_gamma"] == 0]
    assert any(d["max_skip_tokens"] > 0 for d in resumed)


def test_ngram_method_with_forced_schedule_is_lossless(
    lossy_pair: ModelPair,
    prompts: list[list[int]],
    reference: list[list[int]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # spawned: the ngram proposer imports numba, after which vLLM can start no engine in
    # this process (see tests/engine/conftest.py)
    monkeypatch.setenv(IN_PROCESS_ENV, "1")
    outputs, stats, decisions = run_nightjar(
        lossy_pair, prompts, tmp_path / "d.jsonl", method="ngram", **FORCED_0_3
    )
    assert outputs == reference
    assert {d["gamma"] for d in decisions} == {0, 3}
    assert stats["num_skipped_steps"] > 0 and stats["num_draft_forwards"] == 0
