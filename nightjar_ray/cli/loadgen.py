"""``nightjar-ray loadgen``: open-loop load against an OpenAI endpoint, records and summary.

Examples::

    nightjar-ray loadgen --model nightjar-demo --arrivals poisson --rate 0.5 --duration-s 120
    nightjar-ray loadgen --arrivals gamma --rate 1 --burstiness 0.3 ...
    nightjar-ray loadgen --arrivals step --steps 60:0.3,60:1.5 --duration-s 600 ...
    nightjar-ray loadgen --trace azure_llm_inference_trace_conv_2023.csv \\
        --trace-offset-s 600 --duration-s 300 --trace-speedup 2 --trace-sample 0.03 \\
        --trace-token-scale 8 ...

Writes ``records.jsonl`` (one request per line, failures included), ``summary.json``
(``vllm bench serve``'s names) and the plots into ``--out``; prints the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from nightjar_ray.loadgen.client import RunResult, record_json, run_open_loop
from nightjar_ray.loadgen.summary import parse_slos, summarize
from nightjar_ray.loadgen.workload import (
    LengthRange,
    TraceScaling,
    scale_segment,
    synthetic_requests,
    trace_requests,
)
from nightjar_ray.workload import RequestRecord, RequestSpec
from nightjar_ray.workload.arrivals import ARRIVAL_NAMES, build_arrivals
from nightjar_ray.workload.trace import read_trace, resolve_trace


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("loadgen", help="Open-loop load against an OpenAI endpoint.")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="Endpoint base URL.")
    p.add_argument("--model", default="nightjar-demo", help="Served model name.")
    p.add_argument("--arrivals", choices=ARRIVAL_NAMES, default="poisson", help="Arrival process.")
    p.add_argument("--rate", type=float, default=1.0, help="Requests/s (ramp: start rate).")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma: shape; 1 = Poisson.")
    p.add_argument("--steps", default="", help="step: SECONDS:RATE,... repeated.")
    p.add_argument("--ramp-end-rps", type=float, help="ramp: rate at the end.")
    p.add_argument("--duration-s", type=float, default=60.0, help="Length of the run.")
    p.add_argument("--input-len", default="64:256", help="LOW:HIGH prompt tokens.")
    p.add_argument("--output-len", default="32:128", help="LOW:HIGH output tokens.")
    p.add_argument("--vocab-size", type=int, default=1000, help="Prompt token IDs below this.")
    p.add_argument("--trace", type=Path, help="Replay an Azure-format trace CSV instead.")
    p.add_argument(
        "--trace-offset-s", type=float, default=0.0, help="Trace: start this far into it."
    )
    p.add_argument(
        "--trace-speedup", type=float, default=1.0, help="Trace: replay this many times faster."
    )
    p.add_argument(
        "--trace-sample", type=float, default=1.0, help="Trace: fraction of its requests kept."
    )
    p.add_argument(
        "--trace-token-scale",
        type=float,
        default=1.0,
        help="Trace: divide its token counts by this.",
    )
    p.add_argument(
        "--max-input-tokens", type=int, default=4096, help="Trace: cap on prompt tokens."
    )
    p.add_argument(
        "--max-output-tokens", type=int, default=1024, help="Trace: cap on output tokens."
    )
    p.add_argument("--goodput", help="SLOs in ms, e.g. ttft:2000,tpot:200.")
    p.add_argument("--seed", type=int, default=0, help="Seed of arrivals and prompts.")
    p.add_argument("--prometheus", help="Prometheus URL: overlay gamma and draft residency.")
    p.add_argument(
        "--out", type=Path, default=Path("loadgen-results"), help="Directory for the results."
    )
    p.set_defaults(func=run)


def _length(spec: str, flag: str) -> LengthRange:
    low, sep, high = spec.partition(":")
    try:
        return LengthRange(int(low), int(high if sep else low))
    except ValueError as e:
        raise ValueError(f"{flag}: {e} (use LOW:HIGH)") from None


def build_requests(args: argparse.Namespace) -> list[RequestSpec]:
    """The run's requests from the flags (synthetic or trace); ``ValueError`` on bad flags."""
    rng = random.Random(args.seed)
    if args.trace is not None:
        scaling = TraceScaling(
            args.trace_offset_s,
            args.duration_s,
            args.trace_speedup,
            args.trace_sample,
            args.trace_token_scale,
            args.max_input_tokens,
            args.max_output_tokens,
        )
        # NOTE: only --trace switches to a replay; the environment's trace does not.
        segment = scale_segment(read_trace(resolve_trace(args.trace, {})), scaling, rng)
        return trace_requests(segment, args.vocab_size, rng)
    arrivals = build_arrivals(
        args.arrivals, args.rate, args.burstiness, args.steps, args.ramp_end_rps
    )
    return synthetic_requests(
        arrivals,
        args.duration_s,
        _length(args.input_len, "--input-len"),
        _length(args.output_len, "--output-len"),
        args.vocab_size,
        rng,
    )


class ProgressBar:
    """A one-line progress display: requests done/total, failures, elapsed."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.failed = total, 0, 0
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, record: RequestRecord) -> None:
        self.done += 1
        self.failed += not record.ok
        now = time.monotonic()
        if now - self.last >= (0.5 if self.tty else 10.0) or self.done == self.total:
            self.last = now
            width = 30
            filled = int(width * self.done / max(1, self.total))
            line = (
                f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} requests,"
                f" {self.failed} failed, {now - self.start:.0f} s"
            )
            print("\r" + line if self.tty else line, end="" if self.tty else "\n", file=sys.stderr)


def write_results(run: RunResult, summary: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "records.jsonl").open("w") as f:
        for record in run.records:
            f.write(json.dumps(record_json(record)) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


def run(args: argparse.Namespace) -> int:
    from nightjar_ray.loadgen.plots import overlay_series, plot_run

    try:
        requests = build_requests(args)
        slos = parse_slos(args.goodput)
    except ValueError as e:
        raise SystemExit(f"loadgen: {e}") from None
    print(f"{len(requests)} requests over {args.duration_s:.0f} s -> {args.url}", file=sys.stderr)
    result = asyncio.run(run_open_loop(args.url, args.model, requests, ProgressBar(len(requests))))
    print(file=sys.stderr)
    summary = summarize(result, slos)
    write_results(result, summary, args.out)
    overlay = None
    if args.prometheus:
        from nightjar_ray.ops.render import PrometheusClient

        overlay = overlay_series(PrometheusClient(args.prometheus), result)
    plot_run(result, args.out, overlay)
    print(json.dumps({k: v for k, v in summary.items() if not k.startswith("std_")}, indent=1))
    return 1 if summary["failed"] else 0
