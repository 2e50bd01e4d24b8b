"""The app config: the deploy/ files parse and build engine arguments; bad configs are
rejected with the field named, before Ray (and so any replica or actor) is touched."""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
import yaml

from nightjar_ray.cli.demo import demo_app_args
from nightjar_ray.engine.args import SCHEDULER_CLS, WORKER_CLS
from nightjar_ray.engine.config import MAX_NUM_SPECULATIVE_TOKENS
from nightjar_ray.engine.ray_cpu import RAY_CPU_PLATFORM_ENV, RAY_CPU_RESOURCE, SETUP_HOOK
from nightjar_ray.serve.config import generated_dtype, parse_app_config, resolve_generated
from nightjar_ray.serve.server import nightjar_config_of, with_resolved_engine_args
from tests.support import REPO_ROOT, wait_until

from .conftest import MODEL_ID, SECOND_MODEL_ID, app_args, two_model_args

DEPLOY = REPO_ROOT / "deploy"
AUTO_OFF = "elastic_memory.enabled 'auto' resolves off"


def _apps(name: str) -> list[dict[str, Any]]:
    apps: list[dict[str, Any]] = yaml.safe_load((DEPLOY / name).read_text())["applications"]
    return apps


def test_the_cpu_demo_file_is_what_the_main_job_deploys() -> None:
    (app,) = _apps("cpu-demo.yaml")
    assert app["import_path"] == "nightjar_ray.serve:build_app"
    assert app["args"] == demo_app_args("default", 1)


@pytest.mark.parametrize("name", ["gpu-7b.yaml", "gpu-32b-tp2.yaml"])
def test_gpu_configs_parse_into_nightjar_engine_arguments(name: str) -> None:
    (app,) = _apps(name)
    parsed = parse_app_config(app["args"])
    kwargs = parsed.llm_config.engine_kwargs
    assert kwargs["scheduler_cls"] == SCHEDULER_CLS and kwargs["worker_cls"] == WORKER_CLS
    assert kwargs["speculative_config"]["num_speculative_tokens"] == 4
    assert parsed.nightjar.num_speculative_tokens == 4 and parsed.nightjar.gamma_max is None
    assert kwargs["additional_config"]["nightjar"]["policy"] == "nightjar"
    assert parsed.llm_config.server_cls.__name__ == "NightjarLLMServer"
    assert parsed.llm_config.deployment_config["autoscaling_config"]["min_replicas"] == 1
    # CUDA graphs on (docs/cuda-graphs.md), on the V1 model runner Nightjar's worker needs.
    assert not kwargs.get("enforce_eager", False)
    assert parsed.llm_config.runtime_env["env_vars"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert kwargs["additional_config"]["nightjar"]["elastic_memory"]["enabled"] == "auto"
    if name == "gpu-32b-tp2.yaml":
        assert kwargs["tensor_parallel_size"] == 2
        assert kwargs["distributed_executor_backend"] == "ray"
        assert kwargs["speculative_config"]["draft_tensor_parallel_size"] == 2


@pytest.mark.parametrize(
    ("name", "device_type", "enabled"),
    [("gpu-7b.yaml", "cuda", True), ("gpu-7b.yaml", "xpu", False), ("cpu-demo.yaml", "cpu", True)],
)
def test_the_replica_resolves_elastic_memory_for_its_device(
    name: str,
    device_type: str,
    enabled: bool,
    nightjar_cache: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The head's parser leaves ``auto``; the replica resolves it before vLLM starts, and
    the engine arguments it starts vLLM with carry the result (nothing else changes); an
    ``auto`` that resolves off says why in the replica's log (Ray Serve's logger)."""
    (app,) = _apps(name)
    given = parse_app_config(app["args"]).llm_config
    cached = given.get_engine_config()  # Ray Serve LLM caches it before the replica starts
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        resolved = with_resolved_engine_args(given, device_type)
    engine_config = resolved.get_engine_config()
    assert engine_config is not cached
    started = engine_config.get_initialization_kwargs()["additional_config"]["nightjar"]
    assert started["elastic_memory"]["enabled"] is enabled
    said = [r.getMessage() for r in caplog.records if r.name.startswith("ray.serve.")]
    assert said == (
        []
        if enabled
        else [
            f"nightjar: {AUTO_OFF}: no KV arena for device type 'xpu'"
            " (elastic memory runs on cpu, cuda)"
        ]
    )
    assert nightjar_config_of(resolved).elastic_memory.enabled is enabled
    assert nightjar_config_of(given).elastic_memory.enabled == "auto"
    assert resolved.model_dump(exclude={"engine_kwargs"}) == given.model_dump(
        exclude={"engine_kwargs"}
    )
    true = {**app["args"], "nightjar": {"elastic_memory": {"enabled": True}}}
    if not enabled:
        with pytest.raises(ValueError, match=r"elastic_memory\.enabled"):
            with_resolved_engine_args(parse_app_config(true).llm_config, device_type)


def test_the_cpu_tp2_preset_is_the_32b_presets_shape_and_switches_to_cpu_ranks() -> None:
    """Same engine keys as the 32B TP=2 preset (less the GPU's memory fraction), same
    parallel values; its rank bundles turn on the CPU platform and its setup hook."""
    (gpu,) = _apps("gpu-32b-tp2.yaml")
    (cpu,) = _apps("cpu-tp2-ray.yaml")
    gpu_engine, cpu_engine = gpu["args"]["engine_kwargs"], cpu["args"]["engine_kwargs"]
    assert set(gpu_engine) - {"gpu_memory_utilization"} <= set(cpu_engine)
    for key in ("tensor_parallel_size", "distributed_executor_backend"):
        assert cpu_engine[key] == gpu_engine[key]
    spec_key = "draft_tensor_parallel_size"
    assert cpu_engine["speculative_config"][spec_key] == gpu_engine["speculative_config"][spec_key]
    runtime_env = parse_app_config(cpu["args"]).llm_config.runtime_env
    assert runtime_env["env_vars"][RAY_CPU_PLATFORM_ENV] == "1"
    assert runtime_env["env_vars"]["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    assert runtime_env["worker_process_setup_hook"] == SETUP_HOOK
    # without rank bundles nothing changes: the demo keeps vLLM's own CPU platform
    demo_env = parse_app_config(demo_app_args("default", 1)).llm_config.runtime_env
    assert RAY_CPU_PLATFORM_ENV not in demo_env["env_vars"]
    assert "worker_process_setup_hook" not in demo_env


CPU_RANKS = {"bundles": [{"CPU": 1, RAY_CPU_RESOURCE: 1}] * 2}


@pytest.mark.parametrize(
    ("engine", "named"),
    [
        ({"tensor_parallel_size": 2}, "distributed_executor_backend: ray"),
        ({"tensor_parallel_size": 3, "distributed_executor_backend": "ray"}, "3 ranks"),
    ],
)
def test_cpu_rank_bundles_that_cannot_place_the_ranks_fail_naming_the_field(
    engine: dict[str, Any], named: str, tmp_path: Path, nightjar_cache: Path
) -> None:
    args = _set(app_args(tmp_path), "placement_group_config", CPU_RANKS)
    args["engine_kwargs"].update(engine)
    with pytest.raises(ValueError, match=r"placement_group_config\.bundles") as info:
        parse_app_config(args)
    assert named in str(info.value)


def _set(args: Any, path: str, value: Any) -> Any:
    """A copy of ``args`` with ``path`` (dotted; a number indexes a list) set to ``value``."""
    out = copy.deepcopy(args)
    node = out
    *parents, leaf = path.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(leaf)] = value
    else:
        node[leaf] = value
    return out


NUM_SPEC = "engine_kwargs.speculative_config.num_speculative_tokens"

BAD = [
    ("nightjar.gamma_max", 0, "nightjar.gamma_max"),
    ("nightjar.gamma_max", 5, f"nightjar.gamma_max=5 and {NUM_SPEC}=3 disagree"),
    (
        "nightjar.policy_params",
        {"gamma_max": 2},
        f"policy_params.gamma_max=2 differs from {NUM_SPEC}=3",
    ),
    ("nightjar.polcy", "nightjar", "nightjar.polcy"),
    ("nightjar.pooling.sync_interval_s", 0, "nightjar.pooling.sync_interval_s"),
    ("nightjar.metrics_interval_s", -1, "nightjar.metrics_interval_s"),
    ("nightjar.policy", "nope", "nightjar.policy: Value error, unknown policy"),
    ("nightjar.policy", "cyclic", "unknown policy 'cyclic'"),
    ("nightjar.draft_sync", "none", "nightjar.draft_sync"),
    ("nightjar.policy_params", {"bucketing": "exact"}, "bucketing"),
    ("nightjar.elastic_memory.chaos_cycle_steps", 3, "nightjar.elastic_memory.chaos_cycle_steps"),
    ("nightjar.testing.chaos_cycle_steps", 0, "nightjar.testing.chaos_cycle_steps"),
    ("engine_kwargs.speculative_config.method", "eagle3", "speculative_config.method"),
    (NUM_SPEC, 17, f"{NUM_SPEC} must be in 1..16"),
    (NUM_SPEC, "4", f"{NUM_SPEC} must be an integer"),
    ("deployment_config", "many", "deployment_config"),
    ("model_loading_config.model_source", "generated:huge", "generated:huge"),
    ("server_cls", "my.Server", "server_cls"),
    ("not_a_field", 1, "not_a_field"),
]


def _alias_warning(path: str, value: Any) -> AbstractContextManager[Any]:
    """The deprecation warning a bad config that sets the alias ``nightjar.gamma_max`` at
    ``path`` to an in-range ``value`` gives before it is refused (an error outside
    ``pytest.warns``: pyproject's filterwarnings), naming the model's fields."""
    alias = "nightjar.gamma_max"
    if not path.endswith(alias) or not 1 <= value <= MAX_NUM_SPECULATIVE_TOKENS:
        return contextlib.nullcontext()
    prefix = re.sub(r"^llm_configs\.(\d+)\.", r"llm_configs[\1].", path.removesuffix(alias))
    message = f"{prefix}{alias} is deprecated: set {prefix}{NUM_SPEC}"
    return pytest.warns(DeprecationWarning, match=re.escape(message))


@pytest.mark.parametrize(("path", "value", "named"), BAD)
def test_bad_configs_fail_naming_the_field_before_ray_starts(
    path: str, value: Any, named: str, tmp_path: Path, nightjar_cache: Path
) -> None:
    from nightjar_ray.serve import build_app

    warns = _alias_warning(path, value)
    with warns, pytest.raises(ValueError, match="invalid config") as info:
        build_app(_set(app_args(tmp_path), path, value))
    assert named in str(info.value)


REFUSE_ALL = """
import json, sys
import ray
from nightjar_ray.serve import build_app
for args in json.loads(sys.argv[1]):
    try:
        build_app(args)
    except ValueError:
        continue
    raise SystemExit(f"accepted {args}")
print(json.dumps(ray.is_initialized()))
"""


def test_bad_configs_are_refused_without_initialising_ray(
    tmp_path: Path, nightjar_cache: Path
) -> None:
    """In a fresh interpreter (this one may hold the module's cluster): every bad config,
    of either shape, is refused and Ray is never initialised."""
    bad = [_set(app_args(tmp_path), path, value) for path, value, _ in BAD]
    bad += [_set(two_model_args(tmp_path), path, value) for path, value, _ in MULTI_BAD]
    proc = subprocess.run(
        [sys.executable, "-c", REFUSE_ALL, json.dumps(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "false"


def test_num_speculative_tokens_alone_sets_the_largest_gamma(nightjar_cache: Path) -> None:
    """vLLM's knob is the one knob (5 works alone); neither it nor the deprecated alias
    set: 4; the alias alone still works, with a warning naming its replacement."""

    def largest_gamma(args: dict[str, Any]) -> int:
        parsed = parse_app_config(args)
        engine = parsed.llm_config.engine_kwargs
        wired = engine["additional_config"]["nightjar"]
        assert wired["gamma_max"] is None
        assert wired["policy_params"]["gamma_max"] == parsed.nightjar.num_speculative_tokens
        num: int = engine["speculative_config"]["num_speculative_tokens"]
        assert parsed.nightjar.policy_config().gamma_max == num
        return num

    args = app_args(nightjar_cache)
    assert largest_gamma(_set(args, NUM_SPEC, 5)) == 5
    unset = copy.deepcopy(args)
    del unset["engine_kwargs"]["speculative_config"]["num_speculative_tokens"]
    assert largest_gamma(unset) == 4
    replacement = f"nightjar.gamma_max is deprecated: set {NUM_SPEC}"
    with pytest.warns(DeprecationWarning, match=replacement):
        assert largest_gamma(_set(unset, "nightjar.gamma_max", 6)) == 6
    with pytest.warns(DeprecationWarning, match=replacement):  # both, equal: accepted
        assert largest_gamma(_set(args, "nightjar.gamma_max", 3)) == 3


def test_llm_configs_give_each_model_its_own_nightjar_block(nightjar_cache: Path) -> None:
    """Ray Serve LLM's multi-model shape: each entry's own engine, largest gamma and
    Nightjar block; the ingress fields go to ``build_openai_app`` as given."""
    args = two_model_args(nightjar_cache)
    args["llm_configs"][1]["nightjar"]["policy"] = "nightjar-paper"
    args["ingress_deployment_config"] = {"max_ongoing_requests": 64}
    parsed = parse_app_config(args)
    assert [m.llm_config.model_id for m in parsed.models] == [MODEL_ID, SECOND_MODEL_ID]
    assert [m.nightjar.policy for m in parsed.models] == ["nightjar", "nightjar-paper"]
    assert [m.nightjar.num_speculative_tokens for m in parsed.models] == [3, 5]
    for model in parsed.models:
        engine = model.llm_config.engine_kwargs
        assert engine["scheduler_cls"] == SCHEDULER_CLS
        wired = engine["additional_config"]["nightjar"]
        assert wired["policy"] == model.nightjar.policy
        spec = engine["speculative_config"]
        assert wired["policy_params"]["gamma_max"] == spec["num_speculative_tokens"]
        assert model.llm_config.server_cls.__name__ == "NightjarLLMServer"
    assert parsed.ingress == {"ingress_deployment_config": {"max_ongoing_requests": 64}}
    with pytest.raises(ValueError, match="the app serves 2 models"):
        parsed.llm_config  # noqa: B018 (one-model shortcut)
    one = parse_app_config({"llm_configs": [app_args(nightjar_cache)]})
    assert one.llm_config.model_id == MODEL_ID and one.ingress == {}


MULTI_BAD = [
    ("llm_configs.1.nightjar.policy", "nope", "llm_configs[1].nightjar.policy: Value error"),
    (
        "llm_configs.1.nightjar.pooling.sync_interval_s",
        0,
        "llm_configs[1].nightjar.pooling.sync_interval_s",
    ),
    ("llm_configs.0.nightjar.polcy", "nightjar", "llm_configs[0].nightjar.polcy"),
    (
        "llm_configs.1.nightjar.gamma_max",
        4,
        f"llm_configs[1].nightjar.gamma_max=4 and llm_configs[1].{NUM_SPEC}=5 disagree",
    ),
    (
        "llm_configs.1.nightjar.policy_params",
        {"gamma_max": 4},
        f"llm_configs[1].nightjar.policy_params.gamma_max=4 differs from "
        f"llm_configs[1].{NUM_SPEC}=5",
    ),
    (f"llm_configs.1.{NUM_SPEC}", 17, f"llm_configs[1].{NUM_SPEC} must be in 1..16"),
    (
        "llm_configs.0.engine_kwargs.speculative_config.method",
        "eagle3",
        "llm_configs[0].engine_kwargs: speculative_config.method",
    ),
    (
        "llm_configs.1.model_loading_config.model_source",
        "generated:huge",
        "llm_configs[1].model_loading_config.model_source: unknown generated model",
    ),
    (
        "llm_configs.1.engine_kwargs.speculative_config.model",
        "generated:huge/draft",
        "llm_configs[1].engine_kwargs.speculative_config.model: unknown generated model",
    ),
    (
        "llm_configs.1.model_loading_config.model_id",
        MODEL_ID,
        f"llm_configs[1].model_loading_config.model_id: {MODEL_ID!r} is also llm_configs[0]'s",
    ),
    ("llm_configs.1.deployment_config", "many", "llm_configs[1].deployment_config"),
    ("llm_configs.1.server_cls", "my.Server", "llm_configs[1].server_cls is set by"),
    ("llm_configs.1.not_a_field", 1, "llm_configs[1].not_a_field"),
    (
        "llm_configs.1.placement_group_config",
        {"bundles": [{"CPU": 1, RAY_CPU_RESOURCE: 1}]},
        "llm_configs[1].placement_group_config.bundles",
    ),
    ("llm_configs.1", "tiny-b.yaml", "llm_configs[1]: a mapping of LLMConfig fields"),
    ("llm_configs", [], "llm_configs: a non-empty list"),
    ("llm_configs", {"tiny": {}}, "llm_configs: a non-empty list"),
    ("nightjar", {"policy": "nightjar"}, "nightjar: an app with llm_configs takes"),
    ("model_loading_config", {"model_id": "x"}, "model_loading_config: an app with llm_configs"),
    ("ingress_deployment_config", "many", "ingress_deployment_config"),
]


@pytest.mark.parametrize(("path", "value", "named"), MULTI_BAD)
def test_bad_llm_configs_fail_naming_the_field_and_its_index(
    path: str, value: Any, named: str, tmp_path: Path, nightjar_cache: Path
) -> None:
    from nightjar_ray.serve import build_app

    warns = _alias_warning(path, value)
    with warns, pytest.raises(ValueError, match="invalid config") as info:
        build_app(_set(two_model_args(tmp_path), path, value))
    assert named in str(info.value)


def test_args_must_be_a_mapping() -> None:
    with pytest.raises(ValueError, match="mapping"):
        parse_app_config(["not", "a", "mapping"])


def test_generated_sources_resolve_to_the_cached_pair(nightjar_cache: Path) -> None:
    target = Path(resolve_generated("generated:tiny"))
    draft = Path(resolve_generated("generated:tiny/draft"))
    assert (target / "config.json").is_file() and (draft / "config.json").is_file()
    assert nightjar_cache in target.parents
    assert resolve_generated("org/model") == "org/model"
    templates = [target / "chat_template.jinja", target / "tokenizer_config.json"]
    assert any(p.is_file() and "add_generation_prompt" in p.read_text() for p in templates)


def test_a_generated_pair_is_served_in_its_own_dtype(nightjar_cache: Path) -> None:
    """vLLM's dtype "auto" computes a float32 checkpoint in bfloat16 on x86 CPUs; a
    generated pair names its dtype unless the config does."""

    def dtype_of(source: str, **engine: Any) -> Any:
        args = app_args(nightjar_cache)
        args["model_loading_config"]["model_source"] = source
        args["engine_kwargs"].update(engine)
        return parse_app_config(args).llm_config.engine_kwargs["dtype"]

    assert dtype_of("generated:tiny") == "float32"
    assert dtype_of("generated:tiny", dtype="bfloat16") == "bfloat16"
    assert generated_dtype("generated:default") == "bfloat16"
    assert generated_dtype("org/model") is None and generated_dtype("generated:nope") is None


# NOTE: the tests below start a local Ray cluster (building a Serve app needs one); the
# check that bad configs never start Ray runs in its own interpreter.


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    import ray
    from ray import serve

    ray.init(address="local", num_cpus=4, include_dashboard=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": 0})
        yield
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()


@pytest.mark.parametrize(("name", "num_gpus"), [("gpu-7b.yaml", 1), ("gpu-32b-tp2.yaml", 2)])
def test_gpu_configs_build_serve_apps_with_one_gpu_bundle_per_rank(
    name: str, num_gpus: int, local_ray: None
) -> None:
    from nightjar_ray.serve import build_app
    from nightjar_ray.serve.server import NightjarLLMServer

    (app,) = _apps(name)
    build_app(app["args"])  # builds the Serve application (raises on a config it refuses)
    options = NightjarLLMServer.get_deployment_options(parse_app_config(app["args"]).llm_config)
    bundles = options["placement_group_bundles"]
    assert sum(b.get("GPU", 0) for b in bundles) == num_gpus == len(bundles)


def test_two_models_build_two_deployments_in_one_app(nightjar_cache: Path, local_ray: None) -> None:
    """``build_openai_app`` gets both models: one Nightjar deployment each."""
    from nightjar_ray.serve import build_app

    app = build_app(two_model_args(nightjar_cache))
    deployments = app._bound_deployment.init_kwargs["llm_deployments"]  # Ray Serve LLM 2.60
    names = {model: d._bound_deployment.name for model, d in deployments.items()}
    assert names == {m: f"NightjarLLMServer:{m}" for m in (MODEL_ID, SECOND_MODEL_ID)}


def test_a_bad_config_file_fails_its_serve_deploy_naming_the_field(
    tmp_path: Path, nightjar_cache: Path, local_ray: None
) -> None:
    """`serve deploy`/`serve run FILE` path: the controller runs the builder in a task;
    the app goes to DEPLOY_FAILED with our message and no replica is ever created."""
    import ray
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    (app,) = _apps("cpu-demo.yaml")
    app["args"] = _set(app_args(tmp_path), "nightjar.pooling.sync_interval_s", -1)
    client = _get_global_client()
    assert client is not None
    client.deploy_apps(ServeDeploySchema.model_validate({"applications": [app]}))

    def failed() -> Any:
        status = serve.status().applications.get(app["name"])
        return status if status is not None and status.status == "DEPLOY_FAILED" else None

    status = wait_until(failed, 120, 0.5, f"app {app['name']!r} to reach DEPLOY_FAILED")
    assert "nightjar.pooling.sync_interval_s" in status.message
    assert status.deployments == {}
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    assert not [n for n in names if "nightjar" in n]


def test_every_replica_runs_vllms_v1_model_runner_unless_the_config_asks_for_v2(
    nightjar_cache: Path,
) -> None:
    args = app_args(nightjar_cache)
    parsed = parse_app_config(args)
    assert parsed.llm_config.runtime_env["env_vars"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    asks_v2 = {**args, "runtime_env": {"env_vars": {"VLLM_USE_V2_MODEL_RUNNER": "1", "A": "b"}}}
    with pytest.raises(ValueError, match=r"runtime_env\.env_vars\.VLLM_USE_V2_MODEL_RUNNER='1'"):
        parse_app_config(asks_v2)
    keeps = {**args, "runtime_env": {"env_vars": {"A": "b"}, "pip": ["x"]}}
    runtime_env = parse_app_config(keeps).llm_config.runtime_env
    assert runtime_env["env_vars"] == {"A": "b", "VLLM_USE_V2_MODEL_RUNNER": "0"}
    assert runtime_env["pip"] == ["x"]
