"""Argument types, the help formatter and the usage error shared by the sub-commands.

Bad input is found at parse time where it can be (a type below raises
``argparse.ArgumentTypeError``, which argparse reports with the flag); input checked later
(a file named by an environment variable, flags that conflict) raises :class:`UsageError`.
Either way the user reads one line ``nightjar-ray <command>: error: <message>`` and the
exit code is 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from nightjar_ray.loadgen.client import API_KEY_ENV, request_headers


class UsageError(ValueError):
    """Bad input to a command; the message names the flag or environment variable."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default, except a default of ``None`` or ``[]``
    (the help says what happens then) and a switch's ``False``."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, []) or (action.default is False and action.nargs == 0):
            return action.help
        return super()._get_help_string(action)


def all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every sub-command's parser under it, depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from all_parsers(sub)


def names(choices: Iterable[str], what: str) -> Callable[[str], list[str]]:
    """A type for a comma-separated list of ``choices``: the list, or an error naming each
    unknown name and listing the valid ones."""
    valid = tuple(choices)

    def parse(value: str) -> list[str]:
        got = [v.strip() for v in value.split(",") if v.strip()]
        unknown = [n for n in got if n not in valid]
        if unknown or not got:
            given = ", ".join(repr(n) for n in unknown) if unknown else "none"
            raise argparse.ArgumentTypeError(
                f"unknown {what} {given}; choose from {', '.join(valid)}"
            )
        return got

    parse.__name__ = f"{what} list"
    return parse


def existing_file(value: str) -> Path:
    """A type for a file to read: the path, or an error when it is not a file."""
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {value}")
    return path


def existing_dir(value: str) -> Path:
    """A type for a directory to read: the path, or an error when it is not a directory."""
    path = Path(value)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"no such directory: {value}")
    return path


def output_file(value: str) -> Path:
    """A type for a file to write: the path, or an error when its directory is missing
    (found before a long run, not after it)."""
    path = Path(value)
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"no such directory: {path.parent} (for {value})")
    return path


def positive_int(value: str) -> int:
    """A type for an integer >= 1."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {number}")
    return number


def json_object(value: str) -> dict[str, Any]:
    """A type for a JSON object given inline."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e}): {value!r}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {value!r}")
    return parsed


def add_header(p: argparse.ArgumentParser) -> None:
    """``--header 'Name: value'``, repeatable (``loadgen.client.request_headers``)."""
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help=f"HTTP header sent with every request, repeatable; wins over the"
        f" 'Authorization: Bearer ${API_KEY_ENV}' sent when that variable is set (prefer the"
        " variable for a key: argv is visible to other users of the host).",
    )


def headers_of(args: argparse.Namespace, environ: Any) -> dict[str, str]:
    """The request headers of ``--header`` and ``$NIGHTJAR_API_KEY``, or a usage error."""
    try:
        return request_headers(args.header, environ)
    except ValueError as e:
        raise UsageError(str(e)) from None
