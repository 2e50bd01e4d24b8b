"""The model of a Serve deploy file, as ``profile-switch-cost --from-config`` profiles it.

The file is validated by the app's own parser (``serve.config.parse_app_config``), so a
file that would not deploy is refused here too, naming the field. From the chosen model
the profiler takes the target (``model_loading_config``), the draft
(``speculative_config.model``), the tensor parallel size and the other engine kwargs;
it leaves out what only serving needs (Nightjar's scheduler, worker and config, the
executor backend: the profile runs on one node with vLLM's default executor).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nightjar_ray.cli.args import UsageError
from nightjar_ray.engine.args import START_HOOK_KEY
from nightjar_ray.engine.config import ADDITIONAL_CONFIG_KEY
from nightjar_ray.engine.switch_cost_profiler import PROFILER_OWNED, PROFILER_OWNED_SPEC

SERVING_ONLY = ("distributed_executor_backend",)
"""Engine kwargs of a deploy file the profile leaves to vLLM's defaults."""


@dataclass(frozen=True)
class DeployModel:
    """One model of a deploy file: the pair, its TP size, the rest of its engine kwargs
    (``speculative_config`` holding only fields the profiler does not set), and where it
    is (``path``; ``field``: ``applications[0].args`` or ``...args.llm_configs[1]``)."""

    target: str
    draft: str
    tensor_parallel_size: int
    engine_args: dict[str, Any]
    path: Path
    field: str


def _load_apps(path: Path) -> list[Any]:
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise UsageError(f"--from-config {path}: not YAML ({str(e).splitlines()[0]})") from None
    apps = loaded.get("applications") if isinstance(loaded, dict) else None
    if not isinstance(apps, list) or not apps:
        raise UsageError(f"--from-config {path}: expected a Serve config with applications:")
    return apps


def _pick(items: list[Any], names: list[Any], wanted: str | None, what: str, flag: str) -> int:
    """Index of ``wanted`` in ``names``; the only item when ``wanted`` is None."""
    if wanted is None:
        if len(items) == 1:
            return 0
        raise UsageError(f"--from-config has {len(items)} {what}s ({names}); choose with {flag}")
    if wanted not in names:
        raise UsageError(f"{flag} {wanted!r}: not in --from-config (its {what}s: {names})")
    return names.index(wanted)


def read_deploy_model(path: Path, app_name: str | None, model_id: str | None) -> DeployModel:
    """The model ``app_name``/``model_id`` choose in the Serve config ``path`` (each may be
    None where the file has one)."""
    from nightjar_ray.serve.config import LLM_CONFIGS, parse_app_config

    apps = _load_apps(path)
    names = [a.get("name") if isinstance(a, dict) else None for a in apps]
    index = _pick(apps, names, app_name, "application", "--app")
    field = f"applications[{index}].args"
    try:
        parsed = parse_app_config(apps[index].get("args"))
    except ValueError as e:
        raise UsageError(f"--from-config {path}: {field}: {e}") from None
    model_ids = [m.llm_config.model_id for m in parsed.models]
    chosen = _pick(list(parsed.models), model_ids, model_id, "model", "--model-id")
    if LLM_CONFIGS in apps[index]["args"]:
        field = f"{field}.{LLM_CONFIGS}[{chosen}]"
    return _deploy_model(parsed.models[chosen].llm_config, path, field)


def _deploy_model(llm_config: Any, path: Path, field: str) -> DeployModel:
    loading = llm_config.model_loading_config
    kwargs = dict(llm_config.engine_kwargs)
    spec = dict(kwargs.pop("speculative_config", None) or {})
    if spec.get("method") != "draft_model":
        raise UsageError(
            f"--from-config {path}: {field}.engine_kwargs.speculative_config.method is "
            f"{spec.get('method')!r}; the profile times a draft model's catch-up (draft_model)"
        )
    additional = {
        k: v
        for k, v in dict(kwargs.pop("additional_config", None) or {}).items()
        if k not in (ADDITIONAL_CONFIG_KEY, START_HOOK_KEY)
    }
    tp = int(kwargs.get("tensor_parallel_size", 1))
    args = {k: v for k, v in kwargs.items() if k not in (*PROFILER_OWNED, *SERVING_ONLY)}
    extra_spec = {k: v for k, v in spec.items() if k not in PROFILER_OWNED_SPEC}
    if extra_spec:
        args["speculative_config"] = extra_spec
    if additional:
        args["additional_config"] = additional
    target = loading.model_source or loading.model_id
    if not isinstance(target, str):
        raise UsageError(
            f"--from-config {path}: {field}.model_loading_config.model_source is not a "
            "model id or directory; pass --target"
        )
    return DeployModel(target, str(spec["model"]), tp, args, path, field)
