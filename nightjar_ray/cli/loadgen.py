"""``nightjar-ray loadgen``: open-loop load against an OpenAI endpoint, records and summary.

Examples::

    nightjar-ray loadgen --arrivals poisson --rate 0.5 --duration-s 120
    nightjar-ray loadgen --dataset sharegpt.json --tokenizer meta-llama/Llama-3.1-8B \\
        --metrics-url http://head:8080 --goodput ttft:2000 tpot:200 ...
    nightjar-ray loadgen --arrivals gamma --rate 1 --burstiness 0.3 ...
    nightjar-ray loadgen --arrivals step --steps 60:0.3,60:1.5 --duration-s 600 ...
    nightjar-ray loadgen --trace azure_llm_inference_trace_conv_2023.csv \\
        --trace-offset-s 600 --duration-s 300 --trace-speedup 2 --trace-sample 0.03 \\
        --trace-token-scale 8 ...

Writes ``records.jsonl`` (one request per line, failures included), ``summary.json``
(``vllm bench serve``'s names, with the server's speculative-decoding figures over the
run) and the plots into ``--out``; prints the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

from nightjar_ray.cli.args import UsageError
from nightjar_ray.loadgen.client import (
    RunResult,
    open_session,
    record_json,
    request_headers,
    run_open_loop,
    served_models,
)
from nightjar_ray.loadgen.counters import (
    SpecDecodeCounts,
    counts_after_run,
    fetch_counts,
    metrics_endpoint,
)
from nightjar_ray.loadgen.dataset import (
    PromptSource,
    RandomTokens,
    TextPrompts,
    load_tokenizer,
    read_dataset,
)
from nightjar_ray.loadgen.summary import SLO_METRICS, parse_slos, summarize
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

RANDOM_DATASET, GENERATED_DATASET = "random", "generated"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("loadgen", help="Open-loop load against an OpenAI endpoint.")
    _endpoint_flags(p)
    _prompt_flags(p)
    p.add_argument("--arrivals", choices=ARRIVAL_NAMES, default="poisson", help="Arrival process.")
    p.add_argument("--rate", type=float, default=1.0, help="Requests/s (ramp: start rate).")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma: shape; 1 = Poisson.")
    p.add_argument("--steps", default="", help="step: SECONDS:RATE,... repeated.")
    p.add_argument("--ramp-end-rps", type=float, help="ramp: rate at the end (requests/s).")
    p.add_argument("--duration-s", type=float, default=60.0, help="Length of the run (s).")
    p.add_argument("--input-len", default="64:256", help="LOW:HIGH prompt tokens.")
    p.add_argument("--output-len", default="32:128", help="LOW:HIGH output tokens.")
    _trace_flags(p)
    p.add_argument(
        "--goodput",
        nargs="+",
        metavar="NAME:MS",
        help=f"SLOs in ms (NAME in {', '.join(SLO_METRICS)}), e.g. ttft:2000 tpot:200: "
        "adds request_goodput, the requests/s meeting all of them.",
    )
    p.add_argument("--seed", type=int, default=0, help="Seeds arrivals, lengths and prompts.")
    p.add_argument("--prometheus", help="Prometheus URL: overlay gamma and draft residency.")
    p.add_argument(
        "--out", type=Path, default=Path("loadgen-results"), help="Folder for the results."
    )
    p.add_argument("--no-progress", action="store_true", help="Hide the progress bar.")
    p.set_defaults(func=run)


def _endpoint_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="http://127.0.0.1:8000", help="Endpoint base URL.")
    p.add_argument(
        "--model", help="Model to request; default: the one model that URL/v1/models lists."
    )
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="A header on every request (repeatable). The API key comes from "
        "$NIGHTJAR_API_KEY (sent as 'Authorization: Bearer ...'), never from argv.",
    )
    p.add_argument(
        "--metrics-url",
        help="Prometheus endpoint with vLLM's spec-decode counters, scraped before and "
        "after the run for the acceptance figures (under Ray Serve: Ray's metrics export "
        "port, e.g. http://HEAD:8080); default: URL/metrics (vLLM's own server).",
    )
    p.add_argument(
        "--metrics-wait-s",
        type=float,
        default=60.0,
        help="After the run, how long to wait for the counters to cover the run's tokens "
        "(Ray exports them on an interval).",
    )


def _prompt_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dataset",
        default=RANDOM_DATASET,
        help="Prompt text: a JSON or JSONL file of ShareGPT 'conversations' or 'prompt' "
        f"entries; '{GENERATED_DATASET}' (Python source the project generates); "
        f"'{RANDOM_DATASET}' (random token IDs below --vocab-size, no tokenizer).",
    )
    p.add_argument(
        "--tokenizer",
        help="Tokenizer fitting dataset text to the lengths: a Hugging Face model ID, a "
        "local model directory (offline) or generated:<pair>; default: the model's name.",
    )
    p.add_argument(
        "--vocab-size", type=int, default=1000, help="--dataset random: token IDs below this."
    )


def _trace_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", type=Path, help="Replay an Azure-format trace CSV instead.")
    p.add_argument(
        "--trace-offset-s", type=float, default=0.0, help="Where the replay starts (trace s)."
    )
    p.add_argument("--trace-speedup", type=float, default=1.0, help="Divides the trace's clock.")
    p.add_argument(
        "--trace-sample", type=float, default=1.0, help="Keeps each request with this chance."
    )
    p.add_argument(
        "--trace-token-scale", type=float, default=1.0, help="Divides the trace's lengths."
    )
    p.add_argument(
        "--max-input-tokens", type=int, default=4096, help="Trace prompts clamped to this."
    )
    p.add_argument(
        "--max-output-tokens", type=int, default=1024, help="Trace outputs clamped to this."
    )


def _length(spec: str, flag: str) -> LengthRange:
    low, sep, high = spec.partition(":")
    try:
        return LengthRange(int(low), int(high if sep else low))
    except ValueError as e:
        raise ValueError(f"{flag}: {e} (use LOW:HIGH)") from None


def dataset_texts(args: argparse.Namespace) -> list[str] | None:
    """The prompt texts ``--dataset`` names; None for random token IDs."""
    if args.dataset == RANDOM_DATASET:
        return None
    if args.dataset == GENERATED_DATASET:
        from nightjar_ray.loadgen.generated_text import generated_prompts

        return generated_prompts()
    return read_dataset(Path(args.dataset))


def prompt_source(args: argparse.Namespace, texts: list[str] | None, model: str) -> PromptSource:
    """Random token IDs (``texts`` None), or ``texts`` tokenized with ``--tokenizer``
    (default: ``model``); ``ValueError`` naming the flag."""
    if texts is None:
        return RandomTokens(args.vocab_size)
    return TextPrompts(texts, load_tokenizer(_tokenizer_path(args.tokenizer or model)))


def _tokenizer_path(name: str) -> str:
    """``generated:<pair>`` resolved to the generated model's directory."""
    from nightjar_ray.serve.config import GENERATED_PREFIX, resolve_generated

    return resolve_generated(name) if name.startswith(GENERATED_PREFIX) else name


def build_requests(
    args: argparse.Namespace, source: PromptSource | None = None
) -> list[RequestSpec]:
    """The run's requests from the flags (synthetic or trace), prompts from ``source``
    (default: random token IDs below ``--vocab-size``); ``ValueError`` on bad flags."""
    rng = random.Random(args.seed)
    prompts = source if source is not None else RandomTokens(args.vocab_size)
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
        return trace_requests(segment, prompts, rng)
    arrivals = build_arrivals(
        args.arrivals, args.rate, args.burstiness, args.steps, args.ramp_end_rps
    )
    return synthetic_requests(
        arrivals,
        args.duration_s,
        _length(args.input_len, "--input-len"),
        _length(args.output_len, "--output-len"),
        prompts,
        rng,
    )


class ProgressBar:
    """A tqdm bar of requests done, with the failures so far."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        tty = sys.stderr.isatty()
        self.failed = 0
        self.bar = tqdm(
            total=total,
            unit="req",
            file=sys.stderr,
            disable=not enabled,
            mininterval=0.5 if tty else 10.0,
            dynamic_ncols=tty,
        )

    def __call__(self, record: RequestRecord) -> None:
        if not record.ok:
            self.failed += 1
            self.bar.set_postfix(failed=self.failed, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def write_results(run: RunResult, summary: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "records.jsonl").open("w") as f:
        for record in run.records:
            f.write(json.dumps(record_json(record)) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


async def served_model(args: argparse.Namespace, headers: dict[str, str]) -> str:
    """``--model``, or the one model ``/v1/models`` lists; ``ValueError`` otherwise."""
    if args.model:
        return str(args.model)
    async with open_session(30.0, headers) as session:
        models = await served_models(session, args.url)
    if len(models) != 1:
        raise ValueError(f"--model: {args.url}/v1/models lists {models}; name one with --model")
    return models[0]


async def _counts(
    metrics_url: str,
    model: str,
    before: SpecDecodeCounts | None = None,
    num_generated_tokens: int = 0,
    timeout_s: float = 0.0,
) -> SpecDecodeCounts | None:
    """One scrape (``before`` None), or the run's counts (after minus ``before``, waiting
    up to ``timeout_s`` for ``num_generated_tokens``: :func:`counts_after_run`); None,
    with a note, when the endpoint cannot be read or, after the run, has none. A scrape
    before the run that finds none is the zero it counts from: Ray exports a replica's
    counters only once they have counted something, so a fresh app has none yet."""
    # NOTE: no request headers: the API key is the endpoint's, not the metrics port's.
    async with open_session(30.0) as session:
        try:
            if before is None:
                counts = await fetch_counts(session, metrics_url, model)
            else:
                counts = await counts_after_run(
                    session, metrics_url, model, before, num_generated_tokens, timeout_s
                )
                counts = counts.minus(before)
        except ValueError as e:
            print(f"loadgen: no spec-decode figures: {e}", file=sys.stderr)
            return None
    if before is not None and not counts.found:
        print(
            f"loadgen: no spec-decode figures: {metrics_url} has no vLLM spec-decode counters "
            f"with model_name={model!r} (--metrics-url)",
            file=sys.stderr,
        )
        return None
    return counts


def _check_window(result: RunResult, counts: SpecDecodeCounts) -> None:
    tokens = sum(r.num_output_tokens for r in result.records)
    if counts.num_generation_tokens != tokens:
        print(
            f"loadgen: the server generated {counts.num_generation_tokens:.0f} tokens over the "
            f"run and its responses counted {tokens}: the spec-decode figures include other "
            "traffic, or the counters had not caught up (--metrics-wait-s)",
            file=sys.stderr,
        )


def _prepare(args: argparse.Namespace) -> tuple[dict[str, str], str, list[RequestSpec]]:
    """(headers, model, requests); :class:`UsageError` naming the flag on bad input."""
    try:
        headers = request_headers(args.header, os.environ)
        parse_slos(args.goodput)
        if args.trace is not None:
            resolve_trace(args.trace, {})  # a missing file is named before any request
        texts = dataset_texts(args)
        model = asyncio.run(served_model(args, headers))
        requests = build_requests(args, prompt_source(args, texts, model))
    except ValueError as e:
        raise UsageError(str(e)) from None
    return headers, model, requests


def run(args: argparse.Namespace) -> int:
    from nightjar_ray.loadgen.plots import overlay_series, plot_run

    headers, model, requests = _prepare(args)
    metrics_url = metrics_endpoint(args.metrics_url or args.url)
    before = asyncio.run(_counts(metrics_url, model))
    print(
        f"{len(requests)} requests over {args.duration_s:.0f} s -> {args.url} ({model})",
        file=sys.stderr,
    )
    progress = ProgressBar(len(requests), not args.no_progress)
    try:
        result = asyncio.run(run_open_loop(args.url, model, requests, progress, headers=headers))
    finally:
        progress.close()
    counts = None
    if before is not None:
        tokens = sum(r.num_output_tokens for r in result.records)
        counts = asyncio.run(_counts(metrics_url, model, before, tokens, args.metrics_wait_s))
    if counts is not None:
        _check_window(result, counts)
    summary = summarize(result, parse_slos(args.goodput), counts)
    write_results(result, summary, args.out)
    overlay = None
    if args.prometheus:
        from nightjar_ray.ops.render import PrometheusClient

        overlay = overlay_series(PrometheusClient(args.prometheus), result)
    plot_run(result, args.out, overlay)
    print(json.dumps({k: v for k, v in summary.items() if not k.startswith("std_")}, indent=1))
    return 1 if summary["failed"] else 0
