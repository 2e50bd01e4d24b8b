"""``nightjar-ray profile-switch-cost``: its flags, per-device defaults, a deploy file's
model, and the bad inputs it refuses in one line, all before an engine starts (the
measurement itself: tests/engine/test_engine_profiler.py)."""

from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from nightjar_ray.cli.args import UsageError
from nightjar_ray.cli.main import build_parser, main
from nightjar_ray.cli.profile_switch_cost import (
    ProfileRequest,
    config_lines,
    default_out,
    profile_request,
    resolve_device,
)
from nightjar_ray.engine.switch_cost_profiler import engine_kwargs
from tests.support import REPO_ROOT

COMMAND = "profile-switch-cost"
PRESET_32B = REPO_ROOT / "deploy" / "gpu-32b-tp2.yaml"


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args([COMMAND, *argv])


def _request(*argv: str, device: str = "cpu") -> ProfileRequest:
    return profile_request(_parse(*argv), device)  # type: ignore[arg-type]


@dataclass(frozen=True)
class PairDirs:
    target_dir: Path
    draft_dir: Path


@pytest.fixture
def pair_dirs(tmp_path: Path) -> PairDirs:
    """Two directories that look like models (a ``config.json`` each); never loaded."""
    pair = PairDirs(tmp_path / "target", tmp_path / "draft")
    for directory in (pair.target_dir, pair.draft_dir):
        directory.mkdir()
        (directory / "config.json").write_text("{}")
    return pair


@pytest.mark.parametrize(
    ("requested", "cuda_available", "device"),
    [(None, True, "cuda"), (None, False, "cpu"), ("cpu", True, "cpu"), ("cuda", True, "cuda")],
)
def test_the_device_defaults_to_cuda_where_torch_sees_one(
    requested: str | None, cuda_available: bool, device: str
) -> None:
    assert resolve_device(requested, cuda_available) == device


def test_cuda_without_a_gpu_is_refused() -> None:
    with pytest.raises(UsageError, match="--device cuda: torch sees no CUDA device"):
        resolve_device("cuda", cuda_available=False)


def test_local_directories_and_model_ids_pass_through(pair_dirs: PairDirs) -> None:
    argv = ["--target", str(pair_dirs.target_dir), "--draft", "Qwen/Qwen2.5-0.5B-Instruct"]
    request = _request(*argv, "--tensor-parallel-size", "2", device="cuda")
    engine = request.engine
    assert engine.target == str(pair_dirs.target_dir)
    assert engine.draft == "Qwen/Qwen2.5-0.5B-Instruct"
    assert engine.tensor_parallel_size == 2 and engine.device == "cuda"
    kwargs = engine_kwargs(engine, request.grid)
    assert kwargs["enforce_eager"] is False and kwargs["gpu_memory_utilization"] == 0.9
    assert kwargs["speculative_config"]["draft_tensor_parallel_size"] == 2


def test_engine_args_are_yaml_values_over_the_device_defaults(pair_dirs: PairDirs) -> None:
    request = _request(
        *("--target", str(pair_dirs.target_dir), "--draft", str(pair_dirs.draft_dir)),
        *("--engine-arg", "enforce_eager=true", "--engine-arg", "gpu_memory_utilization=0.85"),
        *("--engine-arg", "compilation_config={cudagraph_mode: FULL}"),
        device="cuda",
    )
    kwargs = engine_kwargs(request.engine, request.grid)
    assert kwargs["enforce_eager"] is True and kwargs["gpu_memory_utilization"] == 0.85
    assert kwargs["compilation_config"] == {"cudagraph_mode": "FULL"}


def test_the_32b_tp2_preset_is_profiled_as_it_deploys() -> None:
    request = _request("--from-config", str(PRESET_32B), device="cuda")
    engine = request.engine
    assert (engine.target, engine.draft) == (
        "Qwen/Qwen2.5-32B-Instruct",
        "Qwen/Qwen2.5-0.5B-Instruct",
    )
    assert engine.tensor_parallel_size == 2
    # the serving-only executor and Nightjar's own config are left out
    assert engine.engine_args == {
        "max_model_len": 8192,
        "gpu_memory_utilization": 0.9,
        "dtype": "bfloat16",
    }
    out = default_out(request)
    assert out.name == "switch-cost-Qwen-Qwen2.5-32B-Instruct-tp2-cuda.csv"
    lines = config_lines(out, request.deploy)
    assert lines[0].startswith(f"add to applications[0].args.nightjar in {PRESET_32B}")
    assert lines[1] == f"  switch_cost_profile: {out.resolve()}"


def test_flags_win_over_the_deploy_file(pair_dirs: PairDirs) -> None:
    request = _request(
        *("--from-config", str(PRESET_32B), "--draft", str(pair_dirs.draft_dir)),
        *("--tensor-parallel-size", "4", "--engine-arg", "max_model_len=4096"),
        device="cuda",
    )
    engine = request.engine
    assert engine.target == "Qwen/Qwen2.5-32B-Instruct"
    assert engine.draft == str(pair_dirs.draft_dir) and engine.tensor_parallel_size == 4
    assert engine.engine_args["max_model_len"] == 4096


def _write_config(tmp_path: Path, edit: Any) -> Path:
    config = yaml.safe_load(PRESET_32B.read_text())
    edit(config["applications"])
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _two_models(apps: list[dict[str, Any]]) -> None:
    args = apps[0]["args"]
    second = copy.deepcopy(args)
    second["model_loading_config"]["model_id"] = "other"
    apps[0]["args"] = {"llm_configs": [args, second]}


def _ngram(apps: list[dict[str, Any]]) -> None:
    apps[0]["args"]["engine_kwargs"]["speculative_config"] = {"method": "ngram"}


def _two_apps(apps: list[dict[str, Any]]) -> None:
    apps.append({**copy.deepcopy(apps[0]), "name": "second", "route_prefix": "/2"})


def test_a_model_of_an_llm_configs_app_is_chosen_by_id(tmp_path: Path) -> None:
    path = _write_config(tmp_path, _two_models)
    with pytest.raises(UsageError, match=r"has 2 models \(\['qwen2.5-32b-instruct', 'other'\]\)"):
        _request("--from-config", str(path))
    request = _request("--from-config", str(path), "--model-id", "other")
    assert request.deploy is not None
    assert request.deploy.field == "applications[0].args.llm_configs[1]"


@pytest.mark.parametrize(
    ("edit", "extra", "message"),
    [
        (_ngram, [], r"speculative_config.method is 'ngram'; the profile times a draft model"),
        (_two_apps, [], r"has 2 applications \(\['nightjar-32b', 'second'\]\); choose with --app"),
        (_two_apps, ["--app", "third"], r"--app 'third': not in --from-config"),
        (
            lambda apps: apps[0]["args"].update(nightjar={"policy": "nightjr"}),
            [],
            "nightjar.policy",
        ),
    ],
)
def test_deploy_files_the_profile_cannot_read_are_refused(
    tmp_path: Path, edit: Any, extra: list[str], message: str
) -> None:
    path = _write_config(tmp_path, edit)
    with pytest.raises(UsageError, match=message):
        _request("--from-config", str(path), *extra)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "Qwen/Qwen2.5-32B-Instruct"], "--target and --draft go together"),
        (["--model-id", "x"], "--app and --model-id choose within --from-config"),
        (["--target", "generated:huge", "--draft", "generated:huge/draft"], "--target: unknown"),
        (["--engine-arg", "enforce_eagr=true"], "'enforce_eagr' is not a vLLM engine argument"),
    ],
)
def test_conflicting_or_unknown_inputs_are_refused_naming_the_flag(
    argv: list[str], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        _request(*argv)


def test_a_usage_error_is_one_line_and_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([COMMAND, "--device", "cpu", "--draft", "org/draft"]) == 2
    assert capsys.readouterr().err == (
        f"nightjar-ray {COMMAND}: error: --target and --draft go together "
        "(or take both from --from-config)\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "{tmp}/missing"], "argument --target: no such directory: {tmp}/missing"),
        (["--draft", "{tmp}"], "argument --draft: no config.json in {tmp} (not a model"),
        (
            ["--tensor-parallel-size", "0"],
            "argument --tensor-parallel-size: expected an integer >= 1, got 0",
        ),
        (["--repeats", "x"], "argument --repeats: expected an integer >= 1, got 'x'"),
        (["--skip-tokens", "16,x"], "argument --skip-tokens: expected comma-separated integers"),
        (["--batch-sizes", ","], "argument --batch-sizes: expected comma-separated integers"),
        (["--engine-arg", "enforce_eager"], "argument --engine-arg: expected KEY=VALUE, got"),
        (["--engine-arg", "model=x"], "argument --engine-arg: model is set by --target"),
        (
            ["--engine-arg", "tensor_parallel_size=2"],
            "tensor_parallel_size is set by --tensor-parallel-size",
        ),
        (["--engine-arg", "speculative_config={}"], "speculative_config is set by --draft"),
        (
            ["--engine-arg", "max_model_len=[1"],
            "argument --engine-arg: max_model_len: VALUE is not YAML",
        ),
        (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit, match=r"^2$"):
        main([COMMAND, *(a.replace("{tmp}", str(tmp_path)) for a in argv)])
    err = capsys.readouterr().err
    assert message.replace("{tmp}", str(tmp_path)) in err and "Traceback" not in err
