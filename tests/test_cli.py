"""The command-line entry point lists the operator's commands, and only those."""

from __future__ import annotations

import subprocess
import sys

PRODUCT_COMMANDS = ("demo", "loadgen", "bench-serve", "chaos", "soak", "dashboards", "simulate")
RESEARCH_COMMANDS = ("policy-table", "policy-regret", "bench-policy", "profile-switch-cost")


def test_console_script_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "nightjar_ray.cli.main", "--help"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    commands = out.split("{", 1)[1].split("}", 1)[0].split(",")
    assert tuple(commands) == PRODUCT_COMMANDS
    assert not any(name in out for name in RESEARCH_COMMANDS)
