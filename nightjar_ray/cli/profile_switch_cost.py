"""``nightjar-ray profile-switch-cost``: measure C_switch(L_max, B), write the CSV.

Starts one vLLM engine on the target/draft pair (``--target/--draft``, or a
generated pair), runs the grid (see ``nightjar_ray.engine.profiler``) and
writes ``max_skip_tokens,num_reqs,switch_cost_ms`` rows, the profile that
``NightjarConfig(switch_cost_profile=PATH)`` feeds to the nightjar presets (only
``nightjar-paper`` weighs it; the default preset's switch weight is 0).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from nightjar_ray.models.pair import TINY_SPEC, ModelPair, PairSpec, generate_pair

DEFAULT_PAIR_DIR = Path.home() / ".cache" / "nightjar-ray" / "pairs"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "profile-switch-cost", help="Measure C_switch(L_max, B) and write the profile CSV."
    )
    parser.add_argument("--out", required=True, help="Profile CSV to write.")
    parser.add_argument("--target", help="Target model directory (default: generated pair).")
    parser.add_argument("--draft", help="Draft model directory (with --target).")
    parser.add_argument("--pair-dir", default=str(DEFAULT_PAIR_DIR), help="Generated pairs.")
    parser.add_argument("--residual-scale", type=float, default=0.05, help="Generated pair s.")
    parser.add_argument("--tiny", action="store_true", help="Generate the small test pair.")
    parser.add_argument("--skip-tokens", default="16,64,256,512", help="L_max grid.")
    parser.add_argument("--batch-sizes", default="1,2,4,8,16", help="B grid.")
    parser.add_argument("--repeats", type=int, default=3, help="Samples per point (median).")
    parser.set_defaults(func=run)


def resolve_pair(args: argparse.Namespace) -> ModelPair:
    """The pair named by ``--target/--draft`` or a generated one."""
    if bool(args.target) != bool(args.draft):
        raise ValueError("--target and --draft go together")
    if args.target:
        config = json.loads((Path(args.target) / "config.json").read_text())
        spec = replace(PairSpec(), vocab_size=int(config["vocab_size"]))
        return ModelPair(Path(args.target), Path(args.draft), spec)
    base = TINY_SPEC if args.tiny else PairSpec()
    spec = replace(base, residual_scale=args.residual_scale)
    name = f"{'tiny' if args.tiny else 'bench'}-s{args.residual_scale:g}"
    return generate_pair(Path(args.pair_dir) / name, spec)


def run(args: argparse.Namespace) -> int:
    from nightjar_ray.engine.offline import offline_engine
    from nightjar_ray.engine.profiler import (
        PROFILE_CONFIG,
        ProfileGrid,
        engine_overrides,
        parse_ints,
        profile_switch_cost,
    )

    grid = ProfileGrid(
        tuple(parse_ints(args.skip_tokens, "--skip-tokens")),
        tuple(parse_ints(args.batch_sizes, "--batch-sizes")),
        args.repeats,
    )
    pair = resolve_pair(args)
    with offline_engine(pair, PROFILE_CONFIG, **engine_overrides(grid)) as llm:
        table = profile_switch_cost(llm, grid, pair.spec.vocab_size, progress=print)
    table.save(args.out)
    print(f"wrote {args.out}")
    return 0
