"""``nightjar-ray``: one sub-command per module.

Each command module exposes ``register(subparsers)``, which adds its parser and
sets ``func`` (taking the parsed namespace, returning an exit code). Heavy
imports (vllm, ray) happen inside ``func`` so ``--help`` stays fast. Every parser shows
each option's default (``cli.args.HelpFormatter``); a :class:`~nightjar_ray.cli.args.UsageError`
from ``func`` ends the command with one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata

from nightjar_ray.cli import (
    bench_serve,
    chaos,
    dashboards,
    demo,
    loadgen,
    profile_switch_cost,
    selfcheck,
    simulate,
    soak,
)
from nightjar_ray.cli.args import HelpFormatter, UsageError, all_parsers

COMMANDS = (
    demo,
    loadgen,
    bench_serve,
    chaos,
    soak,
    dashboards,
    simulate,
    profile_switch_cost,
    selfcheck,
)
DISTRIBUTION = "nightjar-ray"
EXTRA_BY_MODULE = {
    "vllm": "cpu] or [gpu",
    "torch": "cpu] or [gpu",
    "transformers": "loadgen",
    "grafana_client": "ops",
}
"""Top-level modules an extra provides, and the extra a command that needs one asks for."""


def version() -> str:
    """The installed distribution's version (``unknown`` when run from a bare checkout)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nightjar-ray", description="Load-adaptive speculative decoding on Ray Serve."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(subparsers)
    for each in all_parsers(parser):
        each.formatter_class = HelpFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except UsageError as e:
        print(f"nightjar-ray {args.command}: error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        top = (e.name or "").partition(".")[0]
        if top not in EXTRA_BY_MODULE:
            raise
        print(
            f"nightjar-ray {args.command}: error: needs {top!r}, which the "
            f"nightjar-ray[{EXTRA_BY_MODULE[top]}] extra installs (docs/install.md)",
            file=sys.stderr,
        )
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
