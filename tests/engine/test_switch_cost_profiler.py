"""The switch-cost profiler's engine arguments per device, and what it refuses, before
any engine starts (the measurement itself: tests/engine/test_engine_profiler.py)."""

from __future__ import annotations

from typing import Any

import pytest

from nightjar_ray.engine.args import SCHEDULER_CLS, WORKER_CLS
from nightjar_ray.engine.config import ADDITIONAL_CONFIG_KEY
from nightjar_ray.engine.switch_cost_profiler import (
    PROFILE_NUM_SPECULATIVE_TOKENS,
    ProfileGrid,
    ProfilerEngine,
    engine_kwargs,
)

GRID = ProfileGrid(skip_tokens=(16, 256), batch_sizes=(1, 8), repeats=1)


def _kwargs(**engine: Any) -> dict[str, Any]:
    return engine_kwargs(ProfilerEngine("org/target", "org/draft", **engine), GRID)


def test_cpu_defaults_are_eager_with_a_small_memory_share() -> None:
    kwargs = _kwargs(device="cpu")
    assert kwargs["enforce_eager"] is True
    assert kwargs["gpu_memory_utilization"] == 0.3
    assert kwargs["kv_cache_memory_bytes"] == 1 << 30


def test_cuda_defaults_capture_graphs_and_use_most_of_the_gpu() -> None:
    kwargs = _kwargs(device="cuda")
    assert kwargs["enforce_eager"] is False
    assert kwargs["gpu_memory_utilization"] == 0.9
    assert "kv_cache_memory_bytes" not in kwargs


def test_the_pair_and_tp_size_pass_through_with_the_profilers_nightjar_engine() -> None:
    kwargs = _kwargs(device="cuda", tensor_parallel_size=2)
    assert kwargs["model"] == "org/target" and kwargs["tensor_parallel_size"] == 2
    assert kwargs["speculative_config"] == {
        "method": "draft_model",
        "model": "org/draft",
        "num_speculative_tokens": PROFILE_NUM_SPECULATIVE_TOKENS,
        "draft_tensor_parallel_size": 2,
    }
    assert kwargs["scheduler_cls"] == SCHEDULER_CLS and kwargs["worker_cls"] == WORKER_CLS
    nightjar = kwargs["additional_config"][ADDITIONAL_CONFIG_KEY]
    assert nightjar["testing"]["forced_gammas"] == [0, 0, 0, 0, 1]
    assert nightjar["elastic_memory"]["enabled"] is False
    assert kwargs["enable_prefix_caching"] is False


def test_engine_args_win_over_the_device_defaults_and_keep_speculative_extras() -> None:
    spec = {"quantization": "fp8"}
    kwargs = _kwargs(
        device="cuda",
        engine_args={"enforce_eager": True, "dtype": "bfloat16", "speculative_config": spec},
    )
    assert kwargs["enforce_eager"] is True and kwargs["dtype"] == "bfloat16"
    assert kwargs["speculative_config"]["quantization"] == "fp8"
    assert kwargs["speculative_config"]["model"] == "org/draft"


def test_engine_sizes_are_raised_to_what_the_grid_needs_never_lowered() -> None:
    minimums = GRID.engine_minimums()
    assert minimums == {
        "max_num_batched_tokens": 256 * 8 + 8,
        "max_num_seqs": 8,
        "max_model_len": 288,
    }
    small = _kwargs(device="cuda", engine_args={"max_num_seqs": 2, "max_model_len": 64})
    assert {k: small[k] for k in minimums} == minimums
    large = _kwargs(device="cuda", engine_args={"max_num_seqs": 256, "max_model_len": 8192})
    assert large["max_num_seqs"] == 256 and large["max_model_len"] == 8192


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        ({"tensor_parallel_size": 0}, "tensor_parallel_size must be >= 1, got 0"),
        ({"device": "tpu"}, "device must be one of cpu, cuda, got 'tpu'"),
        ({"engine_args": {"model": "x"}}, "engine arg 'model' is set by the profiler"),
        (
            {"engine_args": {"enable_prefix_caching": True}},
            "engine arg 'enable_prefix_caching' is set by the profiler",
        ),
        (
            {"engine_args": {"speculative_config": {"num_speculative_tokens": 4}}},
            r"engine arg 'speculative_config.num_speculative_tokens' is set by the profiler",
        ),
        (
            {"engine_args": {"speculative_config": "draft"}},
            "engine arg 'speculative_config' must be a mapping",
        ),
    ],
)
def test_bad_engines_are_refused_naming_the_field(engine: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProfilerEngine("org/target", "org/draft", **engine)


def test_a_pair_needs_both_models() -> None:
    with pytest.raises(ValueError, match="target and draft must both name a model"):
        ProfilerEngine("org/target", "")


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ({"repeats": 0}, "repeats must be >= 1"),
        ({"skip_tokens": ()}, "skip_tokens must be non-empty and >= 1"),
        ({"batch_sizes": (0, 4)}, "batch_sizes must be non-empty and >= 1"),
    ],
)
def test_grid_refuses_empty_or_non_positive_values(grid: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProfileGrid(**grid)
