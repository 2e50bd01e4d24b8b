"""Offline vLLM engines for tests, benchmarks and the profiler.

One place that knows how to start a (CPU-friendly) ``vllm.LLM`` on a
generated pair, with or without Nightjar, run a batch, read the
speculative-decoding counters and shut the engine down again::

    with offline_engine(pair, NightjarConfig(policy="fixed", ...)) as llm:
        run = run_batch(llm, prompts, max_tokens=64)
        run.tokens_per_s, spec_counters(llm).acceptance_rate

Scripts that start engines need the ``if __name__ == "__main__":`` guard
(vLLM spawns its engine-core process).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from nightjar_ray.engine.args import nightjar_engine_args, with_v1_model_runner
from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.models.pair import ModelPair

CPU_DEFAULTS: dict[str, Any] = {
    "enforce_eager": True,
    "gpu_memory_utilization": 0.3,
    "kv_cache_memory_bytes": 1 << 30,
    "disable_log_stats": False,
    "seed": 0,
    "max_model_len": 1024,
}
"""Engine defaults on the 2-core CPU machines (eager: startup in ~20 s)."""
CUDA_DEFAULTS: dict[str, Any] = {"enforce_eager": False, "gpu_memory_utilization": 0.9}
"""What a GPU engine of a check or profile runs with, as the deploy files serve: CUDA
graphs captured, 90% of the GPU."""


@dataclass(frozen=True)
class ModelSources:
    """A target and its draft as vLLM loads them (local directories or model ids),
    computed in ``dtype`` (vLLM's names; ``auto``: the checkpoint's)."""

    target: str
    draft: str
    dtype: str = "auto"

    @classmethod
    def of(cls, pair: ModelPair | ModelSources) -> ModelSources:
        """``pair`` as sources (a generated pair: its directories, in its dtype)."""
        if isinstance(pair, ModelSources):
            return pair
        return cls(str(pair.target_dir), str(pair.draft_dir), pair.spec.dtype)


def engine_kwargs(
    pair: ModelPair | ModelSources,
    nightjar: NightjarConfig | None,
    *,
    method: str = "draft_model",
    stock_gamma: int | None = None,
    spec_extra: dict[str, Any] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """``vllm.LLM`` kwargs: plain (``nightjar=None, stock_gamma=None``), stock
    vLLM SD at ``stock_gamma``, or Nightjar. ``spec_extra`` adds
    ``speculative_config`` fields (e.g. ``draft_tensor_parallel_size``).

    The engine computes in the pair's dtype unless ``dtype`` is overridden.
    """
    # NOTE: vLLM's dtype "auto" downcasts float32 checkpoints to bfloat16 on x86
    # CPUs, so a float32 pair must name its dtype to be computed in float32.
    sources = ModelSources.of(pair)
    kwargs = {**CPU_DEFAULTS, "dtype": sources.dtype, **overrides, "model": sources.target}
    spec: dict[str, Any] = {"method": method, **(spec_extra or {})}
    if method == "draft_model":
        spec["model"] = sources.draft
    elif method == "ngram":
        spec.update(prompt_lookup_max=3, prompt_lookup_min=1)
    if nightjar is not None:
        return nightjar_engine_args(nightjar, speculative_config=spec, **kwargs)
    if stock_gamma is not None:
        kwargs["speculative_config"] = {**spec, "num_speculative_tokens": stock_gamma}
    return kwargs


def choose_v1_model_runner() -> None:
    """Choose vLLM's V1 model runner for engines this process starts (their engine core
    inherits the environment; ``args.with_v1_model_runner``)."""
    os.environ.update(with_v1_model_runner(dict(os.environ)))


@contextmanager
def offline_engine(
    pair: ModelPair | ModelSources, nightjar: NightjarConfig | None = None, **kwargs: Any
) -> Iterator[Any]:
    """A started ``vllm.LLM``, shut down on exit (frees its processes)."""
    from vllm import LLM

    choose_v1_model_runner()
    llm = LLM(**engine_kwargs(pair, nightjar, **kwargs))
    try:
        yield llm
    finally:
        llm.llm_engine.engine_core.shutdown()


@dataclass(frozen=True)
class BatchRun:
    """Outputs and wall time of one offline batch; ``e2e_s``: each request's time from
    entering the engine's queue to its last token (vLLM's request stats; None when the
    engine runs with ``disable_log_stats``)."""

    token_ids: list[list[int]]
    duration_s: float
    e2e_s: list[float] | None = None

    @property
    def num_tokens(self) -> int:
        return sum(len(t) for t in self.token_ids)

    @property
    def tokens_per_s(self) -> float:
        return self.num_tokens / self.duration_s


def run_batch(llm: Any, prompts: Sequence[list[int]], max_tokens: int | Sequence[int]) -> BatchRun:
    """Greedy generation of ``max_tokens`` per prompt (one value, or one per prompt)."""
    from vllm import SamplingParams

    lengths = [max_tokens] * len(prompts) if isinstance(max_tokens, int) else list(max_tokens)
    if len(lengths) != len(prompts):
        raise ValueError(f"{len(lengths)} max_tokens for {len(prompts)} prompts")
    params: Any = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lengths]
    inputs: Any = [{"prompt_token_ids": list(p)} for p in prompts]
    t0 = time.perf_counter()
    outs = llm.generate(inputs, params, use_tqdm=False)
    duration = time.perf_counter() - t0
    return BatchRun([list(o.outputs[0].token_ids) for o in outs], duration, request_e2e_s(outs))


def request_e2e_s(outs: Sequence[Any]) -> list[float] | None:
    """Per request, engine-core queue entry to last token (both monotonic, engine core's
    clock), or None when vLLM kept no request stats."""
    if any(o.metrics is None for o in outs):
        return None
    return [o.metrics.last_token_ts - o.metrics.queued_ts for o in outs]


@dataclass(frozen=True)
class SpecCounters:
    """vLLM's cumulative speculative-decoding counters."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    def __sub__(self, other: SpecCounters) -> SpecCounters:
        return SpecCounters(
            self.num_drafts - other.num_drafts,
            self.num_draft_tokens - other.num_draft_tokens,
            self.num_accepted_tokens - other.num_accepted_tokens,
        )


def spec_counters(llm: Any) -> SpecCounters:
    """Read ``vllm:spec_decode_*`` counters (needs ``disable_log_stats=False``)."""
    values = {m.name: getattr(m, "value", 0) for m in llm.get_metrics()}
    return SpecCounters(
        int(values.get("vllm:spec_decode_num_drafts", 0)),
        int(values.get("vllm:spec_decode_num_draft_tokens", 0)),
        int(values.get("vllm:spec_decode_num_accepted_tokens", 0)),
    )


def draft_stats(llm: Any) -> dict[str, Any]:
    """The first worker's :class:`DraftSyncStats` as JSON."""
    stats: dict[str, Any] = llm.collective_rpc("nightjar_draft_stats")[0]
    return stats


def random_prompts(
    num_prompts: int, num_tokens: int, vocab_size: int, seed: int
) -> list[list[int]]:
    """Distinct random token-id prompts (no shared prefix, so no cache hits)."""
    import random

    rng = random.Random(seed)
    return [[rng.randrange(2, vocab_size) for _ in range(num_tokens)] for _ in range(num_prompts)]
