"""Elastic memory under KV pressure, one run, side by side (docs/benchmarks.md, "Elastic
memory under KV pressure").

    python benchmarks/bench_elastic.py --out benchmarks/results/bench-elastic.json

A burst of ``--requests`` long requests (prompts of ``--prompt-tokens``, ``--max-tokens``
out each, all arriving at once) on a KV budget too small to run them together
(``--kv-bytes``), the generated pair, greedy. Three engines, the same arrivals:

- ``base``: Nightjar with ``elastic_memory.enabled: false``;
- ``base (A/A)``: the same again, the control for run-to-run noise;
- ``elastic``: Nightjar with ``elastic_memory.enabled: true`` (what the default, "auto",
  resolves to on a CPU engine; the defaults otherwise).

Each round starts every engine afresh (one engine alive at a time: idle vLLM CPU
engines poll and would steal the cores), in a rotated order; ratios are taken per
round against ``base``. Per run: throughput, completed requests, preemptions (the
scheduler's count), peak and mean requests in one step (the decision log), and the
controller's events. Outputs are compared with ``base``'s (greedy: identical).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import offline_engine, random_prompts, run_batch
from nightjar_ray.models.pair import TINY_SPEC, PairSpec, generate_pair

CONTENDERS = ("base", "base (A/A)", "elastic")


def _config(label: str, args: argparse.Namespace, log: Path) -> NightjarConfig:
    elastic = {"enabled": label == "elastic"}  # the default ("auto") is on for a CPU engine
    params = {"gamma": args.fixed_gamma} if args.policy == "fixed" else {}
    return NightjarConfig.model_validate(
        {
            "policy": args.policy,
            "policy_params": params,
            "decision_log_path": str(log),
            "elastic_memory": elastic,
        }
    )


def _steps(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def run_one(
    label: str, pair: Any, prompts: list[list[int]], args: argparse.Namespace
) -> dict[str, Any]:
    engine = {
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "max_model_len": args.prompt_tokens + args.max_tokens + 32,
        "block_size": args.block_size,
        "kv_cache_memory_bytes": args.kv_bytes,
    }
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "decisions.jsonl"
        config = _config(label, args, log)
        spec_extra = {"num_speculative_tokens": args.gamma_max}
        with offline_engine(pair, config, spec_extra=spec_extra, **engine) as llm:
            run_batch(llm, prompts[:2], 8)  # warm-up
            warm_steps = len(_steps(log))
            (before,) = llm.collective_rpc("nightjar_memory_stats")
            run = run_batch(llm, prompts, args.max_tokens)
            (after,) = llm.collective_rpc("nightjar_memory_stats")
        steps = _steps(log)[warm_steps:]
    sched0, sched1 = before["scheduler"], after["scheduler"]
    in_step = [s["num_scheduled_reqs"] for s in steps]
    return {
        "tokens_per_s": run.tokens_per_s,
        "duration_s": run.duration_s,
        "completed": sum(len(t) == args.max_tokens for t in run.token_ids),
        "preemptions": sched1["num_preemptions"] - sched0["num_preemptions"],
        "peak_reqs_in_step": max(in_step),
        "mean_reqs_in_step": statistics.fmean(in_step),
        "steps": len(steps),
        "gamma0_share": sum(s["gamma"] == 0 for s in steps) / len(steps),
        "draft_away_steps": sum(s["draft_away"] for s in steps),
        "expansions": sched1.get("num_expansions", 0) - sched0.get("num_expansions", 0),
        "contractions": sched1.get("num_contractions", 0) - sched0.get("num_contractions", 0),
        "stock_blocks": after.get("num_stock_blocks"),
        "max_blocks": after.get("num_max_blocks"),
        "event_s": _event_times(before, after),
        "token_ids": run.token_ids,
    }


def _event_times(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """Mean seconds per event in this run: the scheduler's expand/contract (pool work),
    the worker's offload, reload dispatch (the step loop's cost of starting it) and
    background load."""
    s0, s1 = before["scheduler"], after["scheduler"]
    d0, d1 = before.get("draft", {}), after.get("draft", {})
    n_exp = s1.get("num_expansions", 0) - s0.get("num_expansions", 0)
    n_con = s1.get("num_contractions", 0) - s0.get("num_contractions", 0)
    n_off = d1.get("num_offloads", 0) - d0.get("num_offloads", 0)
    n_rel = d1.get("num_reloads", 0) - d0.get("num_reloads", 0)

    def mean(d_after: dict[str, Any], d_before: dict[str, Any], key: str, n: int) -> float:
        return (d_after.get(key, 0.0) - d_before.get(key, 0.0)) / n if n else 0.0

    return {
        "expand_s": mean(s1, s0, "expand_s", n_exp),
        "contract_s": mean(s1, s0, "contract_s", n_con),
        "offload_s": mean(d1, d0, "offload_s", n_off),
        "reload_dispatch_s": mean(d1, d0, "reload_dispatch_s", n_rel),
        "reload_background_s": mean(d1, d0, "reload_background_s", n_rel),
    }


def main() -> None:
    args = parse_args()
    spec = TINY_SPEC if args.pair == "tiny" else PairSpec()
    pair = generate_pair(Path(args.pair_dir) / args.pair, replace(spec, dtype=args.dtype))
    prompts = [
        random_prompts(1, args.prompt_tokens, spec.vocab_size, seed=1000 + i)[0]
        for i in range(args.requests)
    ]
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in CONTENDERS}
    for r in range(args.rounds):
        order = CONTENDERS[r % 3 :] + CONTENDERS[: r % 3]
        for label in order:
            runs[label].append(run_one(label, pair, prompts, args))
            print(label, {k: v for k, v in runs[label][-1].items() if k != "token_ids"})
    report = summarize(runs, args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["summary"], indent=2))


def summarize(runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    base = runs["base"]
    summary: dict[str, Any] = {}
    for label in CONTENDERS[1:]:
        pairs = list(zip(runs[label], base, strict=True))
        ratios = [o["tokens_per_s"] / b["tokens_per_s"] for o, b in pairs]
        summary[label] = {
            "throughput_ratio_median": statistics.median(ratios),
            "throughput_ratios": ratios,
            "outputs_identical_to_base": all(o["token_ids"] == b["token_ids"] for o, b in pairs),
        }
    for label, rs in runs.items():
        summary.setdefault(label, {}).update(
            {
                k: statistics.median(r[k] for r in rs)
                for k in ("peak_reqs_in_step", "mean_reqs_in_step", "preemptions", "completed")
            }
        )
        summary[label]["expansions"] = [r["expansions"] for r in rs]
    clean = {
        k: [{x: y for x, y in r.items() if x != "token_ids"} for r in v] for k, v in runs.items()
    }
    return {"args": vars(args), "summary": summary, "runs": clean}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="benchmarks/results/bench-elastic.json")
    p.add_argument("--pair", choices=["tiny", "default"], default="tiny")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--pair-dir", default=str(Path(tempfile.gettempdir()) / "nightjar-pairs"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--prompt-tokens", type=int, default=160)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument(
        "--kv-bytes",
        type=int,
        default=8_000_000,
        help="KV budget (8,000,000: 48 blocks of 32 tokens for the tiny pair in float32).",
    )
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-num-batched-tokens", type=int, default=512)
    p.add_argument(
        "--gamma-max",
        type=int,
        default=3,
        help="The largest gamma: speculative_config.num_speculative_tokens (default 3).",
    )
    p.add_argument("--policy", default="nightjar")
    p.add_argument("--fixed-gamma", type=int, default=0)
    return p.parse_args()


if __name__ == "__main__":
    main()
