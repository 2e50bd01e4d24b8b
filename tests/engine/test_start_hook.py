"""The engine learns about Ray Serve only through the start hook its arguments name."""

from __future__ import annotations

import random
import sys
import types
from pathlib import Path

import pytest

from nightjar_ray.driver.step_driver import StepDriver
from nightjar_ray.engine.args import START_HOOK_KEY, nightjar_engine_args
from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.engine.scheduler_setup import run_start_hook
from nightjar_ray.policy import build_policy

SPEC = {"method": "draft_model", "model": "/models/draft"}


def _driver() -> StepDriver:
    return StepDriver(build_policy("off", {}, rng=random.Random(0)), gamma_cap=4, clock=lambda: 0.0)


def test_the_hook_travels_in_additional_config_and_is_reserved() -> None:
    kwargs = nightjar_engine_args(
        NightjarConfig(), start_hook="pkg.mod:fn", model="m", speculative_config=SPEC
    )
    assert kwargs["additional_config"][START_HOOK_KEY] == "pkg.mod:fn"
    assert (
        START_HOOK_KEY
        not in nightjar_engine_args(NightjarConfig(), speculative_config=SPEC)["additional_config"]
    )
    with pytest.raises(ValueError, match=f"additional_config.{START_HOOK_KEY} is reserved"):
        nightjar_engine_args(
            NightjarConfig(), speculative_config=SPEC, additional_config={START_HOOK_KEY: "x:y"}
        )


def test_the_scheduler_calls_the_named_hook_with_its_config_and_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[NightjarConfig, StepDriver]] = []
    module = types.ModuleType("hook_under_test")
    module.start = lambda config, driver: calls.append((config, driver)) or "link"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hook_under_test", module)
    config, driver = NightjarConfig(seed=7), _driver()
    result = run_start_hook({START_HOOK_KEY: "hook_under_test:start"}, config, driver)
    assert result == "link"
    assert calls == [(config, driver)]
    assert run_start_hook({}, config, driver) is None
    assert run_start_hook(None, config, driver) is None


def test_serve_names_its_link_and_the_link_stays_off_outside_a_replica(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from nightjar_ray.serve.config import SERVE_START_HOOK, parse_app_config
    from nightjar_ray.serve.context import SERVE_CONTEXT_ENV
    from nightjar_ray.serve.link import start_from_engine

    from ..serve.conftest import app_args

    module, _, name = SERVE_START_HOOK.partition(":")
    assert getattr(sys.modules[module], name) is start_from_engine
    parsed = parse_app_config(app_args(tmp_path))
    assert parsed.llm_config.engine_kwargs["additional_config"][START_HOOK_KEY] == SERVE_START_HOOK
    monkeypatch.delenv(SERVE_CONTEXT_ENV, raising=False)
    assert start_from_engine(NightjarConfig(), _driver()) is None
