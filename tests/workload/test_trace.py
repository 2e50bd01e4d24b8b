"""The trace reader: one timestamp rule, sorted by arrival, bad rows named by line."""

from __future__ import annotations

import csv
import re
from datetime import datetime
from pathlib import Path

import pytest

from nightjar_ray.workload.trace import (
    TRACE_ENV,
    parse_timestamp,
    read_trace,
    resolve_trace,
)
from tests.support import shared_trace

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def _write(path: Path, rows: list[str], header: str = HEADER) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_the_real_trace_is_read_whole_sorted_and_exact() -> None:
    path = shared_trace()
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    trace = read_trace(path)
    assert len(trace) == len(rows)
    assert [r.req_id for r in trace] == list(range(len(rows)))
    arrivals = [r.arrival_s for r in trace]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    # The file is in time order: row i is request i, lengths as written.
    for i in (0, 1, len(rows) // 2, len(rows) - 1):
        assert (trace[i].num_prompt_tokens, trace[i].num_output_tokens) == (
            int(rows[i]["ContextTokens"]),
            int(rows[i]["GeneratedTokens"]),
        )
    # Against datetime arithmetic on the first six fractional digits (a microsecond).
    first, last = (datetime.fromisoformat(rows[i]["TIMESTAMP"][:26]) for i in (0, -1))
    assert arrivals[-1] == pytest.approx((last - first).total_seconds(), abs=1e-6)


def test_fractions_beyond_microseconds_are_kept(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", ["2023-11-16 18:15:46.6805900,374,44",
                                       "2023-11-16 18:15:50.9951697,396,109"])  # fmt: skip
    trace = read_trace(path)
    assert trace[1].arrival_s == pytest.approx(4.3145797, abs=1e-6)
    base = parse_timestamp("2023-11-16 18:15:46")
    # A float of epoch seconds resolves about 0.24 us in 2023; the 7th digit still counts
    # (truncated to microseconds, this difference would be 0).
    assert parse_timestamp("2023-11-16 18:15:46.0000009") - base == pytest.approx(9e-7, abs=3e-7)


def test_unsorted_rows_come_out_sorted_ties_in_file_order(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.csv",
        [
            "2023-11-16 18:00:10.5,1,10",
            "2023-11-16 18:00:00.0,2,20",
            "2023-11-16 18:00:10.5,3,30",
            "2023-11-16 18:00:05.0,4,40",
        ],
    )
    trace = read_trace(path)
    assert [r.arrival_s for r in trace] == [0.0, 5.0, 10.5, 10.5]
    assert [r.num_prompt_tokens for r in trace] == [2, 4, 1, 3]
    assert [r.num_output_tokens for r in trace] == [20, 40, 10, 30]
    assert [r.req_id for r in trace] == [0, 1, 2, 3]


def test_offsets_are_honoured_and_no_offset_is_utc(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.csv",
        ["2023-11-16T18:00:00Z,1,1", "2023-11-16 19:00:30+01:00,1,1", "2023-11-16 18:01:00,1,1"],
    )
    assert [r.arrival_s for r in read_trace(path)] == [0.0, 30.0, 60.0]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("2023-11-16 18:00:0x.5,1,1", "TIMESTAMP '2023-11-16 18:00:0x.5'"),
        ("16/11/2023 18:00:05,1,1", "is not YYYY-MM-DD"),
        ("2023-11-16 18:00:05,abc,1", "invalid literal"),
        ("2023-11-16 18:00:05,1,-3", "GeneratedTokens must be >= 0"),
        ("2023-11-16 18:00:05,1", "no GeneratedTokens"),
    ],
)
def test_a_bad_row_is_named_by_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    path = _write(tmp_path / "t.csv", ["2023-11-16 18:00:00,1,1", "2023-11-16 18:00:01,1,1", row])
    with pytest.raises(ValueError, match=re.escape(f"{path}:4: bad trace row: ") + ".*" + message):
        read_trace(path)


def test_header_and_empty_trace_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="header must have the columns TIMESTAMP,"):
        read_trace(_write(tmp_path / "a.csv", ["1,2"], header="time,prompt"))
    with pytest.raises(ValueError, match="trace has no requests"):
        read_trace(_write(tmp_path / "b.csv", []))
    extra = _write(tmp_path / "c.csv", ["x,2023-11-16 18:00:00,7,8"], header="Id," + HEADER)
    assert [(r.num_prompt_tokens, r.num_output_tokens) for r in read_trace(extra)] == [(7, 8)]


def test_resolve_trace_takes_the_argument_then_the_environment(tmp_path: Path) -> None:
    given = _write(tmp_path / "given.csv", [])
    env = _write(tmp_path / "env.csv", [])
    assert resolve_trace(given, {TRACE_ENV: str(env)}) == given
    assert resolve_trace(None, {TRACE_ENV: str(env)}) == env
    with pytest.raises(ValueError, match=f"pass --trace PATH or set {TRACE_ENV}"):
        resolve_trace(None, {})
    with pytest.raises(ValueError, match=r"--trace: trace file .*missing.csv does not exist"):
        resolve_trace(tmp_path / "missing.csv", {TRACE_ENV: str(env)})
    with pytest.raises(ValueError, match=f"{TRACE_ENV}: trace file .*gone.csv does not exist"):
        resolve_trace(None, {TRACE_ENV: str(tmp_path / "gone.csv")})
