"""``elastic_memory.enabled``: "auto" by default, resolved once for the engine's device
(``resolve_elastic_memory``); ``true`` where elastic memory cannot run is an error naming
the field. Devices without a KV arena are tested here by their device type."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from nightjar_ray.engine import NightjarConfig, nightjar_engine_args
from nightjar_ray.engine.args import (
    engine_device_type,
    resolve_elastic_memory,
    resolve_engine_args,
    unresolved_engine_args,
)
from nightjar_ray.memory.arena import KV_ARENA_DEVICE_TYPES

SPEC = {"method": "draft_model", "model": "/models/draft"}
LOGGER = "nightjar_ray.engine.args"
NO_ARENA = ("xpu", "tpu", "neuron")


def _resolved(raw: dict[str, Any], device_type: str, method: str = "draft_model") -> bool:
    config = resolve_elastic_memory(NightjarConfig.model_validate(raw), device_type, method)
    enabled = config.elastic_memory.enabled
    assert isinstance(enabled, bool)
    assert config.moves_memory == (enabled or config.testing.moves_memory)
    return enabled


def test_the_default_is_auto_and_an_engine_reads_it_resolved() -> None:
    assert NightjarConfig().elastic_memory.enabled == "auto"
    with pytest.raises(RuntimeError, match=r"elastic_memory\.enabled is 'auto' here"):
        _ = NightjarConfig().moves_memory
    with pytest.raises(RuntimeError, match=r"elastic_memory\.enabled is 'auto' here"):
        _ = NightjarConfig().offloads_draft


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_auto_is_on_where_a_kv_arena_exists(
    device_type: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert device_type in KV_ARENA_DEVICE_TYPES
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert _resolved({}, device_type)
    assert not caplog.records
    config = resolve_elastic_memory(NightjarConfig(), device_type, "draft_model")
    assert config.offloads_draft and config.moves_memory


@pytest.mark.parametrize("device_type", NO_ARENA)
def test_auto_is_off_without_a_kv_arena_saying_why_once(
    device_type: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert not _resolved({}, device_type)
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert f"no KV arena for device type {device_type!r}" in record.getMessage()
    assert "elastic_memory.enabled 'auto' resolves off" in record.getMessage()


@pytest.mark.parametrize("device_type", NO_ARENA)
def test_true_without_a_kv_arena_is_an_error_naming_the_field(device_type: str) -> None:
    with pytest.raises(ValueError, match=rf"elastic_memory\.enabled .*{device_type}"):
        _resolved({"elastic_memory": {"enabled": True}}, device_type)
    with pytest.raises(ValueError, match=r"elastic_memory\.enabled"):
        nightjar_engine_args(
            {"elastic_memory": {"enabled": True}}, device_type=device_type, speculative_config=SPEC
        )


@pytest.mark.parametrize(
    ("raw", "method", "why"),
    [
        ({}, "ngram", "no draft model to offload"),
        ({"draft_sync": "stock"}, "draft_model", "not 'catch-up'"),
        ({"testing": {"skip_catch_up": True}}, "draft_model", "not 'catch-up'"),
        ({"testing": {"chaos_cycle_steps": 3}}, "draft_model", "testing.chaos_cycle_steps"),
        ({"testing": {"chaos_offload_steps": 3}}, "draft_model", "testing.chaos_offload_steps"),
    ],
)
def test_auto_is_off_where_true_would_be_an_error(
    raw: dict[str, Any], method: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert not _resolved(raw, "cpu", method)
    (record,) = caplog.records
    assert why in record.getMessage()
    with pytest.raises(ValueError, match=r"elastic_memory\.enabled"):
        _resolved({**raw, "elastic_memory": {"enabled": True}}, "cpu", method)


@pytest.mark.parametrize("device_type", ["cpu", "cuda", "xpu"])
def test_false_stays_off_and_true_stays_on_where_it_can_run(
    device_type: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert not _resolved({"elastic_memory": {"enabled": False}}, device_type)
        assert not _resolved({"elastic_memory": {"enabled": False}}, device_type, "ngram")
    assert not caplog.records  # only auto explains itself
    if device_type in KV_ARENA_DEVICE_TYPES:
        assert _resolved({"elastic_memory": {"enabled": True}}, device_type)


def test_engine_args_carry_the_resolved_value_to_every_engine_process() -> None:
    unresolved = unresolved_engine_args(NightjarConfig(), speculative_config=SPEC, model="/t")
    assert unresolved["additional_config"]["nightjar"]["elastic_memory"]["enabled"] == "auto"
    for device_type, enabled in (("cpu", True), ("cuda", True), ("xpu", False)):
        resolved = resolve_engine_args(unresolved, device_type)
        wired = NightjarConfig.from_additional_config(resolved["additional_config"])
        assert wired.elastic_memory.enabled is enabled
        assert {k: v for k, v in resolved.items() if k != "additional_config"} == {
            k: v for k, v in unresolved.items() if k != "additional_config"
        }
    here = nightjar_engine_args(NightjarConfig(), speculative_config=SPEC, model="/t")
    wired = NightjarConfig.from_additional_config(here["additional_config"])
    assert wired.elastic_memory.enabled is (engine_device_type() in KV_ARENA_DEVICE_TYPES)


def test_a_value_resolved_once_stays_resolved() -> None:
    once = resolve_elastic_memory(NightjarConfig(), "cuda", "draft_model")
    assert resolve_elastic_memory(once, "cuda", "draft_model") == once
    off = resolve_elastic_memory(NightjarConfig(), "xpu", "draft_model")
    assert resolve_elastic_memory(off, "cpu", "draft_model").elastic_memory.enabled is False


@pytest.mark.parametrize("value", ["sometimes", "Auto", 2, None])
def test_enabled_takes_auto_or_a_bool(value: object) -> None:
    with pytest.raises(ValueError, match=r"elastic_memory\.enabled"):
        NightjarConfig.model_validate({"elastic_memory": {"enabled": value}})


def test_a_cuda_process_that_cannot_build_the_arena_resolves_auto_off_and_refuses_true(
    caplog: pytest.LogCaptureFixture,
) -> None:
    why = "cuda-bindings is not installed (pip install 'nightjar-ray[gpu]')"
    auto = NightjarConfig.model_validate({})
    with caplog.at_level(logging.INFO, logger=LOGGER):
        resolved = resolve_elastic_memory(auto, "cuda", "draft_model", runtime_blocker=why)
    assert resolved.elastic_memory.enabled is False
    (record,) = caplog.records
    assert why in record.getMessage()
    true = NightjarConfig.model_validate({"elastic_memory": {"enabled": True}})
    with pytest.raises(ValueError, match=r"elastic_memory\.enabled is true but cuda-bindings"):
        resolve_elastic_memory(true, "cuda", "draft_model", runtime_blocker=why)
