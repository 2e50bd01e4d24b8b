"""NightjarConfig and nightjar_engine_args reject bad input before vLLM starts."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from nightjar_ray.engine import NightjarConfig, nightjar_engine_args
from nightjar_ray.engine.args import resolve_elastic_memory, with_num_speculative_tokens
from nightjar_ray.engine.config import ADDITIONAL_CONFIG_KEY

SPEC = {"method": "draft_model", "model": "/models/draft"}


def args(config: object, **kw: object) -> dict[str, object]:
    return nightjar_engine_args(config, model="/models/target", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"gamma_max": 0}, "gamma_max"),
        ({"gamma_max": 99}, "gamma_max"),
        ({"policy": "nope"}, "nope"),
        ({"policy": "fixed", "policy_params": {"gamma": 7}}, "gamma"),
        ({"policy": "nightjar", "policy_params": {"bucketing": "x"}}, "bucketing"),
        ({"policy_params": {"gamma_max": 2}, "gamma_max": 3}, "gamma_max"),
        ({"draft_sync": "sometimes"}, "draft_sync"),
        ({"draft_sync": "none"}, "draft_sync"),
        ({"testing": {"chaos_cycle_steps": 0}}, "testing.chaos_cycle_steps"),
        ({"testing": {"forced_gammas": [0, 7]}}, "testing.forced_gammas"),
        ({"testing": {"policy_overrides": {"bucketing": "x"}}}, "testing.policy_overrides"),
        ({"testing": {"policy_overrides": {"gamma_max": 2}}}, "gamma_max"),
        ({"testing": {"batch_size_rule": "all"}}, "testing.batch_size_rule"),
        ({"batch_size_rule": "decode"}, "batch_size_rule"),
        ({"log_interval_steps": -1}, "log_interval_steps"),
        ({"unknown_knob": 1}, "unknown_knob"),
        ({"switch_cost_profile": "/nonexistent/profile.csv"}, "profile.csv"),
    ],
)
def test_invalid_config_fails_naming_the_field(raw: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        args(raw, speculative_config=SPEC)
    with pytest.raises((ValidationError, ValueError), match=field):
        NightjarConfig.model_validate(raw)


def test_engine_args_wire_scheduler_worker_and_config(tmp_path: Path) -> None:
    profile = tmp_path / "c.csv"
    profile.write_text("max_skip_tokens,num_reqs,switch_cost_ms\n16,1,1.0\n")
    cfg = NightjarConfig(policy="nightjar", switch_cost_profile=str(profile))
    spec = {**SPEC, "num_speculative_tokens": 3}
    kw = args(cfg, speculative_config=spec, additional_config={"other": 1})
    assert kw["scheduler_cls"] == "nightjar_ray.engine.scheduler.NightjarScheduler"
    assert str(kw["worker_cls"]).startswith("nightjar_ray.engine.worker.Nightjar")
    assert kw["speculative_config"] == spec
    extra = kw["additional_config"]
    assert isinstance(extra, dict) and extra["other"] == 1
    wired = NightjarConfig.from_additional_config(extra)
    # elastic_memory.enabled "auto" is resolved for this process's device (a CPU here)
    assert wired == resolve_elastic_memory(
        with_num_speculative_tokens(cfg, 3), "cpu", "draft_model"
    )
    assert wired.elastic_memory.enabled is True and cfg.elastic_memory.enabled == "auto"
    assert wired.switch_cost_profile == str(profile) and wired.gamma_max is None
    policy_cfg = wired.policy_config()
    assert policy_cfg.gamma_max == 3
    assert "switch_cost_profile" not in type(policy_cfg).model_fields  # declared once


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"speculative_config": {"method": "eagle"}}, "method"),
        ({"speculative_config": {**SPEC, "num_speculative_tokens": 17}}, "num_speculative_tokens"),
        ({"speculative_config": {**SPEC, "num_speculative_tokens": 0}}, "num_speculative_tokens"),
        (
            {"speculative_config": {**SPEC, "num_speculative_tokens": "4"}},
            "num_speculative_tokens must be an integer",
        ),
        ({"speculative_config": SPEC, "scheduler_cls": "x.Y"}, "scheduler_cls"),
        (
            {"speculative_config": SPEC, "additional_config": {ADDITIONAL_CONFIG_KEY: {}}},
            "reserved",
        ),
    ],
)
def test_engine_args_reject_conflicts(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        args(NightjarConfig(), **kw)


def _largest_gamma(kw: dict[str, object]) -> int:
    """The engine's largest gamma, as vLLM and as the scheduler's policy see it."""
    spec = kw["speculative_config"]
    assert isinstance(spec, dict)
    wired = NightjarConfig.from_additional_config(kw["additional_config"])
    assert wired.build_policy().gamma_max == wired.policy_config().gamma_max
    assert wired.policy_config().gamma_max == spec["num_speculative_tokens"]
    return int(spec["num_speculative_tokens"])


def test_num_speculative_tokens_alone_sets_the_largest_gamma() -> None:
    """vLLM's knob is the one knob: 5 works without touching the Nightjar block; unset,
    the largest gamma stays 4."""
    five = {**SPEC, "num_speculative_tokens": 5}
    assert _largest_gamma(args(NightjarConfig(), speculative_config=five)) == 5
    assert _largest_gamma(args({"policy": "nightjar-paper"}, speculative_config=five)) == 5
    assert _largest_gamma(args(NightjarConfig(), speculative_config=SPEC)) == 4
    forced = NightjarConfig(testing={"forced_gammas": [0, 2]})
    assert _largest_gamma(args(forced, speculative_config=five)) == 5


def test_gamma_max_is_a_deprecated_alias_of_num_speculative_tokens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    replacement = r"set speculative_config\.num_speculative_tokens"
    with pytest.warns(DeprecationWarning, match=replacement):
        kw = args(NightjarConfig(gamma_max=3), speculative_config=SPEC)
    assert _largest_gamma(kw) == 3
    assert "nightjar.gamma_max is deprecated" in caplog.text
    with pytest.warns(DeprecationWarning, match=replacement):  # both set, equal: accepted
        kw = args(
            NightjarConfig(gamma_max=5), speculative_config={**SPEC, "num_speculative_tokens": 5}
        )
    assert _largest_gamma(kw) == 5
    both = r"nightjar\.gamma_max=3 and speculative_config\.num_speculative_tokens=5 disagree"
    with pytest.warns(DeprecationWarning, match=replacement), pytest.raises(ValueError, match=both):
        args(NightjarConfig(gamma_max=3), speculative_config={**SPEC, "num_speculative_tokens": 5})


def test_policy_params_gamma_max_must_equal_num_speculative_tokens() -> None:
    spec = {**SPEC, "num_speculative_tokens": 3}
    same = args(NightjarConfig(policy_params={"gamma_max": 3}), speculative_config=spec)
    assert _largest_gamma(same) == 3
    differs = r"nightjar\.policy_params\.gamma_max=2 differs from speculative_config\.num_spec"
    with pytest.raises(ValueError, match=differs):
        args(NightjarConfig(policy_params={"gamma_max": 2}), speculative_config=spec)
    with pytest.raises(ValueError, match=r"policy_params\.gamma_max=5 differs .*=4"):
        args(NightjarConfig(policy_params={"gamma_max": 5}), speculative_config=SPEC)


def test_policy_snapshot_warm_starts_the_engine_policy(tmp_path: Path) -> None:
    import json
    import random

    from nightjar_ray.policy import StepResult, build_policy

    params = {"latency_estimator": "token-weighted"}
    trained = build_policy("nightjar", {"gamma_max": 4, **params}, rng=random.Random(3))
    for step in range(2000):
        gamma = trained.choose(8, 0)
        trained.observe(StepResult(8, gamma, 8 + gamma, 0.01 + 0.001 * gamma + step * 1e-9))
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(trained.snapshot()))
    config = NightjarConfig(testing={"policy_overrides": params}, policy_snapshot=str(path))
    assert config.build_policy().snapshot() == trained.snapshot()
    # a snapshot of another policy, or no file, fails before vLLM starts, naming the field
    path.write_text(json.dumps(build_policy("dsd", {}, rng=random.Random(0)).snapshot()))
    with pytest.raises(ValueError, match="policy_snapshot"):
        NightjarConfig(policy_snapshot=str(path))
    with pytest.raises(ValueError, match="policy_snapshot"):
        NightjarConfig(policy_snapshot=str(tmp_path / "missing.json"))


def test_chaos_fields_are_validated_and_named() -> None:
    given = NightjarConfig(testing={"chaos_cycle_steps": 4, "chaos_region_blocks": 3})
    cfg = resolve_elastic_memory(given, "cpu", "draft_model")  # auto: off beside a chaos cycle
    assert cfg.testing.chaos_cycle_steps == 4 and cfg.moves_memory and not cfg.offloads_draft
    assert NightjarConfig().testing.chaos_cycle_steps is None  # off by default
    for bad in ({"chaos_cycle_steps": 0}, {"chaos_region_blocks": 0}):
        with pytest.raises(ValueError, match=f"testing.{next(iter(bad))}"):
            NightjarConfig(testing=bad)
    with pytest.raises(ValueError, match=r"elastic_memory\.block_mover"):
        NightjarConfig(elastic_memory={"block_mover": "cuda"})
    with pytest.raises(ValueError, match="extra"):
        NightjarConfig(elastic_memory={"tau_low": 3})
    # the chaos switches are not elastic_memory fields any more
    with pytest.raises(ValueError, match=r"elastic_memory\.chaos_cycle_steps"):
        NightjarConfig(elastic_memory={"chaos_cycle_steps": 4})


def test_draft_offload_chaos_needs_the_catch_up() -> None:
    chaos = NightjarConfig(testing={"chaos_offload_steps": 3})
    assert resolve_elastic_memory(chaos, "cpu", "draft_model").offloads_draft
    with pytest.raises(ValueError, match="chaos_offload_steps needs draft_sync='catch-up'"):
        NightjarConfig(draft_sync="stock", testing={"chaos_offload_steps": 3})
    with pytest.raises(ValueError, match=r"got testing\.skip_catch_up"):
        NightjarConfig(testing={"chaos_offload_steps": 3, "skip_catch_up": True})


def test_skip_catch_up_is_the_testing_control_of_draft_sync() -> None:
    assert NightjarConfig().draft_sync_mode == "catch-up"
    assert NightjarConfig(draft_sync="stock").draft_sync_mode == "stock"
    assert NightjarConfig(testing={"skip_catch_up": True}).draft_sync_mode == "none"
    with pytest.raises(ValueError, match=r"testing\.skip_catch_up needs draft_sync='catch-up'"):
        NightjarConfig(draft_sync="stock", testing={"skip_catch_up": True})


def test_forced_gammas_replace_the_policy() -> None:
    forced = NightjarConfig(testing={"forced_gammas": [0, 3], "forced_steps_per_gamma": 2})
    policy = with_num_speculative_tokens(forced, 3).build_policy()
    assert [policy.choose(4, 0) for _ in range(6)] == [0, 0, 3, 3, 0, 0]
    assert policy.gamma_max == 3
    assert NightjarConfig().testing.forced_gammas is None
    with pytest.raises(ValueError, match=r"testing\.forced_gammas and policy_snapshot"):
        NightjarConfig(testing={"forced_gammas": [0]}, policy_snapshot="/any/snapshot.json")


def test_forced_undrafted_cycle_switches_requests_in_and_out() -> None:
    testing = NightjarConfig(
        testing={"forced_undrafted_cycle": 2, "forced_undrafted_steps": 2}
    ).testing
    pattern = [[testing.forced_undrafted(i, t) for t in range(6)] for i in range(2)]
    assert pattern == [
        [True, True, False, False, True, True],
        [False, False, True, True, False, False],
    ]
    assert not NightjarConfig().testing.forced_undrafted(0, 0)  # off by default
    with pytest.raises(ValueError, match=r"testing\.forced_undrafted_cycle"):
        NightjarConfig(testing={"forced_undrafted_cycle": 1})
    with pytest.raises(ValueError, match=r"forced_undrafted_cycle needs draft_sync='catch-up'"):
        NightjarConfig(draft_sync="stock", testing={"forced_undrafted_cycle": 2})


def test_elastic_controller_fields_are_validated_and_named() -> None:
    enabled = NightjarConfig(elastic_memory={"enabled": True})
    config = enabled.elastic_memory
    assert config.tau_low_fraction == 0.10 and config.expand_persist_steps == 8
    assert enabled.moves_memory and enabled.offloads_draft
    assert not NightjarConfig(elastic_memory={"enabled": False}).moves_memory
    for bad in ({"tau_low_fraction": -0.1}, {"expand_persist_steps": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            NightjarConfig(elastic_memory={"enabled": True, **bad})
    with pytest.raises(ValueError, match="enabled needs draft_sync='catch-up'"):
        NightjarConfig(draft_sync="stock", elastic_memory={"enabled": True})
    with pytest.raises(
        ValueError,
        match=r"elastic_memory\.enabled and testing\.chaos_cycle_steps .* set one of them",
    ):
        NightjarConfig(elastic_memory={"enabled": True}, testing={"chaos_cycle_steps": 2})
