"""The command-line entry point: its commands, help on every flag, errors without
tracebacks (one line, exit code 2), secrets from the environment."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from nightjar_ray.cli.args import all_parsers
from nightjar_ray.cli.dashboards import credential_of
from nightjar_ray.cli.main import build_parser, main
from nightjar_ray.workload.trace import TRACE_ENV

PRODUCT_COMMANDS = (
    "demo",
    "loadgen",
    "bench-serve",
    "chaos",
    "soak",
    "dashboards",
    "simulate",
    "profile-switch-cost",
    "selfcheck",
)
RESEARCH_COMMANDS = ("policy-table", "policy-regret", "bench-policy")
NO_HELP_NEEDED = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)


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


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match=r"^0$"):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"nightjar-ray {metadata.version('nightjar-ray')}"


def _shown_defaults_missing(parser: argparse.ArgumentParser) -> list[str]:
    """Options of ``parser`` without help, or whose help does not show their default."""
    bad = []
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, NO_HELP_NEEDED):
            continue
        name = f"{parser.prog} {'/'.join(action.option_strings) or action.dest}"
        if not action.help or not action.help.strip() or action.help == argparse.SUPPRESS:
            bad.append(f"{name}: no help")
            continue
        text = " ".join(formatter._format_action(action).split())
        quiet = action.default in (None, []) or (action.default is False and action.nargs == 0)
        if not quiet and f"(default: {action.default})" not in text:
            bad.append(f"{name}: default {action.default!r} not shown in {text!r}")
    return bad


def test_every_option_of_every_command_has_help_showing_its_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: nothing wraps a default
    parsers = list(all_parsers(build_parser()))
    progs = {p.prog for p in parsers}
    assert {"nightjar-ray simulate suite", "nightjar-ray dashboards provision"} <= progs
    assert {f"nightjar-ray {c}" for c in PRODUCT_COMMANDS} <= progs
    bad = [problem for parser in parsers for problem in _shown_defaults_missing(parser)]
    assert bad == []


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["bench-serve", "--scenarios", "low,hihg"], "unknown scenario 'hihg'; choose from low,"),
        (["bench-serve", "--contenders", "off,nigthjar"], "unknown contender 'nigthjar'"),
        (["simulate", "run", "--policy", "nightjr"], "invalid choice: 'nightjr' (choose from"),
        (["simulate", "suite", "--settings", "h100"], "unknown setting 'h100'; choose from"),
        (["simulate", "suite", "--workloads", "lo"], "unknown suite workload 'lo'; choose from"),
        (["simulate", "compare", "--workloads", "x"], "unknown suite workload 'x'; choose from"),
        (["chaos", "--scenario", "node-kill"], "invalid choice: 'node-kill' (choose from"),
        (["simulate", "run", "--policy-params", "{gamma: 2}"], "--policy-params: not JSON"),
        (["bench-serve", "--endpoint", "off"], "expected NAME=URL or NAME=URL,MODEL"),
    ],
)
def test_unknown_names_are_refused_listing_the_valid_ones(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit, match=r"^2$"):
        main(argv)
    err = capsys.readouterr().err
    assert error in err and "Traceback" not in err


FILE, DIR = "no such file", "no such directory"


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["soak", "--trace", "{missing}"], FILE),
        (["bench-serve", "--trace", "{missing}"], FILE),
        (["bench-serve", "--render", "{missing}"], FILE),
        (["simulate", "run", "--scenario", "{missing}"], FILE),
        (["simulate", "run", "--arrival", "trace", "--trace", "{missing}"], FILE),
        (["simulate", "compare", "--trace", "{missing}"], FILE),
        (["simulate", "suite", "--trace", "{missing}"], FILE),
        (["dashboards", "generate", "--root", "{missing}"], DIR),
        (["profile-switch-cost", "--from-config", "{missing}"], FILE),
        (["profile-switch-cost", "--target", "{missing}"], DIR),
        # a file to write whose directory is missing: found before the run, not after it
        (["chaos", "--scenario", "actor-kill", "--out", "{missing}/report.json"], DIR),
        (["simulate", "run", "--timeline-csv", "{missing}/t.csv"], DIR),
        (["bench-serve", "--report", "{missing}/b.md"], DIR),
        (["dashboards", "render", "--out", "{missing}/d.png"], DIR),
        (["profile-switch-cost", "--out", "{missing}/switch-cost.csv"], DIR),
    ],
)
def test_a_missing_file_is_one_line_naming_it(
    argv: list[str], error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(SystemExit, match=r"^2$"):
        main([a.replace("{missing}", str(missing)) for a in argv])
    err = capsys.readouterr().err
    assert f"nightjar-ray {argv[0]}" in err and ": error: argument " in err
    assert f"{error}: {missing}" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["soak"], ["simulate", "compare", "--trace-only"]])
def test_a_missing_default_trace_is_one_line_and_exit_code_2(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    assert main(command) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"nightjar-ray {command[0]}: error: no trace given: pass --trace PATH or set"
        f" {TRACE_ENV} to an Azure-format CSV (TIMESTAMP,ContextTokens,GeneratedTokens)"
    ]
    missing = tmp_path / "missing.csv"
    monkeypatch.setenv(TRACE_ENV, str(missing))
    assert main(command) == 2
    assert capsys.readouterr().err == (
        f"nightjar-ray {command[0]}: error: {TRACE_ENV}: trace file {missing} does not exist\n"
    )


def test_a_malformed_header_is_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for command in (["soak"], ["chaos", "--scenario", "actor-kill"], ["bench-serve"]):
        assert main([*command, "--header", "no-colon"]) == 2
        assert capsys.readouterr().err == (
            f"nightjar-ray {command[0]}: error: --header 'no-colon': expected 'Name: value'\n"
        )


def test_grafana_secrets_come_from_the_environment(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--password", "--token"):
        with pytest.raises(SystemExit, match=r"^2$"):
            main(["dashboards", "provision", "--url", "http://g:3000", flag, "s3cret"])
        assert f"{flag} is not taken on the command line; set $GRAFANA_" in capsys.readouterr().err
    parser = build_parser()

    def parsed(*argv: str) -> argparse.Namespace:
        return parser.parse_args(["dashboards", "provision", "--url", "http://g:3000", *argv])

    env = {"GRAFANA_PASSWORD": "pw", "GRAFANA_TOKEN": "tok", "MY_PW": "mine"}
    assert credential_of(parsed("--user", "admin"), env) == ("admin", "pw")
    assert credential_of(parsed("--user", "admin", "--password-env", "MY_PW"), env) == (
        "admin",
        "mine",
    )
    assert credential_of(parsed(), env) == "tok"
    assert credential_of(parsed(), {}) is None
    with pytest.raises(ValueError, match=r"--user admin: set \$GRAFANA_PASSWORD"):
        credential_of(parsed("--user", "admin"), {"GRAFANA_TOKEN": "tok"})
