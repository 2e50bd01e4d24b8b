"""The simulator's ``nightjar`` contender is the product's default configuration: the
same elastic-memory mode, resolved by the same rule for the simulated device, and the
same controller settings."""

from __future__ import annotations

import pytest

from nightjar_ray.engine.args import resolve_elastic_memory
from nightjar_ray.engine.config import ElasticMemoryConfig, NightjarConfig
from nightjar_ray.sim.experiments import (
    Contender,
    RunKnobs,
    default_contenders,
    elastic_params,
    runs_elastic,
    server_options,
)
from nightjar_ray.sim.hardware import HardwareProfile
from nightjar_ray.sim.presets import SETTINGS, Setting


def _nightjar() -> Contender:
    (nightjar,) = [c for c in default_contenders() if c.label == "nightjar"]
    return nightjar


def test_the_nightjar_contender_takes_the_products_elastic_mode() -> None:
    nightjar = _nightjar()
    assert nightjar.elastic == NightjarConfig().elastic_memory.enabled
    assert nightjar.policy == NightjarConfig().policy
    assert nightjar.skip_draft == (NightjarConfig().draft_sync == "catch-up")


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_each_setting_runs_elastic_memory_iff_the_product_would(name: str) -> None:
    setting = SETTINGS[name]
    product = resolve_elastic_memory(NightjarConfig(), setting.hw.device_type, "draft_model")
    options = server_options(setting, _nightjar(), "sharegpt", 0, RunKnobs())
    assert (options.elastic is not None) == product.elastic_memory.enabled
    assert options.elastic == elastic_params(setting, RunKnobs())


def test_a_device_without_an_arena_runs_the_nightjar_contender_without_it() -> None:
    base = SETTINGS["rtx4090-7b"]
    hw: HardwareProfile = HardwareProfile(**{**vars(base.hw), "device_type": "xpu"})
    setting = Setting(**{**vars(base), "hw": hw})
    product = resolve_elastic_memory(NightjarConfig(), "xpu", "draft_model")
    assert not product.elastic_memory.enabled
    assert not runs_elastic(setting, _nightjar())
    assert server_options(setting, _nightjar(), "sharegpt", 0, RunKnobs()).elastic is None


def test_the_simulators_controller_knobs_are_the_products_defaults() -> None:
    product = ElasticMemoryConfig()
    knobs = RunKnobs()
    assert knobs.tau_low_fraction == product.tau_low_fraction
    assert knobs.persist_steps == product.expand_persist_steps
    assert knobs.contract_persist_steps == product.contract_persist_steps
    assert knobs.offload_outvalued == product.offload_outvalued
