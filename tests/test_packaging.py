"""Every console command imports and runs ``--help`` with only the runtime dependencies.

Method (instead of a fresh virtualenv, which costs minutes of network install): the
runtime closure is computed from metadata. The roots are ``[project].dependencies`` of
this checkout's ``pyproject.toml`` (no extras of nightjar-ray); each requirement whose
marker holds on this interpreter is followed through the installed distributions'
``Requires-Dist``, with the extras the requirement asks for (``ray[serve]`` brings Ray's
``serve`` extra), recursively. ``importlib.metadata.packages_distributions()`` maps every
top-level module to the distributions that provide it; the allowed modules are those of
the closure's distributions, the standard library (``sys.stdlib_module_names``, and
modules found in the interpreter's stdlib folder outside ``site-packages``, such as
``_sysconfigdata_*``) and ``nightjar_ray`` itself. Each command then runs in a subprocess
whose first ``sys.meta_path`` finder raises ``ModuleNotFoundError`` for any other top-level
module, as an environment without it would: a command that imports, say, vllm or
matplotlib at ``--help`` time while it is not a runtime dependency fails.

Limits: the closure is that of this machine's installed versions (a distribution of the
closure that is not installed here allows nothing, so the check errs on the strict side);
modules loaded before the finder is installed (``site``, ``.pth`` hooks) are not checked.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from nightjar_ray.cli.main import build_parser

REPO = Path(__file__).resolve().parents[1]

# Installs the finder, then calls the console script's object ``module:attr`` with
# ``sys.argv`` set as the script would: python -c BOOT <allowed JSON> <module:attr> <prog> args
BOOT = """
import importlib, importlib.abc, importlib.machinery, json, sys, sysconfig
allowed = frozenset(json.loads(sys.argv[1]))
stdlib = tuple({sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")})
def in_stdlib(top):
    spec = importlib.machinery.PathFinder.find_spec(top)
    where = spec and (spec.origin or "")
    return bool(where) and where.startswith(stdlib) and "site-packages" not in where
class RuntimeOnly(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in allowed or top in sys.stdlib_module_names or in_stdlib(top):
            return None
        raise ModuleNotFoundError(
            f"No module named {top!r} (not in nightjar-ray's runtime dependencies)", name=top
        )
sys.meta_path.insert(0, RuntimeOnly())
module, _, attr = sys.argv[2].partition(":")
sys.argv = sys.argv[3:]
sys.exit(getattr(importlib.import_module(module), attr)())
"""


def _pyproject() -> dict[str, object]:
    with (REPO / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]  # type: ignore[no-any-return]


def runtime_closure(roots: list[str]) -> set[str]:
    """Canonical names of the installed distributions ``roots`` need, recursively."""
    extras_of: dict[str, set[str]] = {}
    pending = [Requirement(r) for r in roots]
    while pending:
        req = pending.pop()
        name = canonicalize_name(req.name)
        new = set(req.extras) - extras_of.get(name, set())
        if name in extras_of and not new:
            continue
        extras = extras_of.setdefault(name, set())
        extras |= set(req.extras)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            dep = Requirement(line)
            wanted = {"", *extras}
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in wanted):
                pending.append(dep)
    return set(extras_of)


def allowed_modules(closure: set[str]) -> set[str]:
    """Top-level modules the distributions in ``closure`` provide, plus ``nightjar_ray``."""
    provided = metadata.packages_distributions()
    allowed = {
        module
        for module, dists in provided.items()
        if any(canonicalize_name(d) in closure for d in dists)
    }
    return allowed | {"nightjar_ray"}


@functools.cache
def _allowed_json() -> str:
    closure = runtime_closure(list(_pyproject()["dependencies"]))  # type: ignore[call-overload]
    return json.dumps(sorted(allowed_modules(closure)))


def run_runtime_only(entry: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run the callable ``entry`` (``module:attr``) with only runtime modules importable."""
    return subprocess.run(
        [sys.executable, "-c", BOOT, _allowed_json(), entry, *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


def command_paths(parser: argparse.ArgumentParser) -> Iterator[list[str]]:
    """Every sub-command path of ``parser``, the bare program first."""
    yield []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                for rest in command_paths(sub):
                    yield [name, *rest]


SCRIPTS: dict[str, str] = _pyproject()["scripts"]  # type: ignore[assignment]
COMMANDS = [
    (script, path)
    for script in SCRIPTS
    for path in command_paths(build_parser())
    if SCRIPTS[script] == "nightjar_ray.cli.main:main"
]


def test_every_console_script_is_walked() -> None:
    assert set(SCRIPTS) == {script for script, _ in COMMANDS}


@pytest.mark.parametrize(("script", "path"), COMMANDS, ids=[" ".join([s, *p]) for s, p in COMMANDS])
def test_command_help_runs_with_only_runtime_dependencies(script: str, path: list[str]) -> None:
    proc = run_runtime_only(SCRIPTS[script], [script, *path, "--help"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {' '.join([script, *path])}"), proc.stdout


@pytest.mark.parametrize("module", ["vllm", "torch", "transformers", "grafana_client"])
def test_a_module_outside_the_runtime_closure_is_refused(module: str) -> None:
    """The finder refuses modules this environment has but the runtime closure does not."""
    assert metadata.packages_distributions().get(module), f"{module} is not installed here"
    proc = run_runtime_only(f"{module}:__name__", [])
    assert proc.returncode != 0
    assert f"No module named '{module}' (not in nightjar-ray's runtime" in proc.stderr


def test_the_closure_follows_requested_extras() -> None:
    """``ray[serve]`` brings the serve extra's distributions, plain ``ray`` does not."""
    assert "uvicorn" in runtime_closure(["ray[serve]==2.60.0"])
    assert "uvicorn" not in runtime_closure(["ray==2.60.0"])


@pytest.mark.parametrize(
    "args",
    [
        ["dashboards", "generate", "--root", "{tmp}"],
        ["simulate", "run", "--num-requests", "20", "--arrival", "poisson", "--qps", "2"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_commands_without_a_server_run_with_only_runtime_dependencies(
    args: list[str], tmp_path: Path
) -> None:
    """The commands that need neither vLLM nor an endpoint work on a plain install."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = run_runtime_only("nightjar_ray.cli.main:main", ["nightjar-ray", *argv])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip(), "the command printed nothing"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["dashboards", "provision", "--url", "http://127.0.0.1:9"],
            "nightjar-ray dashboards: error: needs 'grafana_client', which the "
            "nightjar-ray[ops] extra installs (docs/install.md)",
        ),
        (
            ["profile-switch-cost", "--device", "cpu"],
            "nightjar-ray profile-switch-cost: error: needs 'torch', which the "
            "nightjar-ray[cpu] or [gpu] extra installs (docs/install.md)",
        ),
    ],
    ids=lambda value: value[0] if isinstance(value, list) else "",
)
def test_a_command_that_needs_an_extra_names_it_in_one_line(argv: list[str], message: str) -> None:
    """``dashboards provision`` needs grafana-client (the ``ops`` extra), the profiler an
    engine: without it the user reads which extra to install, not a traceback."""
    proc = run_runtime_only("nightjar_ray.cli.main:main", ["nightjar-ray", *argv])
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [message]
