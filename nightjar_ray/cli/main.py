"""``nightjar-ray``: one sub-command per module.

Each command module exposes ``register(subparsers)``, which adds its parser and
sets ``func`` (taking the parsed namespace, returning an exit code). Heavy
imports (vllm, ray) happen inside ``func`` so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nightjar_ray.cli import (
    bench_serve,
    chaos,
    dashboards,
    demo,
    loadgen,
    simulate,
    soak,
)

COMMANDS = (demo, loadgen, bench_serve, chaos, soak, dashboards, simulate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nightjar-ray", description="Load-adaptive speculative decoding on Ray Serve."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
