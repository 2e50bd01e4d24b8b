"""The app's typed config: Ray Serve LLM's own shapes, each model with a ``nightjar:`` block.

One model (``LLMConfig`` fields plus ``nightjar:``), or several, as Ray Serve LLM's
``build_openai_app`` takes them (``llm_configs``, each entry ``LLMConfig`` fields plus
``nightjar:``)::

    args:                                  # a Serve application's `args`
      model_loading_config: {...}          # LLMConfig fields, as Ray Serve LLM documents
      engine_kwargs:
        speculative_config: {method: draft_model, model: ..., num_speculative_tokens: 4}
      deployment_config: {autoscaling_config: {...}}
      nightjar: {policy: nightjar, pooling: {...}}   # NightjarConfig

    args:
      llm_configs:
        - {model_loading_config: {model_id: a, ...}, engine_kwargs: {...}, nightjar: {...}}
        - {model_loading_config: {model_id: b, ...}, engine_kwargs: {...}, nightjar: {...}}
      ingress_deployment_config: {...}     # optional, as build_openai_app takes it

``speculative_config.num_speculative_tokens`` is the largest gamma (default 4);
``nightjar.gamma_max`` is its deprecated alias. :func:`parse_app_config` validates all of
it before anything starts and raises ``ValueError`` whose message names the bad field,
with its model's index in the second shape (``llm_configs[1].nightjar.policy``,
``engine_kwargs.speculative_config.method``, ``deployment_config``...).

Model sources ``generated:<pair>`` (target) and ``generated:<pair>/draft``
(draft) name a generated pair (``GENERATED_PAIRS``), built on first use into
the cache directory; the CPU demo uses them, so nothing is downloaded. Such a
target is served in its pair's dtype unless ``engine_kwargs.dtype`` says
otherwise (vLLM's ``auto`` would compute a float32 pair in bfloat16 on x86).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from nightjar_ray.engine.args import (
    unresolved_engine_args,
    with_num_speculative_tokens,
    with_v1_model_runner,
)
from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.engine.ray_cpu import RAY_CPU_RESOURCE, ray_cpu_runtime_env
from nightjar_ray.models.pair import TINY_SPEC, PairSpec, generate_pair

GENERATED_PREFIX = "generated:"
GENERATED_PAIRS: dict[str, PairSpec] = {
    "default": PairSpec(),
    "tiny": replace(TINY_SPEC, dtype="float32"),
}
"""``default``: the s=0.05 79M-parameter pair the demo serves (stored in bfloat16);
``tiny``: the tests' pair."""

CACHE_ENV = "NIGHTJAR_CACHE_DIR"

SERVE_START_HOOK = "nightjar_ray.serve.link:start_from_engine"
"""What the engine's scheduler calls at start (``engine/args.py``, ``START_HOOK_KEY``)."""


def cache_dir() -> Path:
    """Where generated pairs live (``$NIGHTJAR_CACHE_DIR`` or ``~/.cache/nightjar-ray``)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "nightjar-ray")


def format_errors(error: ValidationError, prefix: str = "") -> str:
    """``field.path: message`` per error, each path prefixed with ``prefix``."""
    lines = []
    for err in error.errors():
        path = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "")
        lines.append(f"{path or '<root>'}: {err['msg']}")
    return "; ".join(lines)


@dataclass(frozen=True)
class ModelConfig:
    """One validated model: its Nightjar block (largest gamma resolved) and the
    ``LLMConfig`` to serve."""

    nightjar: NightjarConfig
    llm_config: Any


@dataclass(frozen=True)
class AppConfig:
    """A validated app config: its models, in order, and the rest of Ray Serve LLM's
    ``build_openai_app`` arguments (``INGRESS_FIELDS``)."""

    models: tuple[ModelConfig, ...]
    ingress: dict[str, Any]

    @property
    def nightjar(self) -> NightjarConfig:
        """The Nightjar block of a one-model app."""
        return self._only().nightjar

    @property
    def llm_config(self) -> Any:
        """The ``LLMConfig`` of a one-model app."""
        return self._only().llm_config

    def _only(self) -> ModelConfig:
        if len(self.models) != 1:
            raise ValueError(f"the app serves {len(self.models)} models; read .models")
        return self.models[0]


LLM_CONFIGS = "llm_configs"
INGRESS_FIELDS = ("ingress_deployment_config", "ingress_cls_config")
"""What an ``llm_configs`` app may set beside its models (``LLMServingArgs``' fields)."""


def parse_nightjar(raw: Any, prefix: str = "") -> NightjarConfig:
    """The ``nightjar:`` block; ``ValueError`` names ``<prefix>nightjar.<field>``."""
    try:
        return NightjarConfig.model_validate(raw or {})
    except ValidationError as e:
        raise ValueError(f"invalid config: {format_errors(e, f'{prefix}nightjar')}") from None


def _split_generated(source: str) -> tuple[str, str] | None:
    """``(pair, part)`` of ``generated:<pair>[/<part>]``; None for other sources."""
    if not source.startswith(GENERATED_PREFIX):
        return None
    name, _, part = source[len(GENERATED_PREFIX) :].partition("/")
    return name, part


def resolve_generated(source: str) -> str:
    """Path of a generated model for ``generated:<pair>[/draft]``; other sources unchanged."""
    split = _split_generated(source)
    if split is None:
        return source
    name, part = split
    if name not in GENERATED_PAIRS or part not in ("", "draft"):
        raise ValueError(
            f"unknown generated model {source!r}: use generated:<pair> or "
            f"generated:<pair>/draft with pair in {sorted(GENERATED_PAIRS)}"
        )
    pair = generate_pair(cache_dir() / "pairs" / name, GENERATED_PAIRS[name])
    return str(pair.draft_dir if part else pair.target_dir)


def _resolve(source: str, field: str) -> str:
    """``resolve_generated``; ``ValueError`` names ``field`` (with its model's prefix)."""
    try:
        return resolve_generated(source)
    except ValueError as e:
        raise ValueError(f"invalid config: {field}: {e}") from None


def generated_dtype(source: Any) -> str | None:
    """The dtype of the generated pair ``source`` names, or None for other sources."""
    split = _split_generated(source) if isinstance(source, str) else None
    spec = None if split is None else GENERATED_PAIRS.get(split[0])
    return None if spec is None else spec.dtype


def _engine_kwargs(
    raw: dict[str, Any], config: NightjarConfig, prefix: str
) -> tuple[dict[str, Any], NightjarConfig]:
    """Nightjar's engine arguments and the config with its largest gamma resolved
    (``elastic_memory.enabled`` as given: the replica resolves it for its device)."""
    kwargs = dict(raw.get("engine_kwargs") or {})
    loading = raw.get("model_loading_config")
    dtype = generated_dtype(loading.get("model_source") if isinstance(loading, dict) else None)
    if dtype is not None:
        # NOTE: vLLM's "auto" would compute a float32 pair in bfloat16 on x86 CPUs.
        kwargs.setdefault("dtype", dtype)
    spec = dict(kwargs.get("speculative_config") or {})
    field = f"{prefix}engine_kwargs.speculative_config"
    if isinstance(spec.get("model"), str):
        spec["model"] = _resolve(spec["model"], f"{field}.model")
    kwargs["speculative_config"] = spec
    try:
        config = with_num_speculative_tokens(
            config,
            spec.get("num_speculative_tokens"),
            nightjar_field=f"{prefix}nightjar",
            spec_field=field,
        )
    except ValueError as e:
        raise ValueError(f"invalid config: {e}") from None
    spec["num_speculative_tokens"] = config.num_speculative_tokens
    try:
        return unresolved_engine_args(config, start_hook=SERVE_START_HOOK, **kwargs), config
    except ValueError as e:
        raise ValueError(f"invalid config: {prefix}engine_kwargs: {e}") from None


def _model_loading(raw: dict[str, Any], prefix: str) -> Any:
    loading = raw.get("model_loading_config")
    if isinstance(loading, dict) and isinstance(loading.get("model_source"), str):
        source = _resolve(loading["model_source"], f"{prefix}model_loading_config.model_source")
        loading = {**loading, "model_source": source}
    return loading


def _num_cpu_rank_bundles(raw: dict[str, Any], prefix: str) -> int | None:
    """Bundles that place a CPU rank (ask for ``RAY_CPU_RESOURCE``); None if none does.

    Such a replica runs its ranks on Ray's executor with the CPU platform
    (``engine/ray_cpu.py``); there must be one bundle per rank."""
    pg = raw.get("placement_group_config")
    if not isinstance(pg, dict):
        return None
    kwargs = raw["engine_kwargs"]
    world_size = int(kwargs.get("tensor_parallel_size", 1)) * int(
        kwargs.get("pipeline_parallel_size", 1)
    )
    per_worker = pg.get("bundle_per_worker")
    bundles = [per_worker] * world_size if isinstance(per_worker, dict) else pg.get("bundles")
    count = sum(1 for b in bundles or [] if isinstance(b, dict) and b.get(RAY_CPU_RESOURCE, 0) > 0)
    if count == 0:
        return None
    field = f"invalid config: {prefix}placement_group_config.bundles"
    if kwargs.get("distributed_executor_backend") != "ray":
        raise ValueError(
            f"{field}: {RAY_CPU_RESOURCE!r} places CPU ranks on Ray's executor; set "
            f"{prefix}engine_kwargs.distributed_executor_backend: ray"
        )
    if count < world_size:
        raise ValueError(
            f"{field}: {count} bundle(s) ask for "
            f"{RAY_CPU_RESOURCE!r}, the engine has {world_size} ranks (one bundle per rank)"
        )
    return count


def parse_app_config(args: Any) -> AppConfig:
    """Validate a Serve app's ``args``, either shape (see module docstring). Starts nothing."""
    if not isinstance(args, dict):
        raise ValueError(f"invalid config: app args must be a mapping, got {type(args).__name__}")
    if LLM_CONFIGS not in args:
        return AppConfig((_parse_model(args, ""),), {})
    entries = args[LLM_CONFIGS]
    if not isinstance(entries, list) or not entries:
        raise ValueError(
            f"invalid config: {LLM_CONFIGS}: a non-empty list of models (LLMConfig fields "
            f"plus nightjar), got {entries!r}"
        )
    for key in args:
        if key not in (LLM_CONFIGS, *INGRESS_FIELDS):
            raise ValueError(
                f"invalid config: {key}: an app with {LLM_CONFIGS} takes {LLM_CONFIGS} and "
                f"{', '.join(INGRESS_FIELDS)}; set model fields (and nightjar) in each "
                f"{LLM_CONFIGS} entry"
            )
    models = tuple(_parse_model(entry, f"{LLM_CONFIGS}[{i}].") for i, entry in enumerate(entries))
    _check_unique_model_ids(models)
    ingress = {key: args[key] for key in INGRESS_FIELDS if key in args}
    _check_ingress(models, ingress)
    return AppConfig(models, ingress)


def _parse_model(args: Any, prefix: str) -> ModelConfig:
    """One model's ``LLMConfig`` fields plus ``nightjar:``; errors name ``<prefix><field>``."""
    from ray.serve.llm import LLMConfig

    from nightjar_ray.serve.server import NightjarLLMServer

    if not isinstance(args, dict):
        raise ValueError(
            f"invalid config: {prefix.rstrip('.')}: a mapping of LLMConfig fields plus "
            f"nightjar, got {type(args).__name__} (files are not read here)"
        )
    raw = dict(args)
    config = parse_nightjar(raw.pop("nightjar", None), prefix)
    if raw.get("server_cls") is not None:
        raise ValueError(
            f"invalid config: {prefix}server_cls is set by nightjar_ray.serve; remove it"
        )
    raw["engine_kwargs"], config = _engine_kwargs(raw, config, prefix)
    if "model_loading_config" in raw:
        raw["model_loading_config"] = _model_loading(raw, prefix)
    raw["server_cls"] = NightjarLLMServer
    raw["runtime_env"] = _runtime_env(raw, prefix)
    try:
        llm_config = LLMConfig.model_validate(raw)
    except ValidationError as e:
        raise ValueError(f"invalid config: {format_errors(e, prefix.rstrip('.'))}") from None
    return ModelConfig(config, llm_config)


def _runtime_env(raw: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The replica's ``runtime_env``: vLLM's V1 model runner chosen, plus what CPU ranks on
    Ray's executor need."""
    runtime_env = dict(raw.get("runtime_env") or {})
    try:
        env_vars = with_v1_model_runner(dict(runtime_env.get("env_vars") or {}))
    except ValueError as e:
        raise ValueError(f"invalid config: {prefix}runtime_env.env_vars.{e}") from None
    runtime_env["env_vars"] = env_vars
    if _num_cpu_rank_bundles(raw, prefix) is not None:
        runtime_env = ray_cpu_runtime_env(runtime_env)
    return runtime_env


def _check_unique_model_ids(models: tuple[ModelConfig, ...]) -> None:
    """Each model once: its id names its deployment, policy actor and metrics."""
    first: dict[str, int] = {}
    for i, model in enumerate(models):
        model_id = model.llm_config.model_id
        if model_id in first:
            raise ValueError(
                f"invalid config: {LLM_CONFIGS}[{i}].model_loading_config.model_id: "
                f"{model_id!r} is also {LLM_CONFIGS}[{first[model_id]}]'s; model ids must "
                "be unique"
            )
        first[model_id] = i


def _check_ingress(models: tuple[ModelConfig, ...], ingress: dict[str, Any]) -> None:
    """What ``build_openai_app`` would refuse in the ingress fields, refused now."""
    from ray.serve.llm import LLMServingArgs

    llm_configs = [m.llm_config for m in models]
    try:
        LLMServingArgs.model_validate({LLM_CONFIGS: llm_configs, **ingress})
    except ValidationError as e:
        raise ValueError(f"invalid config: {format_errors(e)}") from None
