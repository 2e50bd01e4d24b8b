"""``nightjar-ray profile-switch-cost``: measure C_switch(L_max, B) on this node.

Starts one Nightjar engine on a target/draft pair and times the draft catch-up after
gamma=0 steps over a grid of lags and batch sizes (``engine/switch_cost_profiler.py``),
then writes the profile CSV that ``nightjar.switch_cost_profile`` reads and prints the
line to add to the deploy config.

The pair is ``--target/--draft`` (a local directory, a model id the node can load, or
``generated:<pair>[/draft]``), or a deploy file's model (``--from-config``: its model,
draft, tensor parallel size and engine kwargs); flags win over the file. Engine defaults
follow ``--device``: on CUDA, graphs captured and 90% of the GPU, as the deploy files
serve; on CPU, eager with a 1 GiB KV cache. ``--engine-arg KEY=VALUE`` overrides any.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nightjar_ray.cli.args import UsageError, existing_file, output_file, positive_int
from nightjar_ray.cli.profile_config import DeployModel, read_deploy_model
from nightjar_ray.engine.switch_cost_profiler import (
    DEVICES,
    PROFILER_OWNED,
    Device,
    ProfileGrid,
    ProfilerEngine,
)

DEFAULT_TARGET = "generated:default"
DEFAULT_DRAFT = "generated:default/draft"
OWNING_FLAG = {"model": "--target", "tensor_parallel_size": "--tensor-parallel-size"}
"""Engine kwargs set by a flag of this command rather than by ``--engine-arg``."""
LOCAL_PREFIXES = ("/", "./", "../", "~")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "profile-switch-cost",
        help="Measure the draft catch-up cost C_switch(L_max, B) on this node.",
    )
    _add_model_args(p)
    _add_engine_args(p)
    p.add_argument(
        "--skip-tokens", type=int_list, default="16,64,256,512", help="L_max grid (tokens)."
    )
    p.add_argument("--batch-sizes", type=int_list, default="1,2,4,8,16", help="B grid.")
    p.add_argument("--repeats", type=positive_int, default=3, help="Samples per point (median).")
    p.add_argument(
        "--out",
        type=output_file,
        metavar="CSV",
        help="Profile CSV to write (default: profiles/ in the nightjar-ray cache directory).",
    )
    p.set_defaults(func=run)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--target",
        type=model_source,
        metavar="SOURCE",
        help="Target model: a local directory, a model id this node can load, or "
        f"generated:<pair> (default: --from-config's model, else {DEFAULT_TARGET}).",
    )
    p.add_argument(
        "--draft",
        type=model_source,
        metavar="SOURCE",
        help=f"Draft model, as --target (default: --from-config's draft, else {DEFAULT_DRAFT}).",
    )
    p.add_argument(
        "--from-config",
        type=existing_file,
        metavar="FILE",
        help="Serve deploy file (e.g. deploy/gpu-32b-tp2.yaml) whose model, draft, tensor "
        "parallel size and engine kwargs to profile.",
    )
    p.add_argument(
        "--app", metavar="NAME", help="Application of --from-config (default: its only one)."
    )
    p.add_argument(
        "--model-id",
        metavar="ID",
        help="Model of an llm_configs app in --from-config (default: its only one).",
    )


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tensor-parallel-size",
        type=positive_int,
        metavar="N",
        help="Tensor parallel size of target and draft (default: --from-config's, else 1).",
    )
    p.add_argument(
        "--device",
        choices=DEVICES,
        help="Device whose engine defaults apply (default: cuda when torch sees a GPU, else cpu).",
    )
    p.add_argument(
        "--engine-arg",
        type=engine_arg,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="vLLM engine argument over the device defaults and --from-config, repeatable; "
        "VALUE is YAML (true, 0.85, 4096, {cudagraph_mode: FULL}).",
    )


def model_source(value: str) -> str:
    """A type for a model: a local directory (one that looks like a path must exist and
    hold a ``config.json``), or anything else unchanged (a model id, ``generated:...``)."""
    path = Path(value).expanduser()
    if not (value.startswith(LOCAL_PREFIXES) or value in (".", "..") or path.exists()):
        return value
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"no such directory: {value}")
    if not (path / "config.json").is_file():
        raise argparse.ArgumentTypeError(f"no config.json in {value} (not a model directory)")
    return str(path)


def int_list(value: str) -> tuple[int, ...]:
    """A type for comma-separated integers >= 1."""
    try:
        values = tuple(positive_int(v.strip()) for v in value.split(",") if v.strip())
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers >= 1, got {value!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {value!r}")
    return values


def engine_arg(value: str) -> tuple[str, Any]:
    """A type for ``KEY=VALUE``: the key and the value read as YAML."""
    import yaml

    key, sep, raw = value.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {value!r}")
    if key in PROFILER_OWNED or key == "speculative_config":
        owner = OWNING_FLAG.get(key, "--draft" if key == "speculative_config" else "")
        by = f"set by {owner}" if owner else "set by the profiler"
        raise argparse.ArgumentTypeError(f"{key} is {by}; do not pass it here")
    try:
        return key, yaml.safe_load(raw)
    except yaml.YAMLError as e:
        problem = str(e).splitlines()[0]
        raise argparse.ArgumentTypeError(f"{key}: VALUE is not YAML ({problem})") from None


def resolve_device(requested: str | None, cuda_available: bool) -> Device:
    """``requested``, or cuda when available else cpu; cuda without a GPU is an error."""
    if requested == "cuda" and not cuda_available:
        raise UsageError(
            "--device cuda: torch sees no CUDA device on this node; profile with --device cpu"
        )
    if requested == "cpu" or (requested is None and not cuda_available):
        return "cpu"
    return "cuda"


@dataclass(frozen=True)
class ProfileRequest:
    """What the flags ask for, resolved: the engine, the grid and the pair's sources as
    given (``target_source`` names the output file)."""

    engine: ProfilerEngine
    grid: ProfileGrid
    target_source: str
    draft_source: str
    deploy: DeployModel | None = None


def profile_request(args: argparse.Namespace, device: Device) -> ProfileRequest:
    """The engine and grid the flags name, ``--from-config`` under them. Starts nothing
    (a ``generated:`` pair is built on first use, as the deploy files build it)."""
    deploy = (
        read_deploy_model(args.from_config, args.app, args.model_id) if args.from_config else None
    )
    if deploy is None and (args.app or args.model_id):
        raise UsageError("--app and --model-id choose within --from-config; pass it too")
    if deploy is None and (args.target is None) != (args.draft is None):
        raise UsageError("--target and --draft go together (or take both from --from-config)")
    target = args.target or (deploy.target if deploy else DEFAULT_TARGET)
    draft = args.draft or (deploy.draft if deploy else DEFAULT_DRAFT)
    tp = args.tensor_parallel_size or (deploy.tensor_parallel_size if deploy else 1)
    engine_args = dict(deploy.engine_args) if deploy else {}
    engine_args.update(dict(args.engine_arg))
    _check_engine_arg_names([key for key, _ in args.engine_arg])
    engine_args = _with_generated(engine_args, target, draft)
    try:
        grid = ProfileGrid(args.skip_tokens, args.batch_sizes, args.repeats)
        engine = ProfilerEngine(
            _resolve(target, "--target"), _resolve(draft, "--draft"), device, tp, engine_args
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    return ProfileRequest(engine, grid, target, draft, deploy)


def _check_engine_arg_names(names: list[str]) -> None:
    from nightjar_ray.engine.switch_cost_profiler import check_engine_arg_names

    try:
        check_engine_arg_names(names)
    except ValueError as e:
        raise UsageError(f"--engine-arg: {e}") from None


def _with_generated(engine_args: dict[str, Any], target: str, draft: str) -> dict[str, Any]:
    """A generated pair computes in its own dtype unless ``dtype`` is given (vLLM's
    ``auto`` would compute a float32 pair in bfloat16 on x86)."""
    from nightjar_ray.serve.config import generated_dtype

    dtype = generated_dtype(target) or generated_dtype(draft)
    return engine_args if dtype is None else {"dtype": dtype, **engine_args}


def _resolve(source: str, flag: str) -> str:
    from nightjar_ray.serve.config import resolve_generated

    try:
        return resolve_generated(source)
    except ValueError as e:
        raise UsageError(f"{flag}: {e}") from None


def default_out(request: ProfileRequest) -> Path:
    """``<cache>/profiles/switch-cost-<target>-tp<N>-<device>.csv``."""
    from nightjar_ray.serve.config import cache_dir

    name = re.sub(r"[^A-Za-z0-9._]+", "-", request.target_source).strip("-") or "model"
    engine = request.engine
    stem = f"switch-cost-{name}-tp{engine.tensor_parallel_size}-{engine.device}"
    return cache_dir() / "profiles" / f"{stem}.csv"


def config_lines(out: Path, deploy: DeployModel | None = None) -> list[str]:
    """What to add to the deploy config (``deploy``'s, if known) to use the profile
    written to ``out``."""
    where = "the model's nightjar block"
    if deploy is not None:
        where = f"{deploy.field}.nightjar in {deploy.path}"
    return [
        f"add to {where} (every node that runs a replica needs the file at this path):",
        f"  switch_cost_profile: {out.resolve()}",
        "read by the nightjar-paper preset (or a switch_cost_weight > 0); the default "
        "nightjar preset prices catch-ups with its draft gate instead",
    ]


def run(args: argparse.Namespace) -> int:
    import torch

    from nightjar_ray.engine.switch_cost_profiler import profile_switch_cost, profiler_engine

    device = resolve_device(args.device, torch.cuda.is_available())
    request = profile_request(args, device)
    out: Path = args.out or default_out(request)
    engine = request.engine
    print(
        f"profiling {engine.target} with draft {engine.draft} on {engine.device}, "
        f"tensor parallel size {engine.tensor_parallel_size}"
    )
    with profiler_engine(engine, request.grid) as llm:
        table = profile_switch_cost(llm, request.grid, progress=print)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.save(out)
    print(f"wrote {out}")
    for line in config_lines(out, request.deploy):
        print(line)
    return 0
