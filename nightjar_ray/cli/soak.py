"""``nightjar-ray soak``: a long trace replay against the main job's app, for leaks.

Deploys the main job's app on a local Ray cluster (metrics on ``--metrics-port``), replays
the conversation trace (``--trace``, or ``$NIGHTJAR_TRACE``) for ``--minutes`` (the whole
trace's shape, time-compressed to fit, thinned to ``--mean-rps`` on average, tokens scaled
as in ``bench-serve``), samples server
RSS and KV block gauges every ``--sample-s`` (``nightjar_ray.loadgen.soak``), and writes
``soak.json`` and ``soak.png``. Exit code 0 only if no request failed, the KV blocks all
came back once idle, and RSS shows no trend over the second half (within 2%).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nightjar_ray.cli.args import UsageError, add_header, existing_file, headers_of
from nightjar_ray.workload.trace import TRACE_ENV

APP = "soak"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("soak", help="Long trace replay; RSS and KV accounting sampled.")
    p.add_argument(
        "--pair",
        choices=("default", "tiny"),
        default="default",
        help="Generated model pair the deployment serves.",
    )
    p.add_argument("--minutes", type=float, default=30.0, help="Length of the replay.")
    p.add_argument("--mean-rps", type=float, default=0.4, help="Mean request rate.")
    p.add_argument("--sample-s", type=float, default=30.0, help="Seconds between samples.")
    p.add_argument(
        "--trace",
        type=existing_file,
        help=f"Azure-format trace CSV to replay (default: ${TRACE_ENV}).",
    )
    p.add_argument(
        "--http-port", type=int, default=8000, help="Port of the local Serve HTTP proxy."
    )
    p.add_argument("--metrics-port", type=int, default=8080, help="Port Ray exports metrics on.")
    add_header(p)
    p.add_argument(
        "--out",
        type=Path,
        default=Path("soak-results"),
        help="Directory for soak.json and soak.png (created if needed).",
    )
    p.set_defaults(func=run)


def soak_requests(trace_path: Path, minutes: float, mean_rps: float, vocab: int) -> list[Any]:
    """The whole trace compressed into ``minutes``, thinned to ``mean_rps`` on average."""
    from nightjar_ray.loadgen.workload import TraceScaling, scale_segment, trace_requests
    from nightjar_ray.workload.trace import read_trace

    trace = read_trace(trace_path)
    span_s = trace[-1].arrival_s + 1.0
    duration_s = 60.0 * minutes
    speedup = span_s / duration_s
    sample = min(1.0, mean_rps * duration_s / len(trace))
    scaling = TraceScaling(0.0, duration_s, speedup, sample, 8.0, 256, 96)
    rng = random.Random(0)
    return trace_requests(scale_segment(trace, scaling, rng), vocab, rng)


def _deploy(args: argparse.Namespace) -> str:
    import ray
    from ray import serve

    from nightjar_ray.cli.demo import METRICS_REPORT_INTERVAL_MS, demo_app_args
    from nightjar_ray.serve import build_app

    ray.init(
        address="local",  # a cluster of its own, never another one on this host
        num_cpus=16,
        log_to_driver=False,
        _metrics_export_port=args.metrics_port,
        _system_config={"metrics_report_interval_ms": METRICS_REPORT_INTERVAL_MS},
    )
    serve.start(http_options={"host": "127.0.0.1", "port": args.http_port})
    print(f"deploying the {args.pair} pair...", file=sys.stderr, flush=True)
    serve.run(build_app(demo_app_args(args.pair, 1)), name=APP, route_prefix="/")
    return f"http://127.0.0.1:{args.http_port}"


def _print_sample(sample: Any) -> None:
    g = sample.gauges
    print(
        f"{sample.t_s:7.0f} s  done {sample.num_done:5d}  RSS {sample.total_rss_bytes / 2**30:6.3f}"
        f" GiB  KV free {g.get('ray_nightjar_kv_free_blocks', float('nan')):6.0f}"
        f"/{g.get('ray_nightjar_kv_blocks', float('nan')):.0f}"
        f"  running {g.get('ray_nightjar_running_requests', float('nan')):3.0f}",
        file=sys.stderr,
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    from nightjar_ray.cli.demo import MODEL_ID
    from nightjar_ray.loadgen.client import record_json
    from nightjar_ray.loadgen.soak import (
        metrics_sampler,
        run_soak,
        summarize_soak,
        wait_for_gauges,
    )
    from nightjar_ray.serve.config import GENERATED_PAIRS
    from nightjar_ray.workload.trace import resolve_trace

    headers = headers_of(args, os.environ)
    try:
        trace = resolve_trace(args.trace, os.environ)
        vocab = GENERATED_PAIRS[args.pair].vocab_size
        requests = soak_requests(trace, args.minutes, args.mean_rps, vocab)
    except ValueError as e:
        raise UsageError(str(e)) from None
    url = _deploy(args)
    print(f"{len(requests)} requests over {args.minutes:.0f} min", file=sys.stderr, flush=True)
    sampler = metrics_sampler(f"http://127.0.0.1:{args.metrics_port}/metrics")
    if not wait_for_gauges(sampler):
        print("soak: no KV gauges on the metrics port yet; reading anyway", file=sys.stderr)
    samples, before, after, result = run_soak(
        url, MODEL_ID, requests, sampler, args.sample_s, on_sample=_print_sample, headers=headers
    )
    report = summarize_soak(samples, before, after, result)
    args.out.mkdir(parents=True, exist_ok=True)
    body = {
        "report": {**asdict(report), "ok": report.ok, "kv_returned": report.kv_returned},
        "samples": [asdict(s) for s in [before, *samples, after]],
        "failed": [record_json(r) for r in result.records if not r.ok],
    }
    (args.out / "soak.json").write_text(json.dumps(body, indent=1) + "\n")
    _plot([before, *samples, after], args.out / "soak.png")
    print(json.dumps(body["report"], indent=2))
    return 0 if report.ok else 1


def _plot(samples: list[Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s.t_s / 60.0 for s in samples]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for kind in samples[0].rss_bytes:
        ax1.plot(t, [s.rss_bytes[kind] / 2**30 for s in samples], label=kind)
    ax1.plot(t, [s.total_rss_bytes / 2**30 for s in samples], label="total", color="k")
    ax1.set_ylabel("RSS (GiB)")
    ax1.legend(fontsize=8)
    for name, label in (
        ("ray_nightjar_kv_free_blocks", "free"),
        ("ray_nightjar_kv_blocks", "total"),
    ):
        ax2.plot(t, [s.gauges.get(name, float("nan")) for s in samples], label=f"KV blocks {label}")
    ax2.set_xlabel("minutes")
    ax2.set_ylabel("KV blocks")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
