"""``nightjar-ray demo``: the main job.

Starts a local Ray cluster, generates the embedded default model pair (cached),
deploys the Nightjar Serve app (the same config as ``deploy/cpu-demo.yaml``),
drives a low -> high -> low streaming load through the OpenAI endpoint (prompts
from the generated text dataset, :mod:`nightjar_ray.loadgen.generated_text`, cut to
16-96 tokens with the pair's tokenizer) and prints, per phase: throughput, TTFT/TPOT,
the draft's acceptance rate and tokens per step (vLLM's counters on Ray's metrics
port), the gamma distribution and draft residency (from the replicas' reports to the
policy actor). Then it keeps serving until interrupted, or exits with
``--exit-after-report``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import threading
import time
from typing import Any

from nightjar_ray.cli.demo_report import PhaseReport, ReplicaReports, print_report
from nightjar_ray.cli.load import PhaseResult, run_phase
from nightjar_ray.loadgen.client import API_KEY_ENV, request_headers
from nightjar_ray.loadgen.counters import SpecDecodeCounts
from nightjar_ray.loadgen.dataset import PromptSource
from nightjar_ray.workload import RequestRecord

APP_NAME = "nightjar"
METRICS_REPORT_INTERVAL_MS = 2000
"""Ray exports metrics every 10 s by default; the local demo refreshes its dashboards faster."""
MODEL_ID = "nightjar-demo"
PROMPT_TOKENS = (16, 96)
"""Prompt lengths in tokens, uniform (dataset text cut to length)."""
METRICS_WAIT_S = 30.0
"""How long a phase's end waits for Ray to export vLLM's counters of the phase."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="The main job: serve the generated pair with Nightjar, drive load, report."
    )
    parser.add_argument(
        "--pair",
        choices=("default", "tiny"),
        default="default",
        help="Generated model pair to serve (tiny: seconds to start, for a quick look).",
    )
    parser.add_argument("--replicas", type=int, default=1, help="Serve replicas of the model.")
    parser.add_argument(
        "--phase-seconds", type=float, default=30.0, help="Length of each load phase (s)."
    )
    parser.add_argument(
        "--low-concurrency", type=int, default=1, help="Requests in flight in the low phases."
    )
    parser.add_argument(
        "--high-concurrency", type=int, default=16, help="Requests in flight in the high phase."
    )
    parser.add_argument("--max-tokens", type=int, default=64, help="Output tokens per request.")
    parser.add_argument(
        "--http-port", type=int, default=8000, help="Port of the OpenAI endpoint (Serve HTTP)."
    )
    parser.add_argument(
        "--metrics-port", type=int, default=8080, help="Port of Ray's Prometheus metrics export."
    )
    parser.add_argument(
        "--exit-after-report", action="store_true", help="Shut down after the report."
    )
    parser.add_argument(
        "--verbose", action="store_true", help="Show Ray, Serve and vLLM logs on the console."
    )
    parser.set_defaults(func=run)


def demo_app_args(pair: str, replicas: int) -> dict[str, Any]:
    """The app config of ``deploy/cpu-demo.yaml`` for ``pair`` (a test checks they agree)."""
    return {
        "model_loading_config": {"model_id": MODEL_ID, "model_source": f"generated:{pair}"},
        "engine_kwargs": {
            "speculative_config": {
                "method": "draft_model",
                "model": f"generated:{pair}/draft",
                "num_speculative_tokens": 4,
            },
            "max_model_len": 1024,
            "max_num_seqs": 32,
            "dtype": "float32",
        },
        "placement_group_config": {"bundles": [{"CPU": 1}]},
        "runtime_env": {"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "2"}},
        "deployment_config": {"num_replicas": replicas},
        "nightjar": {"policy": "nightjar", "pooling": {"sync_interval_s": 1.0}},
    }


def _say(message: str) -> None:
    print(message, flush=True)


def _deploy(args: argparse.Namespace) -> None:
    import ray
    from ray import serve

    from nightjar_ray.serve import build_app
    from nightjar_ray.serve.config import parse_app_config

    _say(f"[1/4] Generating the '{args.pair}' model pair (cached after the first run)...")
    app_args = demo_app_args(args.pair, args.replicas)
    parse_app_config(app_args)
    _say("[2/4] Starting a local Ray cluster...")
    # NOTE: logical CPUs above the physical count: the replica's placement group holds
    # 2 CPUs and Serve's proxy, router and the policy actor need room next to it.
    ray.init(
        address="local",  # a cluster of its own, never another one on this host
        num_cpus=max(8, 4 * (os.cpu_count() or 1)),
        _metrics_export_port=args.metrics_port,
        _system_config={"metrics_report_interval_ms": METRICS_REPORT_INTERVAL_MS},
        log_to_driver=args.verbose,
        logging_level=logging.INFO if args.verbose else logging.WARNING,
    )
    if not args.verbose:
        _say("      (logs: /tmp/ray/session_latest/logs; --verbose shows them here)")
        logging.getLogger("ray.serve").setLevel(logging.WARNING)
    app = build_app(app_args)
    serve.start(
        http_options={"host": "127.0.0.1", "port": args.http_port},
        logging_config=_serve_logging(args.verbose),
    )
    _say(f"[3/4] Deploying the Nightjar app ({args.replicas} replica(s); vLLM starts up)...")
    done = threading.Event()
    ticker = threading.Thread(target=_tick, args=(done, "deploying"), daemon=True)
    ticker.start()
    try:
        serve.run(
            app,
            name=APP_NAME,
            route_prefix="/",
            blocking=False,
            logging_config=_serve_logging(args.verbose),
        )
    finally:
        done.set()
        ticker.join()


def _serve_logging(verbose: bool) -> dict[str, Any]:
    return {} if verbose else {"log_level": "WARNING", "enable_access_log": False}


def _tick(done: threading.Event, what: str) -> None:
    start = time.monotonic()
    while not done.wait(5.0):
        _say(f"      ... {what} ({time.monotonic() - start:.0f} s)")


class Progress:
    """One status line per second on a terminal, one per 10 s otherwise."""

    def __init__(self, phase: PhaseResult, seconds: float) -> None:
        self.phase, self.seconds = phase, seconds
        self.start = time.monotonic()
        self.tokens = 0
        self.tty = sys.stdout.isatty()
        self.last = 0.0

    def on_record(self, record: RequestRecord) -> None:
        self.tokens += record.num_output_tokens
        self.maybe_print()

    def maybe_print(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < (1.0 if self.tty else 10.0):
            return
        self.last = now
        elapsed = now - self.start
        line = (
            f"      [{self.phase.name:<8}] {min(elapsed, self.seconds):5.1f}/{self.seconds:.0f} s"
            f"  requests {len(self.phase.ok):4d} ok {self.phase.num_failed} failed"
            f"  {self.tokens / max(elapsed, 1e-9):7.1f} tok/s"
        )
        print("\r" + line if self.tty else line, end="" if self.tty else "\n", flush=True)


async def _phase_with_progress(
    args: argparse.Namespace, phase: PhaseResult, seed: int, source: PromptSource
) -> PhaseResult:
    progress = Progress(phase, args.phase_seconds)

    async def ticker() -> None:
        while True:
            await asyncio.sleep(1.0)
            progress.maybe_print()

    task = asyncio.create_task(ticker())
    url = f"http://127.0.0.1:{args.http_port}"
    try:
        await run_phase(
            url,
            MODEL_ID,
            phase,
            args.phase_seconds,
            args.max_tokens,
            progress.on_record,
            seed,
            lambda rng: source.prompt(rng.randint(*PROMPT_TOKENS), rng),
            request_headers([], os.environ),
        )
    finally:
        task.cancel()
    progress.maybe_print(force=True)
    if progress.tty:
        print()
    return phase


def demo_prompts(pair: str) -> PromptSource:
    """The generated text dataset (written to the cache once), tokenized with the pair's
    tokenizer."""
    from nightjar_ray.loadgen.dataset import TextPrompts, load_tokenizer, read_dataset
    from nightjar_ray.loadgen.generated_text import write_generated_dataset
    from nightjar_ray.serve.config import cache_dir, resolve_generated

    path = cache_dir() / "datasets" / "generated.jsonl"
    if not path.is_file():
        write_generated_dataset(path)
    tokenizer = load_tokenizer(resolve_generated(f"generated:{pair}"))
    return TextPrompts(read_dataset(path), tokenizer)


def _spec_decode(
    metrics_url: str, before: SpecDecodeCounts | None, phase: PhaseResult
) -> tuple[SpecDecodeCounts | None, SpecDecodeCounts | None]:
    """(the counters now, the phase's counts); None where the port had none."""
    from nightjar_ray.loadgen.client import open_session
    from nightjar_ray.loadgen.counters import counts_after_run, fetch_counts

    async def scrape() -> SpecDecodeCounts:
        async with open_session(30.0) as session:
            if before is None:
                return await fetch_counts(session, metrics_url, MODEL_ID)
            tokens = sum(r.num_output_tokens for r in phase.records)
            return await counts_after_run(
                session, metrics_url, MODEL_ID, before, tokens, METRICS_WAIT_S
            )

    try:
        now = asyncio.run(scrape())
    except ValueError:
        return None, None
    return now, (None if before is None or not now.found else now.minus(before))


def _drive(args: argparse.Namespace, reports: ReplicaReports) -> list[PhaseReport]:
    plan = (
        ("low", args.low_concurrency),
        ("high", args.high_concurrency),
        ("low", args.low_concurrency),
    )
    source = demo_prompts(args.pair)
    metrics_url = f"http://127.0.0.1:{args.metrics_port}/metrics"
    _say(f"[4/4] Driving load: low -> high -> low, {args.phase_seconds:.0f} s each")
    results = []
    before = reports.wait_fresh(time.time())
    counts, _ = _spec_decode(metrics_url, None, PhaseResult("", 0))
    for i, (name, concurrency) in enumerate(plan):
        phase = PhaseResult(name, concurrency)
        asyncio.run(_phase_with_progress(args, phase, i, source))
        after = reports.wait_fresh(time.time())
        counts, delta = _spec_decode(metrics_url, counts, phase)
        results.append(PhaseReport(phase, reports.delta(before, after), delta))
        before = after
    return results


def _serve_forever(args: argparse.Namespace) -> None:
    url = f"http://127.0.0.1:{args.http_port}"
    _say(
        f"\nServing {MODEL_ID!r} at {url}/v1 (OpenAI API); metrics at "
        f"http://127.0.0.1:{args.metrics_port}/metrics. Ctrl-C to stop. Try:\n"
        f"  curl {url}/v1/completions -H 'Content-Type: application/json' \\\n"
        + (
            f'    -H "Authorization: Bearer ${API_KEY_ENV}" \\\n'
            if os.environ.get(API_KEY_ENV)
            else ""
        )
        + f'    -d \'{{"model": "{MODEL_ID}", "prompt": "def parse(", "max_tokens": 32}}\''
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        _say("Stopping.")


def run(args: argparse.Namespace) -> int:
    import ray
    from ray import serve

    try:
        _deploy(args)
        reports = ReplicaReports.connect(args.replicas)
        results = _drive(args, reports)
        print_report(results)
        failed = sum(r.phase.num_failed for r in results)
        if not args.exit_after_report:
            _serve_forever(args)
        return 1 if failed else 0
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
