"""Measure C_switch(L_max, B) on a real engine: the profile ``switch_cost_profile`` reads.

The paper (§4.2, Table 3) profiles the switch cost as T_SD - T_base: the prefill time
with the draft running minus without it. In this engine that difference *is* the draft
catch-up forward, so the profiler times the catch-up itself, on the real code path::

    engine: NightjarConfig(testing={forced_gammas: [0, 0, 0, 0, 1]})  (PROFILE_CONFIG)
    for each (L, B), repeated:
      submit B fresh random prompts of exactly L tokens (max_tokens=12)
        gamma=0 steps: target prefill (and a few decodes); draft skipped
        next gamma=1 step: the worker catches up all B requests (timed)
      C_switch(L, B) = median wall time of the first catch-up that covers
                       all B requests with >= L tokens each (worker clock),
                       after one unrecorded pass over the whole grid

The four gamma=0 steps absorb vLLM's request arrival (a batch is not always admitted in
one step); the decodes at gamma=0 after the prefill make each lag L to L+4 tokens
(recorded at L).

>>> engine = ProfilerEngine("Qwen/Qwen2.5-32B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct",
...                         device="cuda", tensor_parallel_size=2)
>>> grid = ProfileGrid()
>>> with profiler_engine(engine, grid) as llm:            # doctest: +SKIP
...     table = profile_switch_cost(llm, grid, progress=print)
>>> table.save("switch-cost.csv")                          # doctest: +SKIP
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from nightjar_ray.engine.args import nightjar_engine_args
from nightjar_ray.engine.config import ElasticMemoryConfig, NightjarConfig
from nightjar_ray.engine.offline import (
    CPU_DEFAULTS,
    CUDA_DEFAULTS,
    choose_v1_model_runner,
    draft_stats,
    random_prompts,
    run_batch,
)
from nightjar_ray.engine.testing_config import TestingConfig
from nightjar_ray.policy import SwitchCostTable

Device = Literal["cpu", "cuda"]
DEVICES: tuple[Device, ...] = ("cpu", "cuda")

PROFILE_CONFIG = NightjarConfig(
    draft_sync="catch-up",
    elastic_memory=ElasticMemoryConfig(enabled=False),
    testing=TestingConfig(forced_gammas=[0, 0, 0, 0, 1], forced_steps_per_gamma=1),
)
"""The Nightjar config of the profiled engine: four gamma=0 steps, one gamma=1 step; the
draft stays resident (every measured catch-up needs it)."""
PROFILE_NUM_SPECULATIVE_TOKENS = 1
"""The profiled engine's largest gamma (it plays 0 and 1)."""
MAX_TOKENS = 12
"""Output tokens per profiled request: the gamma=0 phase, the catch-up step, a margin."""

DEVICE_DEFAULTS: dict[Device, dict[str, Any]] = {
    "cpu": dict(CPU_DEFAULTS),
    "cuda": {**CUDA_DEFAULTS, "disable_log_stats": False, "seed": 0},
}
"""Engine kwargs per device, under the caller's: CPU as the tests run (eager, a 1 GiB KV
cache); CUDA as the deploy files serve (CUDA graphs captured, 90% of the GPU)."""

PROFILER_OWNED = (
    "model",
    "tensor_parallel_size",
    "enable_prefix_caching",
    "scheduler_cls",
    "worker_cls",
)
"""Engine kwargs only the profiler sets (target, TP, no prefix cache, Nightjar's classes)."""
PROFILER_OWNED_SPEC = ("method", "model", "num_speculative_tokens", "draft_tensor_parallel_size")
"""``speculative_config`` fields the profiler sets (the draft, gammas 0..1, draft TP = TP)."""
SIZING_KEYS = ("max_num_batched_tokens", "max_num_seqs", "max_model_len")
"""Engine kwargs the grid needs at least (raised to :meth:`ProfileGrid.engine_minimums`)."""


@dataclass(frozen=True)
class ProfileGrid:
    """Grid of effective skip lengths (L_max, tokens) and batch sizes (B, requests)."""

    skip_tokens: tuple[int, ...] = (16, 64, 256, 512)
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    repeats: int = 3

    def __post_init__(self) -> None:
        if not self.skip_tokens or min(self.skip_tokens) < 1:
            raise ValueError("skip_tokens must be non-empty and >= 1")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ValueError("batch_sizes must be non-empty and >= 1")
        if self.repeats < 1:
            raise ValueError("repeats must be >= 1")

    def engine_minimums(self) -> dict[str, int]:
        """The smallest :data:`SIZING_KEYS` that prefill the largest point in one step."""
        max_batch = max(self.batch_sizes)
        return {
            "max_num_batched_tokens": max(self.skip_tokens) * max_batch + max_batch,
            "max_num_seqs": max_batch,
            "max_model_len": max(self.skip_tokens) + MAX_TOKENS + 20,
        }


@dataclass(frozen=True)
class ProfilerEngine:
    """What the profiled engine runs: a target and draft (local directory or a model id
    vLLM loads, passed through unchanged), the device whose defaults apply, the tensor
    parallel size (the draft's equals it, as vLLM 0.32 requires), and engine kwargs over
    the device defaults. ``engine_args`` may hold ``speculative_config`` fields other than
    :data:`PROFILER_OWNED_SPEC`; keys in :data:`PROFILER_OWNED` are refused."""

    target: str
    draft: str
    device: Device = "cpu"
    tensor_parallel_size: int = 1
    engine_args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.target or not self.draft:
            raise ValueError("target and draft must both name a model")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if isinstance(self.tensor_parallel_size, bool) or self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        owned = [k for k in self.engine_args if k in PROFILER_OWNED]
        if owned:
            raise ValueError(f"engine arg {owned[0]!r} is set by the profiler; do not pass it")
        spec = self.engine_args.get("speculative_config") or {}
        if not isinstance(spec, Mapping):
            raise ValueError(f"engine arg 'speculative_config' must be a mapping, got {spec!r}")
        owned = [k for k in spec if k in PROFILER_OWNED_SPEC]
        if owned:
            raise ValueError(
                f"engine arg 'speculative_config.{owned[0]}' is set by the profiler; do not pass it"
            )


def engine_kwargs(engine: ProfilerEngine, grid: ProfileGrid) -> dict[str, Any]:
    """``vllm.LLM`` kwargs: device defaults < ``engine.engine_args`` < what the profile
    needs (:data:`PROFILER_OWNED`, sizes raised to the grid's minimums)."""
    args = dict(engine.engine_args)
    spec = {
        **dict(args.pop("speculative_config", None) or {}),
        "method": "draft_model",
        "model": engine.draft,
        "num_speculative_tokens": PROFILE_NUM_SPECULATIVE_TOKENS,
        "draft_tensor_parallel_size": engine.tensor_parallel_size,
    }
    kwargs = {**DEVICE_DEFAULTS[engine.device], **args}
    for key, least in grid.engine_minimums().items():
        kwargs[key] = max(int(kwargs.get(key, least)), least)
    kwargs.update(
        model=engine.target,
        tensor_parallel_size=engine.tensor_parallel_size,
        enable_prefix_caching=False,
    )
    return nightjar_engine_args(PROFILE_CONFIG, speculative_config=spec, **kwargs)


def check_engine_arg_names(names: Iterable[str]) -> None:
    """``ValueError`` naming the first of ``names`` that is not a vLLM engine argument."""
    names = list(names)
    if not names:
        return
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    known = {f.name for f in dataclasses.fields(EngineArgs)}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"engine arg {unknown[0]!r} is not a vLLM engine argument")


@contextmanager
def profiler_engine(engine: ProfilerEngine, grid: ProfileGrid) -> Iterator[Any]:
    """A started ``vllm.LLM`` for :func:`profile_switch_cost`, shut down on exit."""
    from vllm import LLM

    choose_v1_model_runner()
    llm = LLM(**engine_kwargs(engine, grid))
    try:
        yield llm
    finally:
        llm.llm_engine.engine_core.shutdown()


def engine_vocab_size(llm: Any) -> int:
    """The served model's vocabulary size (random prompt ids stay below it)."""
    return int(llm.model_config.get_vocab_size())


def _catch_up_s(llm: Any, skip: int, batch: int) -> float | None:
    """Time of the first catch-up covering ``batch`` requests, >= ``skip`` each."""
    for step in draft_stats(llm)["steps"]:
        if step["num_catch_up_reqs"] == batch and step["num_catch_up_tokens"] >= skip * batch:
            return float(step["catch_up_s"])
    return None


def measure_point(
    llm: Any, skip: int, batch: int, vocab_size: int, seed: int, max_tries: int = 3
) -> float:
    """One C_switch sample in seconds for ``batch`` requests lagging ``skip`` tokens."""
    for attempt in range(max_tries):
        llm.collective_rpc("nightjar_reset_draft_stats")
        prompts = random_prompts(batch, skip, vocab_size, seed * 1000 + attempt)
        run_batch(llm, prompts, max_tokens=MAX_TOKENS)
        cost = _catch_up_s(llm, skip, batch)
        if cost is not None:
            return cost
    raise RuntimeError(f"no catch-up of {batch} requests x {skip} tokens observed")


def profile_switch_cost(
    llm: Any,
    grid: ProfileGrid,
    vocab_size: int | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> SwitchCostTable:
    """Measure the grid on ``llm``, an engine started with :data:`PROFILE_CONFIG` (as
    :func:`profiler_engine` starts it). Random prompt ids stay below ``vocab_size``
    (default: the engine's). ``progress`` gets one line per grid point."""
    vocab = engine_vocab_size(llm) if vocab_size is None else vocab_size
    # NOTE: the first run of each new shape pays one-off kernel set-up (several
    # ms on CPU), so the whole grid runs once unrecorded before measuring.
    for skip in grid.skip_tokens:
        for batch in grid.batch_sizes:
            measure_point(llm, skip, batch, vocab, seed=0)
    rows: list[tuple[int, int, float]] = []
    for skip in grid.skip_tokens:
        for batch in grid.batch_sizes:
            samples = [
                measure_point(llm, skip, batch, vocab, seed=r + 1) for r in range(grid.repeats)
            ]
            cost_ms = statistics.median(samples) * 1e3
            progress(f"L_max={skip:5d} B={batch:3d} C_switch={cost_ms:8.3f} ms")
            rows.append((skip, batch, cost_ms))
    return SwitchCostTable.from_rows(rows)
