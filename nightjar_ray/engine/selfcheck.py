"""The self-check a user runs once on their node with their target/draft pair.

One stock vLLM engine (the target, no speculation) decodes the reference; then one
Nightjar engine per check runs the same prompts greedily::

    lossless         the product's policy            outputs == stock
    gamma-schedule   forced gammas 0,1,0,2,..,0,K     outputs == stock, catch-ups ran
    graph-modes      no engine: vLLM's config and     FULL graphs where due at every
                     dispatcher (selfcheck_graphs)    gamma under nightjar.cuda_graphs
    elastic-cycles   the memory controller on a       outputs == stock, pool back at
                     small pool, under load           stock, committed <= stock, draft
                                                      weights bit-identical on reload
    event-latency    (the elastic run's events)       next to the paper's Table 6
    switch-cost      a profiler engine                the CSV loads as a profile
                     (selfcheck_switch_cost)

Every engine but the switch-cost profiler's uses one small geometry (``SELFCHECK_ENGINE``:
a pool of a few blocks that a batch of ``LOAD_PROMPT_LENGTHS`` prompts fills), so the
memory controller expands and contracts on any model, and the lines judge the figures
(``engine/selfcheck_report.py``).
The graph-modes check imports vLLM when it runs (this module does not). Scripts that
call :func:`run_selfcheck` need the ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

from nightjar_ray.engine.config import CudaGraphs, NightjarConfig
from nightjar_ray.engine.offline import (
    CUDA_DEFAULTS,
    ModelSources,
    draft_stats,
    offline_engine,
    random_prompts,
    run_batch,
)
from nightjar_ray.engine.selfcheck_report import (
    CheckLine,
    SelfCheckReport,
    elastic_line,
    error_line,
    gamma_schedule_line,
    guarded,
    latency_line,
    lossless_line,
)
from nightjar_ray.engine.selfcheck_switch_cost import (
    SELFCHECK_GRID,
    profile_to_csv,
    profiler_of,
    switch_cost_line,
)
from nightjar_ray.engine.switch_cost_profiler import ProfileGrid
from nightjar_ray.engine.testing_config import TestingConfig

Device = Literal["cpu", "cuda"]
CHECK_NAMES = (
    "lossless",
    "gamma-schedule",
    "graph-modes",
    "elastic-cycles",
    "event-latency",
    "switch-cost",
)
REFERENCE_CHECKS = ("lossless", "gamma-schedule", "elastic-cycles", "event-latency")
"""The checks that compare with stock vLLM's outputs (or run with those that do)."""
SWITCH_COST_FILE = "switch-cost.csv"
LOAD_PROMPT_LENGTHS = (
    40,
    90,
    17,
    64,
    33,
    75,
    50,
    88,
    21,
    60,
    45,
    70,
    12,
    80,
    36,
    55,
    27,
    66,
    8,
    95,
)
"""Prompt lengths (tokens) that, 48 tokens each generated, hold more KV than
``SELFCHECK_ENGINE``'s pool at once: requests wait for blocks."""
SELFCHECK_ENGINE: dict[str, Any] = {
    "max_num_seqs": 8,
    "max_num_batched_tokens": 64,
    "max_model_len": 256,
    "block_size": 32,
    "num_gpu_blocks_override": 36,
}
"""A 36-block pool of 32 tokens that 8 running requests fill, and a 64-token step budget
(long prompts are chunked and share steps with decodes)."""
GPU_DEFAULTS: dict[str, Any] = {**CUDA_DEFAULTS, "kv_cache_memory_bytes": None}
"""What replaces the offline engine's CPU defaults on a GPU (CUDA graphs captured)."""
ELASTIC = {
    "enabled": True,
    "tau_low_fraction": 0.3,
    "expand_persist_steps": 2,
    "contract_persist_steps": 2,
}
"""The memory controller with short persistence: scarce at 11 free blocks of 36."""


@dataclass(frozen=True)
class SelfCheckSetup:
    """What the self-check runs on (``to_json`` goes into the report)."""

    models: ModelSources
    device: Device = "cpu"
    tensor_parallel_size: int = 1
    num_prompts: int = len(LOAD_PROMPT_LENGTHS)
    max_tokens: int = 48
    num_speculative_tokens: int = 3
    seed: int = 0
    cuda_graphs: CudaGraphs = "stock"
    """``nightjar.cuda_graphs`` of every Nightjar engine of the check (GPU only)."""
    switch_cost_grid: ProfileGrid = SELFCHECK_GRID
    engine_overrides: dict[str, Any] = field(default_factory=dict)
    """``vllm.LLM`` kwargs over the self-check's own (``SELFCHECK_ENGINE``, device defaults)."""
    testing: TestingConfig = field(default_factory=TestingConfig)
    """Switches every Nightjar engine of the check gets (the self-check's tests inject
    faults here)."""

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        if self.num_speculative_tokens < 1:
            raise ValueError(
                f"num_speculative_tokens must be >= 1, got {self.num_speculative_tokens}"
            )
        if not 8 <= self.num_prompts <= 1000:
            raise ValueError(
                f"num_prompts must be in [8, 1000] (8 fill the pool), got {self.num_prompts}"
            )
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

    def engine_kwargs(self) -> dict[str, Any]:
        """``offline_engine`` kwargs every engine of the check shares."""
        device = GPU_DEFAULTS if self.device == "cuda" else {}
        tp = {"tensor_parallel_size": self.tensor_parallel_size}
        return {**device, **SELFCHECK_ENGINE, **tp, "seed": self.seed, **self.engine_overrides}

    def spec_extra(self) -> dict[str, Any]:
        """``speculative_config`` fields of the Nightjar engines (the draft's TP is the
        target's, as vLLM 0.32 needs)."""
        extra: dict[str, Any] = {"num_speculative_tokens": self.num_speculative_tokens}
        if self.tensor_parallel_size > 1:
            extra["draft_tensor_parallel_size"] = self.tensor_parallel_size
        return extra

    def gamma_schedule(self) -> list[int]:
        """0 before every gamma 1..K: each resume catches the draft up."""
        return [g for gamma in range(1, self.num_speculative_tokens + 1) for g in (0, gamma)]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["testing"] = self.testing.model_dump(exclude_defaults=True)
        return out


@dataclass(frozen=True)
class Reference:
    """The prompts and stock vLLM's greedy outputs for them."""

    prompts: list[list[int]]
    token_ids: list[list[int]]


def stock_reference(setup: SelfCheckSetup) -> Reference:
    """Random prompts over the target's vocabulary, decoded by stock vLLM (no speculation)."""
    with offline_engine(setup.models, None, **setup.engine_kwargs()) as llm:
        vocab_size = int(llm.llm_engine.model_config.get_vocab_size())
        prompts = [
            random_prompts(
                1,
                LOAD_PROMPT_LENGTHS[i % len(LOAD_PROMPT_LENGTHS)],
                vocab_size,
                seed=setup.seed + i,
            )[0]
            for i in range(setup.num_prompts)
        ]
        return Reference(prompts, run_batch(llm, prompts, setup.max_tokens).token_ids)


def _nightjar(setup: SelfCheckSetup, testing: dict[str, Any], **config: Any) -> NightjarConfig:
    """A Nightjar config with ``testing`` over the setup's switches."""
    merged = TestingConfig(**{**setup.testing.model_dump(exclude_defaults=True), **testing})
    return NightjarConfig(testing=merged, cuda_graphs=setup.cuda_graphs, **config)


def _engine(setup: SelfCheckSetup, config: NightjarConfig) -> AbstractContextManager[Any]:
    """A Nightjar engine of the setup, shut down on exit."""
    return offline_engine(
        setup.models, config, spec_extra=setup.spec_extra(), **setup.engine_kwargs()
    )


def check_lossless(setup: SelfCheckSetup, reference: Reference) -> CheckLine:
    """The product's default policy."""
    config = _nightjar(setup, {})
    with _engine(setup, config) as llm:
        outputs = run_batch(llm, reference.prompts, setup.max_tokens).token_ids
    return lossless_line("lossless", outputs, reference.token_ids)


def check_gamma_schedule(setup: SelfCheckSetup, reference: Reference) -> CheckLine:
    """``gamma_schedule()`` forced, 3 steps per entry."""
    schedule = setup.gamma_schedule()
    config = _nightjar(setup, {"forced_gammas": schedule, "forced_steps_per_gamma": 3})
    with _engine(setup, config) as llm:
        outputs = run_batch(llm, reference.prompts, setup.max_tokens).token_ids
        stats = draft_stats(llm)
    return gamma_schedule_line("gamma-schedule", outputs, reference.token_ids, stats, schedule)


def check_elastic(setup: SelfCheckSetup, reference: Reference) -> list[CheckLine]:
    """The memory controller under a forced 0/K schedule (6 steps each), the prompts run
    twice (the second run on a reloaded draft), weights checked on every reload; the
    elastic-cycles and event-latency lines."""
    testing = {"forced_gammas": [0, setup.num_speculative_tokens], "forced_steps_per_gamma": 6}
    config = _nightjar(setup, {**testing, "self_check": True}, elastic_memory=ELASTIC)
    with _engine(setup, config) as llm:
        runs = [run_batch(llm, reference.prompts, setup.max_tokens).token_ids for _ in range(2)]
        ranks: list[dict[str, Any]] = llm.collective_rpc("nightjar_memory_stats")
    return [
        guarded(
            "elastic-cycles",
            lambda: elastic_line("elastic-cycles", runs, reference.token_ids, ranks),
        ),
        guarded("event-latency", lambda: latency_line("event-latency", ranks)),
    ]


def check_graph_modes(setup: SelfCheckSetup) -> CheckLine:
    """The graph per gamma of the Nightjar engines' config, as a CUDA host builds it (the
    GPU defaults under the user's kwargs); no engine starts."""
    import torch

    from nightjar_ray.engine.selfcheck_graphs import engine_config, graph_modes, graph_modes_line

    on_cuda_host = setup.device == "cuda" and torch.cuda.is_available()
    kwargs = replace(setup, device="cuda").engine_kwargs()
    config = engine_config(setup.models, setup.cuda_graphs, setup.spec_extra(), kwargs)
    figures = graph_modes(config, setup.cuda_graphs, on_cuda_host=on_cuda_host)
    return graph_modes_line("graph-modes", figures, setup.device)


def check_switch_cost(setup: SelfCheckSetup, out: Path) -> CheckLine:
    """C_switch profiled on the setup's pair, device and TP over its grid, saved to ``out``."""
    engine = profiler_of(
        setup.models,
        setup.device,
        setup.tensor_parallel_size,
        setup.seed,
        setup.engine_overrides,
    )
    profile_to_csv(engine, setup.switch_cost_grid, out)
    return switch_cost_line("switch-cost", out, setup.switch_cost_grid)


def run_selfcheck(
    setup: SelfCheckSetup,
    checks: Sequence[str] = CHECK_NAMES,
    say: Callable[[str], None] = lambda _: None,
    out_dir: Path | None = None,
) -> SelfCheckReport:
    """Run ``checks`` (names of ``CHECK_NAMES``) on ``setup``; ``say`` hears progress.
    ``out_dir``: where the switch-cost check writes ``SWITCH_COST_FILE``."""
    unknown = sorted(set(checks) - set(CHECK_NAMES))
    if unknown:
        raise ValueError(f"unknown checks {unknown}; choose from {', '.join(CHECK_NAMES)}")
    if "switch-cost" in checks and out_dir is None:
        raise ValueError("out_dir must be given for the switch-cost check")
    lines: dict[str, CheckLine] = {}
    if "graph-modes" in checks:
        say("graph-modes...")
        lines["graph-modes"] = guarded("graph-modes", partial(check_graph_modes, setup))
    if set(REFERENCE_CHECKS) & set(checks):
        lines.update((line.name, line) for line in _reference_lines(setup, checks, say))
    if "switch-cost" in checks:
        assert out_dir is not None
        say("switch-cost (profiling C_switch)...")
        check = partial(check_switch_cost, setup, out_dir / SWITCH_COST_FILE)
        lines["switch-cost"] = guarded("switch-cost", check)
    ordered = tuple(lines[name] for name in CHECK_NAMES if name in lines)
    return SelfCheckReport(ordered, setup.to_json())


def _reference_lines(
    setup: SelfCheckSetup, checks: Sequence[str], say: Callable[[str], None]
) -> list[CheckLine]:
    """The lines of ``REFERENCE_CHECKS`` in ``checks``; each fails if stock vLLM did."""
    say("stock vLLM (reference)...")
    try:
        reference = stock_reference(setup)
    except Exception as e:  # every line that needs it reports it
        return [error_line(name, e) for name in REFERENCE_CHECKS if name in checks]
    lines: list[CheckLine] = []
    for name, check in (("lossless", check_lossless), ("gamma-schedule", check_gamma_schedule)):
        if name in checks:
            say(f"{name}...")
            lines.append(guarded(name, partial(check, setup, reference)))
    if {"elastic-cycles", "event-latency"} & set(checks):
        say("elastic-cycles...")
        lines.extend(line for line in _elastic_lines(setup, reference) if line.name in checks)
    return lines


def _elastic_lines(setup: SelfCheckSetup, reference: Reference) -> list[CheckLine]:
    """Both lines of the elastic run; each fails with the run's error if it raised."""
    try:
        return check_elastic(setup, reference)
    except Exception as e:  # reported on its lines
        return [error_line("elastic-cycles", e), error_line("event-latency", e)]
