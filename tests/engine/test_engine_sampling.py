"""Sampled outputs (temperature > 0) follow the target's distribution under speculation.

What it checks: a Nightjar engine on the lossy pair, its gamma forced through 0, 1, 2
and 3 step by step (so tokens come from plain steps, verifications of 1-3 draft
tokens with accepted, rejected-and-resampled and bonus tokens, and verifications right
after a catch-up of the draft KV), samples ``NUM_SAMPLES`` continuations of one prompt,
one seed per request. Every output token after the first (the first is sampled by the
target at prefill, without speculation) is a draw from the target's next-token
distribution given the prompt and the tokens before it, if speculation is lossless.

The test: group the draws by their context (the output tokens before them). In every
context with enough draws, a Pearson chi-square goodness-of-fit compares the counts of
the next token with the target's own probabilities, computed by an independent forward
of the target (Hugging Face transformers, float32) at the same temperature; tokens
expected fewer than ``MIN_EXPECTED`` times are pooled into one bin. Given the number of
draws in a context, its next tokens are independent draws from that context's
distribution, so the per-context statistics add up to one chi-square whose degrees of
freedom are the sum of theirs. The first token is not tested (only conditioned on).

The draft proposes greedily (vLLM's default) or samples from its own distribution
(``draft_sample_method: probabilistic``), and the test runs both.

Why it can fail: the negative control samples the same prompt with the same parameters
from a plain engine on the draft model, and the same statistic at the same thresholds
must reject it (p < 1e-6, while the speculative run must give p > 1e-3). A draft token
that bypasses or skews the rejection sampling pulls the counts toward the draft's
distribution, which that control shows the test sees. A plain engine on the target
checks the calibration: vLLM's own sampler passes. Temperature 0.05 sharpens the tiny
pair's near-uniform logits (at 1.0 both models are close to uniform), so the target
accepts the draft's greedy proposals about half the time and the two distributions
differ clearly (total variation ~0.24 in the most frequent tested context). Seeds are
fixed per request, so each run draws the same tokens.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import draft_stats, offline_engine, random_prompts, spec_counters
from nightjar_ray.engine.testing_config import TestingConfig
from nightjar_ray.models.pair import ModelPair

from .conftest import SPEC_EXTRA

pytestmark = pytest.mark.engine

TEMPERATURE = 0.05
NUM_SAMPLES = 1000
NUM_OUTPUT_TOKENS = 4
MIN_EXPECTED = 5.0
"""Smallest expected count of a bin; rarer tokens are pooled."""
SPEC_ALPHA = 1e-3
"""The speculative and the plain target runs must give p above this."""
CONTROL_P_MAX = 1e-6
"""The draft's samples must give p below this."""
SAMPLING_ENGINE = {
    "max_num_seqs": 32,
    "max_num_batched_tokens": 512,
    "max_model_len": 256,
    "kv_cache_memory_bytes": 32 << 20,
}
"""A step budget no batch of 8-token prompts and decodes fills: prefills are never
chunked. (vLLM 0.32 rewinds the seeded generator of a request whose chunk's sample is
discarded, and a CPU generator has no offset to rewind: the engine dies.)"""
FORCED = TestingConfig(
    forced_gammas=[0, 2, 0, 0, 1, 3],
    forced_steps_per_gamma=1,
    forced_undrafted_cycle=2,
    forced_undrafted_steps=1,
)
"""Every gamma in [0, 3], and resumes after one and after two gamma = 0 steps; every
other request is left out of the draft, alternating each step (per-request eligibility
switching in and out, with catch-ups when a request is drafted again)."""

Samples = list[tuple[int, ...]]
TargetProbs = Callable[[Sequence[tuple[int, ...]]], np.ndarray]
"""Contexts (output tokens after the prompt, all of one length) -> next-token
probabilities at ``TEMPERATURE``, one row per context."""


@dataclass(frozen=True)
class GoodnessOfFit:
    """The summed chi-square of the tested contexts."""

    statistic: float
    dof: int
    pvalue: float
    num_contexts: int
    num_draws: int


@pytest.fixture(scope="module")
def prompt(lossy_pair: ModelPair) -> list[int]:
    return random_prompts(1, 8, lossy_pair.spec.vocab_size, seed=3)[0]


@pytest.fixture(scope="module")
def target_probs(lossy_pair: ModelPair, prompt: list[int]) -> TargetProbs:
    """The target's exact next-token probabilities, from a forward outside vLLM."""
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(lossy_pair.target_dir, dtype=torch.float32).eval()

    def probs(contexts: Sequence[tuple[int, ...]]) -> np.ndarray:
        with torch.no_grad():
            logits = model(torch.tensor([[*prompt, *c] for c in contexts])).logits[:, -1]
        result: np.ndarray = (logits.double() / TEMPERATURE).softmax(-1).numpy()
        return result

    return probs


def sample(llm: Any, prompt: list[int], first_seed: int) -> Samples:
    """``NUM_SAMPLES`` seeded continuations of ``prompt``, decoded as one batch."""
    from vllm import SamplingParams

    params = [
        SamplingParams(
            temperature=TEMPERATURE,
            max_tokens=NUM_OUTPUT_TOKENS,
            ignore_eos=True,
            seed=first_seed + i,
        )
        for i in range(NUM_SAMPLES)
    ]
    inputs: Any = [{"prompt_token_ids": prompt}] * NUM_SAMPLES
    outputs = llm.generate(inputs, params, use_tqdm=False)
    samples = [tuple(o.outputs[0].token_ids) for o in outputs]
    assert all(len(s) == NUM_OUTPUT_TOKENS for s in samples)
    return samples


def context_bins(
    next_tokens: list[int], probs: np.ndarray
) -> tuple[list[float], list[float]] | None:
    """Observed and expected counts of one context's next tokens: a bin per token
    expected at least ``MIN_EXPECTED`` times, the rest pooled (into the smallest bin
    if the pool alone is expected less). None: fewer than two bins."""
    n = len(next_tokens)
    kept = [int(t) for t in np.argsort(-probs) if n * probs[t] >= MIN_EXPECTED]
    if not kept:
        return None
    counts = collections.Counter(next_tokens)
    observed = [float(counts[t]) for t in kept]
    expected = [n * float(probs[t]) for t in kept]
    rest_observed, rest_expected = n - sum(observed), n - sum(expected)
    if rest_expected >= MIN_EXPECTED:
        observed.append(rest_observed)
        expected.append(rest_expected)
    else:
        observed[-1] += rest_observed
        expected[-1] += rest_expected
    return (observed, expected) if len(observed) > 1 else None


def conditional_chisquare(samples: Samples, target_probs: TargetProbs) -> GoodnessOfFit:
    """Next-token counts against the target's probabilities, per context, summed."""
    from scipy import stats

    statistic, dof, num_contexts, num_draws = 0.0, 0, 0, 0
    for position in range(1, NUM_OUTPUT_TOKENS):
        draws: dict[tuple[int, ...], list[int]] = collections.defaultdict(list)
        for s in samples:
            draws[s[:position]].append(s[position])
        contexts = [c for c, d in draws.items() if len(d) >= 2 * MIN_EXPECTED]
        if not contexts:
            continue
        for context, probs in zip(contexts, target_probs(contexts), strict=True):
            bins = context_bins(draws[context], probs)
            if bins is None:
                continue
            observed, expected = bins
            statistic += float(stats.chisquare(observed, expected).statistic)
            dof += len(observed) - 1
            num_contexts += 1
            num_draws += len(draws[context])
    pvalue = float(stats.chi2.sf(statistic, dof))
    return GoodnessOfFit(statistic, dof, pvalue, num_contexts, num_draws)


@pytest.fixture(scope="module", params=["greedy", "probabilistic"])
def speculative_run(
    request: pytest.FixtureRequest,
    lossy_pair: ModelPair,
    prompt: list[int],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Samples, dict[str, Any], Any]:
    """Samples, draft-sync stats and spec-decode counters of the forced-gamma engine, its
    draft proposing greedily or sampling from its own distribution
    (``draft_sample_method``: the rejection sampler then uses the drafted rows' full
    probabilities, which the partial-batch drafter hands over keyed by req_id)."""
    log = Path(tmp_path_factory.mktemp("sampling")) / "decisions.jsonl"
    config = NightjarConfig(decision_log_path=str(log), testing=FORCED)
    spec = {**SPEC_EXTRA, "draft_sample_method": request.param}
    with offline_engine(lossy_pair, config, spec_extra=spec, **SAMPLING_ENGINE) as llm:
        return sample(llm, prompt, first_seed=0), draft_stats(llm), spec_counters(llm)


def test_speculative_sampling_follows_the_target(
    speculative_run: tuple[Samples, dict[str, Any], Any], target_probs: TargetProbs
) -> None:
    samples, stats, counters = speculative_run
    executed = [s["num_spec_tokens"] for s in stats["steps"]]
    assert set(executed) == {0, 1, 2, 3}
    assert any(s["num_catch_up_tokens"] > 0 for s in stats["steps"])
    assert stats["num_partial_steps"] > 0  # steps drafting part of the batch
    fit = conditional_chisquare(samples, target_probs)
    assert fit.num_draws >= NUM_SAMPLES
    assert fit.pvalue > SPEC_ALPHA, fit
    # both paths of the rejection sampler ran: accepted drafts and resampled tokens
    assert 0.2 < counters.acceptance_rate < 0.9, counters


def test_draft_samples_are_rejected(
    lossy_pair: ModelPair, prompt: list[int], target_probs: TargetProbs
) -> None:
    """The negative control: the draft's distribution fails the same test."""
    draft_only = replace(lossy_pair, target_dir=lossy_pair.draft_dir)
    with offline_engine(draft_only, None, **SAMPLING_ENGINE) as llm:
        samples = sample(llm, prompt, first_seed=NUM_SAMPLES)
    fit = conditional_chisquare(samples, target_probs)
    assert fit.num_draws >= NUM_SAMPLES
    assert fit.pvalue < CONTROL_P_MAX, fit


def test_plain_target_sampling_passes(
    lossy_pair: ModelPair, prompt: list[int], target_probs: TargetProbs
) -> None:
    """The calibration: vLLM's sampler without speculation passes the same test."""
    with offline_engine(lossy_pair, None, **SAMPLING_ENGINE) as llm:
        samples = sample(llm, prompt, first_seed=2 * NUM_SAMPLES)
    fit = conditional_chisquare(samples, target_probs)
    assert fit.num_draws >= NUM_SAMPLES
    assert fit.pvalue > SPEC_ALPHA, fit
