"""Reader of Azure-format LLM inference traces (``TIMESTAMP,ContextTokens,GeneratedTokens``).

One timestamp rule: ``TIMESTAMP`` is an ISO 8601 date and time (``2023-11-16
18:15:46.6805900``) with any number of fractional-second digits, in UTC unless it ends
with an offset (``Z``, ``+01:00``). ``read_trace`` returns one :class:`RequestSpec` per row,
sorted by arrival (rows with the same time keep the file's order), ``arrival_s`` in
seconds since the earliest row and ``req_id`` its position in that order. A bad row is a
``ValueError`` naming the file and the line.

No trace ships with the package: a command that replays one takes its path as an
argument or from ``$NIGHTJAR_TRACE`` (:func:`resolve_trace`).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from nightjar_ray.workload.spec import RequestSpec

TRACE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
TRACE_ATTRIBUTION = "Azure LLM inference trace 2023, Microsoft Azure Public Dataset, CC BY 4.0."
TRACE_ENV = "NIGHTJAR_TRACE"
"""Environment variable naming the trace CSV when a command is given none."""

_TIMESTAMP = re.compile(
    r"(?P<head>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d+))?"
    r"(?P<zone>Z|[+-]\d{2}:\d{2})?"
)


def parse_timestamp(text: str) -> float:
    """Seconds since the Unix epoch of one ``TIMESTAMP`` (the module's rule), as a float:
    resolution about a quarter of a microsecond for dates of this century."""
    match = _TIMESTAMP.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"TIMESTAMP {text!r} is not YYYY-MM-DD HH:MM:SS[.fraction][offset]")
    zone = match["zone"]
    offset = "+00:00" if zone in (None, "Z") else zone
    # NOTE: datetime holds 6 fractional digits and Azure traces have 7; the fraction is
    # added to the whole seconds instead.
    whole_s = datetime.fromisoformat(match["head"] + offset).timestamp()
    return whole_s + (float("0." + match["frac"]) if match["frac"] else 0.0)


def _count(row: dict[str, str], column: str) -> int:
    value = int(row[column])
    if value < 0:
        raise ValueError(f"{column} must be >= 0, got {value}")
    return value


def read_trace(path: str | Path) -> tuple[RequestSpec, ...]:
    """Every request of the trace at ``path``, sorted by arrival (module docstring)."""
    rows: list[tuple[float, int, int]] = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        header = tuple(reader.fieldnames or ())
        if not set(TRACE_COLUMNS) <= set(header):
            raise ValueError(
                f"{path}: trace header must have the columns {','.join(TRACE_COLUMNS)}, "
                f"got {','.join(header) or 'none'}"
            )
        for row in reader:
            try:
                missing = [c for c in TRACE_COLUMNS if not row.get(c)]
                if missing:
                    raise ValueError(f"no {', '.join(missing)}")
                stamp_s = parse_timestamp(row["TIMESTAMP"])
                rows.append((stamp_s, _count(row, "ContextTokens"), _count(row, "GeneratedTokens")))
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}:{reader.line_num}: bad trace row: {e}") from e
    if not rows:
        raise ValueError(f"{path}: trace has no requests")
    rows.sort(key=lambda row: row[0])
    t0 = rows[0][0]
    return tuple(RequestSpec(i, t - t0, c, g) for i, (t, c, g) in enumerate(rows))


def resolve_trace(given: str | Path | None, environ: Mapping[str, str]) -> Path:
    """The trace to replay: ``given``, else ``environ[TRACE_ENV]``; a ``ValueError`` that
    says how to name one when neither is set or the file is not there."""
    raw = given if given is not None else environ.get(TRACE_ENV)
    if raw is None or str(raw) == "":
        raise ValueError(
            f"no trace given: pass --trace PATH or set {TRACE_ENV} to an Azure-format CSV "
            f"({','.join(TRACE_COLUMNS)})"
        )
    path = Path(raw)
    if not path.is_file():
        source = "--trace" if given is not None else TRACE_ENV
        raise ValueError(f"{source}: trace file {path} does not exist")
    return path
