"""The app's one typed config: Ray Serve LLM's ``LLMConfig`` fields plus ``nightjar:``.

::

    args:                                  # a Serve application's `args`
      model_loading_config: {...}          # LLMConfig fields, as Ray Serve LLM documents
      engine_kwargs: {speculative_config: {method: draft_model, model: ...}, ...}
      deployment_config: {autoscaling_config: {...}}
      nightjar: {policy: nightjar, gamma_max: 4, pooling: {...}}   # NightjarConfig

:func:`parse_app_config` validates all of it before anything starts and raises
``ValueError`` whose message names every bad field (``nightjar.gamma_max``,
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

from nightjar_ray.engine.args import nightjar_engine_args
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
class AppConfig:
    """A validated app config: the Nightjar block and the ``LLMConfig`` to serve."""

    nightjar: NightjarConfig
    llm_config: Any


def parse_nightjar(raw: Any) -> NightjarConfig:
    """The ``nightjar:`` block; ``ValueError`` names ``nightjar.<field>``."""
    try:
        return NightjarConfig.model_validate(raw or {})
    except ValidationError as e:
        raise ValueError(f"invalid config: {format_errors(e, 'nightjar')}") from None


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
    try:
        return resolve_generated(source)
    except ValueError as e:
        raise ValueError(f"invalid config: {field}: {e}") from None


def generated_dtype(source: Any) -> str | None:
    """The dtype of the generated pair ``source`` names, or None for other sources."""
    split = _split_generated(source) if isinstance(source, str) else None
    spec = None if split is None else GENERATED_PAIRS.get(split[0])
    return None if spec is None else spec.dtype


def _engine_kwargs(raw: dict[str, Any], config: NightjarConfig) -> dict[str, Any]:
    kwargs = dict(raw.get("engine_kwargs") or {})
    loading = raw.get("model_loading_config")
    dtype = generated_dtype(loading.get("model_source") if isinstance(loading, dict) else None)
    if dtype is not None:
        # NOTE: vLLM's "auto" would compute a float32 pair in bfloat16 on x86 CPUs.
        kwargs.setdefault("dtype", dtype)
    spec = dict(kwargs.get("speculative_config") or {})
    if isinstance(spec.get("model"), str):
        spec["model"] = _resolve(spec["model"], "engine_kwargs.speculative_config.model")
    kwargs["speculative_config"] = spec
    try:
        return nightjar_engine_args(config, start_hook=SERVE_START_HOOK, **kwargs)
    except ValueError as e:
        raise ValueError(f"invalid config: engine_kwargs: {e}") from None


def _model_loading(raw: dict[str, Any]) -> Any:
    loading = raw.get("model_loading_config")
    if isinstance(loading, dict) and isinstance(loading.get("model_source"), str):
        source = _resolve(loading["model_source"], "model_loading_config.model_source")
        loading = {**loading, "model_source": source}
    return loading


def _num_cpu_rank_bundles(raw: dict[str, Any]) -> int | None:
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
    if kwargs.get("distributed_executor_backend") != "ray":
        raise ValueError(
            f"invalid config: placement_group_config.bundles: {RAY_CPU_RESOURCE!r} places "
            "CPU ranks on Ray's executor; set engine_kwargs.distributed_executor_backend: ray"
        )
    if count < world_size:
        raise ValueError(
            f"invalid config: placement_group_config.bundles: {count} bundle(s) ask for "
            f"{RAY_CPU_RESOURCE!r}, the engine has {world_size} ranks (one bundle per rank)"
        )
    return count


def parse_app_config(args: Any) -> AppConfig:
    """Validate a Serve app's ``args`` (see module docstring). Starts nothing."""
    from ray.serve.llm import LLMConfig

    from nightjar_ray.serve.server import NightjarLLMServer

    if not isinstance(args, dict):
        raise ValueError(f"invalid config: app args must be a mapping, got {type(args).__name__}")
    raw = dict(args)
    config = parse_nightjar(raw.pop("nightjar", None))
    if raw.get("server_cls") is not None:
        raise ValueError("invalid config: server_cls is set by nightjar_ray.serve; remove it")
    raw["engine_kwargs"] = _engine_kwargs(raw, config)
    if "model_loading_config" in raw:
        raw["model_loading_config"] = _model_loading(raw)
    raw["server_cls"] = NightjarLLMServer
    if _num_cpu_rank_bundles(raw) is not None:
        raw["runtime_env"] = ray_cpu_runtime_env(dict(raw.get("runtime_env") or {}))
    try:
        llm_config = LLMConfig.model_validate(raw)
    except ValidationError as e:
        raise ValueError(f"invalid config: {format_errors(e)}") from None
    return AppConfig(config, llm_config)
