"""``nightjar-ray bench-serve``: the side-by-side benchmark of policies behind the endpoint.

By default it starts a local Ray cluster, deploys one Serve app per contender (same
generated pair, a different ``nightjar.policy``); with ``--endpoint NAME=URL`` (repeated)
the contenders are deployments the user already runs instead, one per name, ``off`` the
baseline. It then measures the capacity (requests/s that ``off`` sustains under a
saturating open loop) unless ``--capacity-rps`` is given, runs interleaved paired rounds of
every scenario (``nightjar_ray.loadgen.bench``) and writes ``bench-serve.json``, a plot
and, with ``--report``, the report section of a markdown file (``docs/benchmarks.md``'s).
More local contenders than ``--max-resident`` run in waves (``plan_waves``); ``--render``
rebuilds the report from saved JSON files without a cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from nightjar_ray.cli.args import (
    UsageError,
    add_header,
    existing_file,
    headers_of,
    names,
    output_file,
)
from nightjar_ray.cli.bench_local import (
    MODEL_ID,
    deploy,
    fresh_pool_dir,
    retire,
    start_serve,
)
from nightjar_ray.loadgen.bench import (
    BASELINE,
    CONTENDERS,
    SCENARIOS,
    BenchResult,
    Endpoint,
    parse_endpoint,
    plan_waves,
    scenarios,
)
from nightjar_ray.loadgen.host import host_line, host_record, same_host
from nightjar_ray.workload.trace import TRACE_ENV, resolve_trace

SCENARIO_NAMES = (*SCENARIOS, "trace")


def _endpoint(value: str) -> Endpoint:
    try:
        return parse_endpoint(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("bench-serve", help="Side-by-side benchmark of the policies.")
    p.add_argument(
        "--endpoint",
        type=_endpoint,
        action="append",
        default=[],
        metavar="NAME=URL[,MODEL]",
        help=f"A contender you already serve (repeatable, one per contender; one named"
        f" {BASELINE!r} is the baseline, another pointing at the same URL as {BASELINE!r} is"
        " an A/A control): its OpenAI base URL and, unless its /v1/models lists exactly one,"
        " the model. Without any, the generated pair is deployed locally per --contenders.",
    )
    add_header(p)
    p.add_argument(
        "--pair",
        choices=("default", "tiny"),
        default="default",
        help="Generated model pair the local contenders serve.",
    )
    p.add_argument(
        "--contenders",
        type=names(CONTENDERS, "contender"),
        default=None,
        help="Comma-separated local contenders (policies) to deploy, including"
        f" {BASELINE!r} (default: all: {','.join(CONTENDERS)}).",
    )
    p.add_argument(
        "--scenarios",
        type=names(SCENARIO_NAMES, "scenario"),
        default=",".join(SCENARIO_NAMES),
        help="Comma-separated scenarios to run each round.",
    )
    p.add_argument("--rounds", type=int, default=4, help="Interleaved rounds of every scenario.")
    p.add_argument("--duration-s", type=float, default=120.0, help="Per scenario and round.")
    p.add_argument("--capacity-rps", type=float, help="Skip calibration: requests/s of off.")
    p.add_argument(
        "--trace",
        type=existing_file,
        help=f"Azure-format trace CSV of the trace scenario (default: ${TRACE_ENV}; without"
        " either, the trace scenario is left out).",
    )
    p.add_argument(
        "--enforce-eager",
        action="store_true",
        help="Start every engine without torch.compile (quicker start; then the timings are"
        " of eager engines).",
    )
    p.add_argument(
        "--http-port", type=int, default=8000, help="Port of the local Serve HTTP proxy."
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("bench-serve-results"),
        help="Directory for bench-serve.json and ratios.png (created if needed).",
    )
    p.add_argument(
        "--report", type=output_file, help="Write the report section into this markdown."
    )
    p.add_argument(
        "--max-resident",
        type=int,
        default=6,
        help="Most apps deployed at once; more contenders run in waves, each with off and"
        " off-aa again.",
    )
    p.add_argument(
        "--render",
        type=existing_file,
        nargs="+",
        metavar="FILE",
        help="No cluster: rebuild the report and plot from saved bench-serve.json files,"
        " merged as successive waves.",
    )
    p.set_defaults(func=run)


def _calibrate(off: Endpoint, duration_s: float, headers: dict[str, str]) -> float:
    """Requests/s ``off`` completes under an arrival rate far above what it can serve."""
    import random

    from nightjar_ray.loadgen.bench import CHAT_OUTPUT, CHAT_PROMPT, endpoint_runner
    from nightjar_ray.loadgen.summary import summarize
    from nightjar_ray.loadgen.workload import synthetic_requests
    from nightjar_ray.workload.arrivals import poisson

    reqs = synthetic_requests(
        poisson(5.0), duration_s, CHAT_PROMPT, CHAT_OUTPUT, 1000, random.Random(99)
    )
    summary = summarize(endpoint_runner({BASELINE: off}, headers)(BASELINE, reqs))
    return float(summary["request_throughput"])


def _on_run(rnd: int, scenario: str, contender: str, s: dict[str, Any]) -> None:
    print(
        f"round {rnd} {scenario:<14} {contender:<16} {s['output_throughput']:7.1f} tok/s"
        f"  E2E {s['mean_e2el_ms']:8.0f} ms  failed {s['failed']}",
        file=sys.stderr,
        flush=True,
    )


def _trace(args: argparse.Namespace) -> Path | None:
    """The trace scenario's CSV: ``--trace``, else ``$NIGHTJAR_TRACE``; without either the
    scenario is left out (and said so); a named file that is not there is an error, when
    the scenario runs or ``--trace`` names it."""
    if args.trace is None:
        if "trace" not in args.scenarios:
            return None
        if not os.environ.get(TRACE_ENV):
            print(f"bench-serve: no --trace or ${TRACE_ENV}: no trace scenario", file=sys.stderr)
            return None
    try:
        return resolve_trace(args.trace, os.environ)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _chosen(args: argparse.Namespace) -> list[Any]:
    """The scenarios to run, in the given order; an error when none is left."""
    table = scenarios(_trace(args))
    chosen = [table[s] for s in args.scenarios if s in table]
    if not chosen:
        raise UsageError(f"--scenarios {','.join(args.scenarios)}: no scenario left to run")
    return chosen


def _command(argv: list[str]) -> str:
    """The command line as recorded in the report, ``--header`` values hidden."""
    out, hide = [], False
    for arg in argv:
        out.append("'***'" if hide else "--header='***'" if arg.startswith("--header=") else arg)
        hide = arg == "--header"
    return "nightjar-ray bench-serve " + " ".join(out)


def _meta(args: argparse.Namespace, capacity: float | None, started: float) -> dict[str, Any]:
    return {"capacity_rps": capacity, "rounds": args.rounds, "duration_s": args.duration_s,
            "wall_s": time.time() - started, "cpus": os.cpu_count(),
            "command": _command(sys.argv[2:]), "host": host_record()}  # fmt: skip


def _measure_local(
    args: argparse.Namespace, waves: list[list[str]], headers: dict[str, str]
) -> tuple[BenchResult, dict[str, Any]]:
    """Deploy, run and retire each wave in turn; returns the runs and the run's meta."""
    from nightjar_ray.loadgen.bench import endpoint_runner, run_rounds

    chosen = _chosen(args)
    pools = fresh_pool_dir(args.out)
    url = start_serve(args.http_port, max(len(w) for w in waves))
    capacity, result = args.capacity_rps, BenchResult()
    counts: dict[str, Any] = {}
    started = time.time()
    for i, wave in enumerate(waves):
        print(f"wave {i}: {','.join(wave)}", file=sys.stderr, flush=True)
        deploy(args.pair, wave, args.enforce_eager, str(pools))
        endpoints = {name: Endpoint(name, f"{url}/{name}", MODEL_ID) for name in wave}
        if capacity is None:
            capacity = _calibrate(endpoints[BASELINE], min(args.duration_s, 60.0), headers)
            print(f"capacity: {capacity:.3f} requests/s", file=sys.stderr, flush=True)
        run_rounds(
            endpoint_runner(endpoints, headers), wave, chosen, args.rounds, capacity,
            args.duration_s, 1000, _on_run, result, i,
        )  # fmt: skip
        retire(wave, counts)
    meta = {**_meta(args, capacity, started), "pair": args.pair, "waves": waves}
    return result, {**meta, "counters": counts}


def _measure_endpoints(
    args: argparse.Namespace, given: list[Endpoint], headers: dict[str, str]
) -> tuple[BenchResult, dict[str, Any]]:
    """One wave over deployments the user runs (no counters: their policy actors are not
    reachable from here); returns the runs and the run's meta."""
    from nightjar_ray.loadgen.bench import endpoint_runner, run_rounds, with_served_models

    contenders = [e.name for e in given]
    if len(set(contenders)) != len(contenders) or BASELINE not in contenders:
        raise UsageError(f"--endpoint: names must be distinct and one must be {BASELINE!r}")
    chosen = _chosen(args)
    try:
        endpoints = {e.name: e for e in with_served_models(given, headers)}
    except ValueError as e:
        raise UsageError(f"--endpoint {e}") from None
    started, capacity = time.time(), args.capacity_rps
    if capacity is None:
        capacity = _calibrate(endpoints[BASELINE], min(args.duration_s, 60.0), headers)
        print(f"capacity: {capacity:.3f} requests/s", file=sys.stderr, flush=True)
    result = run_rounds(
        endpoint_runner(endpoints, headers), contenders, chosen, args.rounds, capacity,
        args.duration_s, 1000, _on_run,
    )  # fmt: skip
    meta = {**_meta(args, capacity, started), "pair": None, "waves": [contenders]}
    by_name = {n: {"url": e.url, "model": e.model} for n, e in endpoints.items()}
    return result, {**meta, "endpoints": by_name}


def _load(paths: list[Path]) -> tuple[BenchResult, dict[str, Any]]:
    """Saved runs merged as successive waves; they must share pair, capacity and
    duration (their rounds would not be the same requests otherwise)."""
    result, metas = BenchResult(), []
    for path in paths:
        try:
            data = json.loads(path.read_text())
            metas.append(data["meta"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise UsageError(f"--render {path}: not a bench-serve.json ({e!r})") from None
        result.merge(BenchResult.from_json(data))
    for key in ("pair", "capacity_rps", "duration_s"):
        values = {round(m[key], 3) if isinstance(m[key], float) else m[key] for m in metas}
        if len(values) > 1:
            raise UsageError(f"--render: the files differ in {key}: {values}")
    hosts = [m["host"] for m in metas if m.get("host") is not None]
    if any(not same_host(hosts[0], h) for h in hosts[1:]):
        names = sorted({host_line(h) or "" for h in hosts})
        raise UsageError(f"--render: the files differ in host: {names}")
    runs = "; ".join(f"`{m['command']}`" for m in metas if "command" in m)
    meta = {**metas[0], "files": [str(p) for p in paths], "runs": runs}
    return result, meta


# Whose host the record names: local contenders are served on the machine bench-serve
# runs on; endpoints are served wherever the user runs them.
_WHOSE_HOST = ("", " (bench-serve's own; the endpoints' hosts are not recorded)")


def _header(result: BenchResult, meta: dict[str, Any], command: str) -> str:
    host = host_line(meta.get("host"))
    if meta.get("endpoints"):
        served = ", ".join(
            f"`{n}` = {e['url']} (`{e['model']}`)" for n, e in meta["endpoints"].items()
        )
        what = f"Endpoints {served}"
    else:
        what = f"Pair `{meta['pair']}`"
    return (
        f"{what}, {meta['rounds']} interleaved rounds x {meta['duration_s']:.0f} s"
        f" per scenario, {result.num_waves()} wave(s), capacity {meta['capacity_rps']:.3f} req/s"
        f" ({meta['cpus']} CPUs). Command: `{command}`"
        + (f" (the saved runs: {meta['runs']})." if meta.get("runs") else ".")
        + (f" {host}{_WHOSE_HOST[bool(meta.get('endpoints'))]}." if host else "")
    )


def run(args: argparse.Namespace) -> int:
    from nightjar_ray.loadgen.report import markdown, plot_ratios, write_section

    args.out.mkdir(parents=True, exist_ok=True)
    if args.render:
        result, meta = _load(args.render)
        command = "nightjar-ray bench-serve --render " + " ".join(str(p) for p in args.render)
    else:
        headers = headers_of(args, os.environ)
        if args.endpoint:
            if args.contenders is not None:
                raise UsageError("--contenders picks local contenders; --endpoint names its own")
            result, meta = _measure_endpoints(args, args.endpoint, headers)
        else:
            contenders = args.contenders or list(CONTENDERS)
            try:
                waves = plan_waves(contenders, args.max_resident)
            except ValueError as e:
                raise UsageError(f"--contenders/--max-resident: {e}") from None
            result, meta = _measure_local(args, waves, headers)
        command = meta["command"]
        (args.out / "bench-serve.json").write_text(json.dumps({"meta": meta, **result.summaries}))
    plot_ratios(result, args.out / "ratios.png")
    section = markdown(result, _header(result, meta, command))
    if args.report:
        write_section(args.report, section)
    print(section)
    return 0
