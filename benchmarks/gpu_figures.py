"""Issue 41's four GPU figures in one command (docs/benchmarks.md, "GPU figures (issue 41)").

    python benchmarks/gpu_figures.py --out benchmarks/results/gpu-figures.json --markdown

Needs PyTorch with CUDA and Triton (and ``cuda-bindings`` for the CUDA arena); no vLLM,
no network, no model weights (random tensors of the models' shapes).

1. arena: expand and contract latency of the KV arena (``build_kv_arena``) for the 7B and
   the 32B-per-rank (TP=2) block shapes at the pool sizes ``deploy/`` gives on an 80 GB
   H100, next to the paper's Table 6; committed bytes before/after against a plain
   allocation of the same pool; pages written before a remap read back bit-identical.
   Also on the CPU (``--device cpu``, the CPU arena; ``--scale small`` for a quick run).
2. mover: the Triton block mover on the 7B setting's KV pages against a device copy of
   the same bytes (``copy_``) and torch's ``index_copy_`` of the same pages; goal >= 0.8x.
3. reload: a pinned-host, side-stream, non-blocking copy of Qwen2.5-0.5B's weights (bf16)
   overlapping a matmul loop shaped like a 7B decode step of 32 tokens; goal <= 5% slowdown.
4. graphs: per-query-length FULL CUDA-graph replay against piecewise/eager for a stand-in
   decoder block, from ``benchmarks/gpu_graph_replay.py`` ("missing" where it is absent).

Each figure runs on its own: one that fails is recorded with its error and the others
still run (exit status 1). The JSON is rewritten after every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

if __package__ in (None, ""):  # run as a script: the repository root, for ``benchmarks.*``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._gpu_arena import (
    ARENA_SCALES,
    arena_figure,
    arena_rows,
    summary,
)
from benchmarks._gpu_work import (
    MoverBench,
    decode_step,
    draft_weights,
    event_time_s,
    qwen7b_decode_weights,
    reload_round,
    start_reload,
)

FIGURES = ("arena", "mover", "reload", "graphs")
MOVER_GRID = tuple((tile, warps) for tile in (1024, 2048, 4096) for warps in (4, 8, 16))
"""(words per tile, warps per program) of the Triton mover, timed beside its default."""


class NoCUDAError(RuntimeError):
    """A GPU figure was asked for on a machine where CUDA is not available."""


def require_cuda(figure: str) -> torch.device:
    """The CUDA device, or :class:`NoCUDAError` with the one line the command prints."""
    if not torch.cuda.is_available():
        raise NoCUDAError(
            f"gpu_figures: the {figure} figure needs CUDA (torch.cuda.is_available() is "
            "False); without a GPU only `--only arena --device cpu` runs"
        )
    return torch.device("cuda", torch.cuda.current_device())


def environment() -> dict[str, Any]:
    """Device name and the versions the figures depend on."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device": "cpu",
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
        env["device_total_bytes"] = torch.cuda.get_device_properties(0).total_memory
        env["driver"] = _driver_version()
    return env


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else None


# -- 2. the block mover ------------------------------------------------------------------


def mover_figure(args: argparse.Namespace) -> dict[str, Any]:
    """Triton mover against ``copy_`` of the same bytes, 7B target pages (28 layers x
    32 KiB), ``--mover-blocks`` scattered moves; paired rounds, ratio = baseline time /
    contender time (1 = as fast as the copy)."""
    from nightjar_ray.memory.kernels import TritonBlockMover, build_block_mover

    device = require_cuda("mover")
    gen = torch.Generator(device=device).manual_seed(args.seed)
    bench = MoverBench(device, args.mover_blocks, gen)
    triton_mover, torch_mover = build_block_mover("triton"), build_block_mover("torch")
    contenders: dict[str, Callable[[], object]] = {
        "copy_": bench.plain_copy,
        "copy_ (A/A)": bench.plain_copy,
        "index_copy_": bench.index_copy,
        "triton mover": lambda: triton_mover(bench.layout, bench.buffer, bench.moves),
        "torch mover": lambda: torch_mover(bench.layout, bench.buffer, bench.moves),
    }
    for tile, warps in MOVER_GRID:  # the kernel's launch shapes beside the default
        mover = TritonBlockMover(tile, warps)
        contenders[_grid_label(tile, warps)] = functools.partial(
            mover, bench.layout, bench.buffer, bench.moves
        )
    times = _paired_rounds(contenders, args.warmup, args.rounds)
    correct = bench.moves_pages(contenders["triton mover"])
    return _mover_result(times, bench.nbytes, args.mover_blocks, correct)


def _paired_rounds(
    contenders: dict[str, Callable[[], object]], warmup: int, rounds: int
) -> dict[str, list[float]]:
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(rounds):
        for label, fn in contenders.items():
            times[label].append(event_time_s(fn))
    return times


def _mover_result(
    times: dict[str, list[float]], nbytes: int, num: int, correct: bool
) -> dict[str, Any]:
    base = times["copy_"]
    ratios = {k: [b / t for b, t in zip(base, v, strict=True)] for k, v in times.items()}
    return {
        "shape": "7B: 28 target layers x 32 KiB pages (16 tokens x 4 KV heads x 128 x K,V bf16)",
        "moved_blocks": num,
        "bytes_moved": nbytes,
        "ms": {k: 1e3 * statistics.median(v) for k, v in times.items()},
        "gb_per_s": {k: nbytes / statistics.median(v) / 1e9 for k, v in times.items()},
        "ratio_to_copy": {k: summary(v) for k, v in ratios.items()},
        "goal_triton_ratio_min": 0.8,
        "triton_moved_correct": correct,
    }


def _grid_label(tile: int, warps: int) -> str:
    return f"triton {tile}x{warps}"


def _mover_grid_rows(ratios: dict[str, dict[str, float]]) -> list[str]:
    """The best launch shape of the grid (runs saved before the grid existed: none)."""
    labels = (_grid_label(tile, warps) for tile, warps in MOVER_GRID)
    grid = {k: ratios[k]["median"] for k in labels if k in ratios}
    if not grid:
        return []
    best = max(grid, key=grid.__getitem__)
    return [f"| mover | 7B pages | best of the grid ({best}) / copy_ | {grid[best]:.3f} | - |"]


# -- 3. draft reload overlapping a decode loop -------------------------------------------


def reload_figure(args: argparse.Namespace) -> dict[str, Any]:
    """Paired rounds: the decode loop alone, with the reload in flight, alone again (A/A);
    the loop is sized so that the copy covers it. Slowdown = with / alone - 1."""
    device = require_cuda("reload")
    gen = torch.Generator(device=device).manual_seed(args.seed)
    host, dev = draft_weights(device, gen)
    weights = qwen7b_decode_weights(device, gen)
    x = torch.empty(args.decode_tokens, 3584, dtype=torch.bfloat16, device=device)
    x.normal_(generator=gen)
    side = torch.cuda.Stream(device)
    copy_s = [event_time_s(lambda: start_reload(host, dev, side)[1], side) for _ in range(3)]
    step_s = statistics.median([event_time_s(lambda: decode_step(x, weights)) for _ in range(5)])
    steps = max(2, int(min(copy_s) / step_s))
    num = args.warmup + args.rounds
    rounds = [reload_round(x, weights, steps, host, dev, side) for _ in range(num)]
    rounds = rounds[args.warmup :]
    landed = all(torch.equal(d.cpu(), h) for d, h in zip(dev[:2], host[:2], strict=True))
    nbytes = sum(h.nbytes for h in host)
    return {
        "draft_bytes": nbytes,
        "decode_tokens": args.decode_tokens,
        "h2d_gb_per_s": nbytes / statistics.median(copy_s) / 1e9,
        "decode_step_ms": 1e3 * step_s,
        "loop_steps": steps,
        "slowdown": summary([r["with"] / r["alone"] - 1 for r in rounds]),
        "slowdown_aa": summary([r["alone_again"] / r["alone"] - 1 for r in rounds]),
        "copy_end_over_loop_end": summary([r["copy_end_over_loop_end"] for r in rounds]),
        "reload_dispatch_us": summary([1e6 * r["dispatch_s"] for r in rounds]),
        "goal_slowdown_max": 0.05,
        "paper_table6_reload_dispatch_us": 21.9,
        "weights_landed_identical": landed,
    }


# -- 4. CUDA graphs per query length ------------------------------------------------------


def graphs_figure(args: argparse.Namespace) -> dict[str, Any]:
    """``benchmarks/gpu_graph_replay.py``'s JSON lines (its ``main(argv)``)."""
    require_cuda("graphs")
    return graph_replay_lines(Path(__file__).with_name("gpu_graph_replay.py"), args.graphs_arg)


def graph_replay_lines(script: Path, argv: Sequence[str]) -> dict[str, Any]:
    """Run ``script``'s ``main(argv)`` in this process and parse what it prints, one JSON
    object per line; ``status`` "missing" when the script is not in this checkout."""
    if not script.exists():
        return {"status": "missing", "why": f"{script.name} is not in this checkout"}
    spec = importlib.util.spec_from_file_location(f"benchmarks.{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            code = module.main(list(argv))
    except SystemExit as exc:  # argparse errors, its own refusals
        code = exc.code
    lines, other = [], []
    for line in filter(str.strip, printed.getvalue().splitlines()):
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            other.append(line)
    status = "ok" if not code else f"exit {code}"
    return {"status": status, "argv": list(argv), "lines": lines, "other_output": other}


def graph_rows(figure: dict[str, Any]) -> list[str]:
    """docs/benchmarks.md rows for ``gpu_graph_replay.py``'s lines (one per batch and
    query length); a line of another shape is shown as it came."""
    rows = []
    for r in figure["lines"]:
        if not isinstance(r, dict) or not {"full_ms", "piecewise_ms", "eager_ms"} <= set(r):
            rows.append(f"| graphs | - | {json.dumps(r)} | - | - |")
            continue
        setting = f"{r.get('num_reqs')} req x query length {r.get('query_len')}"
        value = f"{r['full_ms']:.3f} / {r['piecewise_ms']:.3f} / {r['eager_ms']:.3f} ms"
        ratio = r["piecewise_ms"] / r["full_ms"]
        rows.append(f"| graphs | {setting} | FULL / PIECEWISE / eager | {value} | {ratio:.3f}x |")
    return rows


# -- the command --------------------------------------------------------------------------

RUNNERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "arena": lambda a: arena_figure(a, _arena_device(a)),
    "mover": mover_figure,
    "reload": reload_figure,
    "graphs": graphs_figure,
}


def _arena_device(args: argparse.Namespace) -> torch.device:
    return torch.device("cpu") if args.device == "cpu" else require_cuda("arena")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpu_figures.py", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    parser.add_argument("--markdown", action="store_true", help="print docs/benchmarks.md rows")
    parser.add_argument("--only", choices=FIGURES, action="append", help="this figure (repeat)")
    parser.add_argument("--from", dest="from_json", type=Path, help="render a saved run only")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="arena only")
    parser.add_argument("--scale", choices=ARENA_SCALES, default=None, help="arena pool sizes")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per figure")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--live-fraction", type=float, default=0.25, help="arena region")
    parser.add_argument("--mover-blocks", type=int, default=2048)
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument(
        "--graphs-arg", action="append", default=[], help="for gpu_graph_replay (--graphs-arg=X)"
    )
    parser.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="each figure in its own process (default: when several run)",
    )
    parser.add_argument("--figure-timeout-s", type=float, default=300.0, help="with --isolate")
    args = parser.parse_args(list(argv))
    if args.rounds < 1 or args.warmup < 0 or args.mover_blocks < 1 or args.decode_tokens < 1:
        parser.error("--rounds, --mover-blocks and --decode-tokens must be >= 1, --warmup >= 0")
    if not 0 < args.live_fraction <= 1:
        parser.error("--live-fraction must be in (0, 1]")
    if args.device == "cpu" and set(args.only or FIGURES) != {"arena"}:
        parser.error("--device cpu: only the arena figure runs on the CPU (--only arena)")
    args.scale = args.scale or ("small" if args.device == "cpu" else "full")
    return args


def run_figures(args: argparse.Namespace) -> dict[str, Any]:
    """Every asked-for figure; refuses before running any when CUDA is needed and absent.
    With ``--isolate`` (the default for several figures) each runs in its own process, so
    one that leaves the CUDA context broken, or its memory held, spoils no other."""
    names = list(dict.fromkeys(args.only or FIGURES))
    for name in names:
        if name != "arena" or args.device == "cuda":
            require_cuda(name)
    isolate = len(names) > 1 if args.isolate is None else args.isolate
    result: dict[str, Any] = {"environment": environment(), "args": _jsonable(vars(args))}
    result["figures"] = {}
    for name in names:
        run = _run_child if isolate else _run_here
        result["figures"][name] = run(name, args)
        _save(args.out, result)
    return result


def _run_here(name: str, args: argparse.Namespace) -> dict[str, Any]:
    try:
        return RUNNERS[name](args)
    except Exception as exc:  # one figure's failure must not lose the others
        traceback.print_exc()
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"}


def _run_child(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """``name`` in a child process of this script (its stderr passes through)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figure.json"
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in _child_flags(args).items()]
        flags += [f"--graphs-arg={a}" for a in args.graphs_arg]
        cmd = [sys.executable, str(Path(__file__).resolve()), *flags, "--no-isolate"]
        cmd += ["--only", name, "--out", str(out)]
        try:
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, timeout=args.figure_timeout_s)
        except subprocess.TimeoutExpired:
            return {"status": "error", "error": f"timed out after {args.figure_timeout_s} s"}
        if not out.exists():
            return {"status": "error", "error": f"exit {proc.returncode} without a result"}
        figure: dict[str, Any] = json.loads(out.read_text())["figures"][name]
        return figure


def _child_flags(args: argparse.Namespace) -> dict[str, Any]:
    names = ("device", "scale", "rounds", "warmup", "seed", "live_fraction")
    return {k: getattr(args, k) for k in (*names, "mover_blocks", "decode_tokens")}


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in values.items()}


def _save(out: Path | None, result: dict[str, Any]) -> None:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")


def markdown_rows(result: dict[str, Any]) -> list[str]:
    """Rows of docs/benchmarks.md's table: | figure | setting | measure | value | goal |."""
    figures = result["figures"]
    rows = []
    for name, fig in figures.items():
        if fig.get("status") in ("error", "missing"):
            rows.append(
                f"| {name} | - | {fig['status']} | {fig.get('error', fig.get('why'))} | - |"
            )
        elif name == "arena":
            rows += arena_rows(fig)
        elif name == "mover":
            r, ms = fig["ratio_to_copy"]["triton mover"], fig["ms"]
            rows.append(f"| mover | 7B pages | Triton / copy_ | {r['median']:.3f} | >= 0.8 |")
            vs_index = ms["index_copy_"] / ms["triton mover"]
            rows.append(f"| mover | 7B pages | Triton / index_copy_ | {vs_index:.3f} | - |")
            rows += _mover_grid_rows(fig["ratio_to_copy"])
        elif name == "reload":
            s = fig["slowdown"]["median"]
            rows.append(f"| reload | 0.5B bf16 | decode loop slowdown | {100 * s:.1f}% | <= 5% |")
        else:
            rows += graph_rows(fig)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.from_json is not None:
        result = json.loads(args.from_json.read_text())
    else:
        try:
            result = run_figures(args)
        except NoCUDAError as exc:
            print(exc, file=sys.stderr)
            return 2
        print(json.dumps(result, indent=1))
    if args.markdown:
        env = result["environment"]
        print(f"\n{env['device']}, torch {env['torch']}, triton {env['triton']}")
        print("\n".join(markdown_rows(result)))
    failed = [k for k, v in result["figures"].items() if v.get("status") == "error"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
