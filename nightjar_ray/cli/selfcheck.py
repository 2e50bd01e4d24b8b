"""``nightjar-ray selfcheck``: check Nightjar on this node with a target/draft pair.

Runs stock vLLM and Nightjar engines on the pair (``engine/selfcheck.py``), prints one
PASS/FAIL line per check and a summary, writes ``selfcheck.json`` and the switch-cost
profile (``switch-cost.csv``, with the deploy config line that reads it) to ``--out`` and
exits 0 only if every line passed (1 otherwise; 2 on bad input). Without ``--target/--draft``
on a CPU it checks the generated tiny pair (built here, nothing downloaded), so the
command alone works in CI.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightjar_ray.cli.args import UsageError, json_object, names
from nightjar_ray.cli.profile_switch_cost import config_lines
from nightjar_ray.engine.selfcheck import CHECK_NAMES, SWITCH_COST_FILE, SelfCheckSetup
from nightjar_ray.engine.selfcheck_switch_cost import FULL_GRID, SELFCHECK_GRID

if TYPE_CHECKING:
    from nightjar_ray.engine.offline import ModelSources

REPORT_FILE = "selfcheck.json"
DEFAULT_PAIR = "generated:tiny"
FLAG_OF_FIELD = {
    "tensor_parallel_size": "--tensor-parallel-size",
    "num_speculative_tokens": "--num-speculative-tokens",
    "num_prompts": "--prompts",
    "max_tokens": "--max-tokens",
}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "selfcheck",
        help="Check Nightjar on this node with your target/draft pair: lossless outputs, "
        "a gamma schedule with catch-up, CUDA graph per gamma, elastic memory cycles, event "
        "latencies, a switch-cost profile.",
    )
    p.add_argument(
        "--target",
        help="Target model: a local directory, a model id this node can load, or "
        f"generated:<pair>. Default on a CPU: {DEFAULT_PAIR} (with --draft); needed on a GPU.",
    )
    p.add_argument("--draft", help="Draft model, as --target (needed with --target).")
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        help="Engine defaults for this device. Default: cuda if PyTorch sees a GPU, else cpu.",
    )
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="Ranks of target and draft.")
    p.add_argument(
        "--num-speculative-tokens", type=int, default=3, help="The largest gamma (gamma_max)."
    )
    p.add_argument(
        "--prompts", type=int, default=20, help="Prompts per run (>= 8: they fill the pool)."
    )
    p.add_argument("--max-tokens", type=int, default=48, help="Tokens generated per prompt.")
    p.add_argument(
        "--dtype",
        help="vLLM dtype of both models. Default: a generated pair's own, else 'auto'.",
    )
    p.add_argument(
        "--cuda-graphs",
        choices=("stock", "per-gamma"),
        default="stock",
        help="Your deploy config's nightjar.cuda_graphs (the Nightjar engines run with it; "
        "the graph-modes line checks it).",
    )
    p.add_argument(
        "--full-switch-cost-grid",
        action="store_true",
        help=f"Profile C_switch over profile-switch-cost's grid (L_max {FULL_GRID.skip_tokens}, "
        f"B {FULL_GRID.batch_sizes}, {FULL_GRID.repeats} repeats) instead of the quick "
        f"{SELFCHECK_GRID.skip_tokens} x {SELFCHECK_GRID.batch_sizes}.",
    )
    p.add_argument(
        "--engine-kwargs",
        type=json_object,
        default={},
        help="vllm.LLM kwargs over the check's own, as JSON (e.g. '{\"max_model_len\": 512}').",
    )
    p.add_argument(
        "--checks",
        type=names(CHECK_NAMES, "check"),
        default=",".join(CHECK_NAMES),
        help="Comma-separated checks to run.",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("selfcheck"),
        help=f"Directory for {REPORT_FILE} and {SWITCH_COST_FILE}.",
    )
    p.set_defaults(func=run)


def _device(args: argparse.Namespace) -> str:
    if args.device is not None:
        return str(args.device)
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _sources(args: argparse.Namespace, device: str) -> tuple[str, str, str | None]:
    """Target and draft as given (the default pair when neither is) and the dtype."""
    from nightjar_ray.serve.config import GENERATED_PAIRS, GENERATED_PREFIX

    if args.target is None and device != "cpu":
        raise UsageError("--target and --draft: needed on a GPU (directories or model ids)")
    target = args.target or DEFAULT_PAIR
    draft = args.draft or f"{DEFAULT_PAIR}/draft"
    dtype = args.dtype
    if dtype is None and target.startswith(GENERATED_PREFIX):
        name = target[len(GENERATED_PREFIX) :].partition("/")[0]
        dtype = GENERATED_PAIRS[name].dtype if name in GENERATED_PAIRS else None
    return target, draft, dtype


def _resolved(models: ModelSources) -> ModelSources:
    """The sources with generated pairs built here (a usage error naming the flag)."""
    from nightjar_ray.engine.offline import ModelSources
    from nightjar_ray.serve.config import resolve_generated

    resolved = []
    for flag, source in (("--target", models.target), ("--draft", models.draft)):
        try:
            resolved.append(resolve_generated(source))
        except ValueError as e:
            raise UsageError(f"{flag}: {e}") from None
    return ModelSources(resolved[0], resolved[1], models.dtype)


def setup_of(args: argparse.Namespace) -> SelfCheckSetup:
    """The engine-side setup of the parsed flags, or a usage error naming the flag; every
    flag is checked before a generated pair is built."""
    from nightjar_ray.engine.offline import ModelSources

    if (args.target is None) != (args.draft is None):
        raise UsageError("--target and --draft: give both or neither")
    device = _device(args)
    target, draft, dtype = _sources(args, device)
    try:
        setup = SelfCheckSetup(
            ModelSources(target, draft, dtype or "auto"),
            device="cuda" if device == "cuda" else "cpu",
            tensor_parallel_size=args.tensor_parallel_size,
            num_prompts=args.prompts,
            max_tokens=args.max_tokens,
            num_speculative_tokens=args.num_speculative_tokens,
            cuda_graphs=args.cuda_graphs,
            switch_cost_grid=FULL_GRID if args.full_switch_cost_grid else SELFCHECK_GRID,
            engine_overrides=args.engine_kwargs,
        )
    except ValueError as e:  # its message starts with the field's name
        field = str(e).split(maxsplit=1)[0]
        raise UsageError(f"{FLAG_OF_FIELD.get(field, field)}: {e}") from None
    return dataclasses.replace(setup, models=_resolved(setup.models))


def _say(message: str) -> None:
    print(f"  running {message}", flush=True)


def run(args: argparse.Namespace) -> int:
    from nightjar_ray.engine.selfcheck import run_selfcheck

    setup = setup_of(args)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"selfcheck: {setup.models.target} with draft {setup.models.draft} on {setup.device}")
    report = run_selfcheck(setup, args.checks, say=_say, out_dir=args.out)
    print(report.format())
    path = args.out / REPORT_FILE
    path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    if any(line.name == "switch-cost" and line.passed for line in report.lines):
        for line in config_lines(args.out / SWITCH_COST_FILE):
            print(line)
    print(f"report: {path}", file=sys.stderr)
    return report.exit_code
