"""The server's spec-decode counters in the summary (parsed exposition text, both vLLM's
and Ray's spelling), goodput under SLOs, and the whole command against a local stub
endpoint that serves /v1/models, streamed completions and /metrics."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from nightjar_ray.cli.main import main
from nightjar_ray.loadgen.client import RunResult
from nightjar_ray.loadgen.counters import (
    SpecDecodeCounts,
    metrics_endpoint,
    parse_counts,
    spec_decode_figures,
)
from nightjar_ray.loadgen.summary import parse_slos, summarize
from nightjar_ray.workload import RequestRecord
from tests.support import cli_error, reply

VLLM_TEXT = """\
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9
vllm:spec_decode_num_drafts_total{engine="0",model_name="other"} 999.0
# HELP vllm:spec_decode_num_draft_tokens Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 120.0
# HELP vllm:spec_decode_num_accepted_tokens Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 90.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 36.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 24.0
# HELP vllm:generation_tokens Number of generation tokens processed.
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 200.0
"""


def _ray_text(drafts: tuple[float, float], accepted: tuple[float, float], gen: float) -> str:
    """Ray's export of the same counters: ``ray_`` prefix, one series per replica."""
    lines = []
    for name, values in (
        ("spec_decode_num_drafts", drafts),
        ("spec_decode_num_draft_tokens", (3 * drafts[0], 3 * drafts[1])),
        ("spec_decode_num_accepted_tokens", accepted),
        ("generation_tokens", (gen, 0.0)),
    ):
        lines.append(f"# TYPE ray_vllm_{name}_total counter")
        for replica, value in zip(("r1", "r2"), values, strict=True):
            labels = f'ReplicaId="{replica}",model_name="m",WorkerId="w"'
            lines.append(f"ray_vllm_{name}_total{{{labels}}} {value}")
    lines.append('ray_nightjar_steps_total{model="m",replica="r1"} 5.0')
    return "\n".join(lines) + "\n"


def test_vllm_counters_are_summed_over_the_model_s_series() -> None:
    counts = parse_counts(VLLM_TEXT, "m")
    assert counts == SpecDecodeCounts(
        40.0, 120.0, 90.0, 200.0, {0: 36.0, 1: 30.0, 2: 24.0}, found=True
    )
    assert parse_counts(VLLM_TEXT, "other").num_drafts == 999.0
    assert not parse_counts(VLLM_TEXT, "absent").found
    assert parse_counts(VLLM_TEXT, None).num_drafts == 1039.0


def test_ray_exported_counters_are_read_per_replica_and_summed() -> None:
    counts = parse_counts(_ray_text((10, 30), (20, 70), 300), "m")
    assert counts.num_drafts == 40 and counts.num_draft_tokens == 120
    assert counts.num_accepted_tokens == 90 and counts.num_generation_tokens == 300
    assert counts.found


def test_figures_over_a_run_are_the_differences_of_two_scrapes() -> None:
    before = parse_counts(_ray_text((1, 3), (2, 7), 30), "m")
    after = parse_counts(VLLM_TEXT, "m")
    figures = spec_decode_figures(after.minus(before))
    # over the run: 36 drafts, 108 draft tokens, 81 accepted, 170 generated
    assert figures["spec_decode_num_drafts"] == 36
    assert figures["spec_decode_draft_tokens"] == 108
    assert figures["spec_decode_accepted_tokens"] == 81
    assert figures["server_generation_tokens"] == 170
    assert figures["spec_decode_acceptance_rate"] == pytest.approx(75.0)
    assert figures["spec_decode_acceptance_length"] == pytest.approx(1 + 81 / 36)
    # request-steps = 170 generated - 81 accepted = 89
    assert figures["spec_decode_tokens_per_step"] == pytest.approx(170 / 89)
    assert figures["spec_decode_per_position_acceptance_rates"] == pytest.approx(
        [36 / 36, 30 / 36, 24 / 36]
    )


def test_no_drafts_gives_no_rates_and_no_series_gives_no_keys() -> None:
    idle = SpecDecodeCounts(num_generation_tokens=50.0, found=True)
    assert spec_decode_figures(idle) == {
        "spec_decode_num_drafts": 0,
        "spec_decode_draft_tokens": 0,
        "spec_decode_accepted_tokens": 0,
        "server_generation_tokens": 50,
        "spec_decode_tokens_per_step": 1.0,
    }
    assert spec_decode_figures(SpecDecodeCounts()) == {}


def test_metrics_endpoint_appends_the_path_only_when_none_is_given() -> None:
    assert metrics_endpoint("http://h:8080") == "http://h:8080/metrics"
    assert metrics_endpoint("http://h:8080/") == "http://h:8080/metrics"
    assert metrics_endpoint("http://h:9000/custom") == "http://h:9000/custom"


def _record(i: int, ttft: float, e2e: float, out: int) -> RequestRecord:
    return RequestRecord(i, float(i), float(i), 10, out, i + ttft, i + e2e, max_tokens=out)


def test_goodput_counts_requests_meeting_every_slo() -> None:
    records = [
        _record(0, 0.1, 1.1, 11),  # tpot 100 ms, e2el 1100
        _record(1, 0.1, 3.1, 11),  # tpot 300 ms
        _record(2, 0.5, 0.5, 1),  # one token: no tpot, meets any tpot SLO
    ]
    run = RunResult(records, 0.0, 2.0)
    slos = parse_slos(["ttft:200", "tpot:150"])
    assert slos == {"ttft": 200.0, "tpot": 150.0}
    assert summarize(run, slos)["request_goodput"] == pytest.approx(0.5)  # 1 of 3 in 2 s
    assert summarize(run, parse_slos(["e2el:1200"]))["request_goodput"] == pytest.approx(1.0)
    assert "request_goodput" not in summarize(run)
    assert parse_slos(["ttft:1,tpot:2", "e2el:3"]) == {"ttft": 1.0, "tpot": 2.0, "e2el": 3.0}


def test_the_summary_adds_the_figures_of_the_counts_it_is_given() -> None:
    run = RunResult([_record(0, 0.1, 1.1, 11)], 0.0, 2.0)
    counts = parse_counts(VLLM_TEXT, "m")
    summary = summarize(run, None, counts)
    assert summary["spec_decode_acceptance_rate"] == pytest.approx(75.0)
    assert summary["completed"] == 1
    assert "spec_decode_acceptance_rate" not in summarize(run)


class _Server(BaseHTTPRequestHandler):
    """/v1/models, streamed completions and /metrics: each completion of n tokens adds
    n // 2 drafts of 3 tokens, n // 2 accepted tokens and n generated tokens."""

    served: ClassVar[dict[str, float]] = {}
    headers_seen: ClassVar[list[dict[str, str]]] = []
    exports_zeros: ClassVar[bool] = True
    """False: no series before the first completion (Ray's export of a fresh replica)."""

    def do_GET(self) -> None:
        self.headers_seen.append({"path": self.path, **self.headers})
        if self.path == "/v1/models":
            self._send(json.dumps({"object": "list", "data": [{"id": "stub-model"}]}))
        elif self.path == "/metrics":
            s = self.served
            text = (
                f'vllm:spec_decode_num_drafts_total{{model_name="stub-model"}} {s["d"]}\n'
                f'vllm:spec_decode_num_draft_tokens_total{{model_name="stub-model"}} {3 * s["d"]}\n'
                f'vllm:spec_decode_num_accepted_tokens_total{{model_name="stub-model"}} {s["a"]}\n'
                f'vllm:generation_tokens_total{{model_name="stub-model"}} {s["g"]}\n'
            )
            self._send("" if s["g"] == 0 and not self.exports_zeros else text)
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        self.headers_seen.append({"path": self.path, **self.headers})
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = int(body["max_tokens"])
        self.served["d"] += n // 2
        self.served["a"] += n // 2
        self.served["g"] += n
        chunks = [{"choices": [{"text": "x", "finish_reason": None}]} for _ in range(n - 1)]
        chunks.append({"choices": [{"text": "x", "finish_reason": "length"}]})
        chunks.append({"choices": [], "usage": {"completion_tokens": n, "prompt_tokens": 4}})
        events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        self._send(events, "text/event-stream")

    def _send(self, text: str, kind: str = "application/json") -> None:
        reply(self, text, kind=kind)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    _Server.served.update(d=7.0, a=5.0, g=100.0)  # traffic before the run
    _Server.headers_seen.clear()
    _Server.exports_zeros = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    thread.join()


def test_the_command_finds_the_model_sends_the_key_and_reports_the_run_s_counters(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NIGHTJAR_API_KEY", "secret")
    out = tmp_path / "run"
    args = ["loadgen", "--url", server, "--rate", "4", "--duration-s", "2", "--output-len",
            "6:10", "--input-len", "4", "--header", "X-Team: lab", "--goodput", "e2el:60000",
            "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    tokens = summary["total_output_tokens"]
    drafts = sum(n // 2 for n in _output_lengths(out))
    assert summary["server_generation_tokens"] == tokens > 0
    assert summary["spec_decode_num_drafts"] == drafts
    assert summary["spec_decode_acceptance_rate"] == pytest.approx(100 / 3)
    assert summary["spec_decode_acceptance_length"] == pytest.approx(2.0)
    assert summary["spec_decode_tokens_per_step"] == pytest.approx(tokens / (tokens - drafts))
    assert summary["request_goodput"] == pytest.approx(summary["request_throughput"])
    by_path: dict[str, list[dict[str, str]]] = {}
    for seen in _Server.headers_seen:
        by_path.setdefault(seen["path"], []).append(seen)
    endpoint = by_path["/v1/completions"] + by_path["/v1/models"]
    assert len(by_path["/v1/completions"]) == summary["completed"]
    assert all(h["Authorization"] == "Bearer secret" and h["X-Team"] == "lab" for h in endpoint)
    assert len(by_path["/metrics"]) >= 2
    assert all("Authorization" not in h for h in by_path["/metrics"])  # the key stays home


def test_a_server_that_exports_no_counters_before_its_first_request_still_gets_figures(
    server: str, tmp_path: Path
) -> None:
    """A fresh Ray Serve app has no ``ray_vllm_*`` series until it has served: the scrape
    before the run is the zero the run's counts start from, not a missing endpoint."""
    _Server.served.update(d=0.0, a=0.0, g=0.0)
    _Server.exports_zeros = False
    out = tmp_path / "run"
    args = ["loadgen", "--url", server, "--rate", "4", "--duration-s", "2", "--output-len",
            "6:10", "--input-len", "4", "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["server_generation_tokens"] == summary["total_output_tokens"] > 0
    assert summary["spec_decode_num_drafts"] == sum(n // 2 for n in _output_lengths(out))
    assert summary["spec_decode_acceptance_rate"] == pytest.approx(100 / 3)


def _output_lengths(out: Path) -> list[int]:
    lines = (out / "records.jsonl").read_text().splitlines()
    return [json.loads(line)["num_output_tokens"] for line in lines]


def test_a_bad_header_or_an_unreachable_endpoint_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = cli_error(["loadgen", "--header", "oops", "--out", str(tmp_path)], capsys)
    assert line == "nightjar-ray loadgen: error: --header 'oops': expected 'Name: value'"
    line = cli_error(["loadgen", "--url", "http://127.0.0.1:9", "--out", str(tmp_path)], capsys)
    assert line.startswith("nightjar-ray loadgen: error: GET http://127.0.0.1:9/v1/models")


def test_the_demo_table_shows_the_phase_s_acceptance_and_tokens_per_step() -> None:
    from nightjar_ray.cli.demo_report import PhaseEngineStats, PhaseReport
    from nightjar_ray.cli.load import PhaseResult

    engine = PhaseEngineStats((1, 3), 0, 0.0, 1, 1)
    counts = parse_counts(VLLM_TEXT, "m")  # 75% accepted; 200 / (200 - 90) tokens per step
    assert PhaseReport(PhaseResult("low", 1), engine, counts).acceptance() == "75%/1.82"
    idle = SpecDecodeCounts(num_generation_tokens=10.0, found=True)
    assert PhaseReport(PhaseResult("high", 8), engine, idle).acceptance() == "-/1.00"
    assert PhaseReport(PhaseResult("low", 1), engine, None).acceptance() == "-/-"
