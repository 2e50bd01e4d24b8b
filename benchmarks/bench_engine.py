"""Engine benchmarks, one run, side by side (docs/benchmarks.md, the "Engine on CPU"
sections).

    python benchmarks/bench_engine.py --out benchmarks/results/bench-engine.json

Three parts, all on the generated pair (s=0.05 recipe, 79M target, 1-layer
draft, bf16), greedy, ``--max-tokens`` output tokens per request, random
token prompts of ``--prompt-tokens``:

1. overhead: vLLM's stock scheduler with num_speculative_tokens=g versus the
   Nightjar scheduler with policy ``fixed`` (gamma=g) and ``draft_sync=stock``
   (same worker work), both engines alive, runs interleaved.
2. skip: gamma=0 via Nightjar ``off`` with the true skip (``catch-up``) versus
   vLLM's K=0 (``stock``: draft forward kept), plus plain decoding (no SD),
   interleaved, batches 1/16/48.
3. e2e: offline batches 1, 4, 16, 48 for ``off``, ``fixed`` 1..4,
   ``vllm-static`` and ``nightjar``, all engines alive together; nightjar
   first runs ``--warmup-rounds`` passes of the mixed sequence alone
   (reported as warm-up, with prompts the measured rounds do not use), then
   every engine runs the measured rounds interleaved; a measured run covers
   ``--min-requests`` prompts or more (consecutive batches of the batch size) and
   records tokens/s and its requests' mean E2E (queue entry to last token);
   ``report_engine.py`` prints each engine's per-round ratios to ``off``'s.

Throughput ratios come from the same run; CPU timing is noisy (a few %).
Each run is preceded by a short pause (``--settle-s``): an idle vLLM worker
busy-polls for about a second after its last step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Literal

from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import offline_engine, random_prompts, run_batch
from nightjar_ray.engine.testing_config import TestingConfig
from nightjar_ray.loadgen.host import host_record
from nightjar_ray.models.pair import ModelPair, PairSpec, generate_pair
from nightjar_ray.policy import PRESETS

BATCHES = (1, 4, 16, 48)
SKIP_BATCHES = (1, 16, 48)
AA_CONTROL = "off (A/A control)"
NUM_SPECULATIVE_TOKENS = 4
"""The largest gamma (``speculative_config.num_speculative_tokens``) of the skip and
end-to-end engines."""
# NOTE: "vllm-static low-load" is the baseline, a table tuned at low load
# (best measured gamma at B=1 and B=2..4 on this pair, extended above B=4 as vLLM
# does); "vllm-static crossover" is the policy's default table, which follows this
# pair's measured crossover over the whole range (a per-batch-size best choice).
E2E_POLICIES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("off", "off", {}),
    ("fixed g=1", "fixed", {"gamma": 1}),
    ("fixed g=2", "fixed", {"gamma": 2}),
    ("fixed g=3", "fixed", {"gamma": 3}),
    ("fixed g=4", "fixed", {"gamma": 4}),
    (
        "vllm-static low-load",
        "vllm-static",
        {"num_speculative_tokens_per_batch_size": [[1, 1, 3], [2, 4, 2]]},
    ),
    ("vllm-static crossover", "vllm-static", {}),
    ("nightjar", "nightjar", {}),
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="benchmarks/results/bench-engine.json")
    p.add_argument("--pair-dir", default=str(Path.home() / ".cache/nightjar-ray/pairs/bench-s0.05"))
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument(
        "--prompt-tokens-max",
        type=int,
        default=None,
        help="Prompt lengths uniform in [--prompt-tokens, this] (a prefill-heavy mix).",
    )
    p.add_argument(
        "--max-tokens-min",
        type=int,
        default=None,
        help="Output lengths uniform in [this, --max-tokens] (default: all --max-tokens).",
    )
    p.add_argument(
        "--mixed",
        action="store_true",
        help=(
            "Per request, a fair coin: a long prompt (upper half of the prompt range) with a "
            "short output (--max-tokens-min), or a short prompt (--prompt-tokens) with a long "
            "output (--max-tokens); both kinds share every batch."
        ),
    )
    p.add_argument("--rounds", type=int, default=4, help="Measured rounds (median).")
    p.add_argument(
        "--min-requests",
        type=int,
        default=16,
        help="e2e: each measured run covers at least this many prompts (consecutive batches).",
    )
    p.add_argument("--settle-s", type=float, default=2.0, help="Pause before each run.")
    p.add_argument(
        "--dtype",
        default=None,
        help="Engine dtype of every part (default: the pair's, bfloat16; float32 avoids the "
        "slow bfloat16 fallback on CPUs without AVX512-BF16/AMX).",
    )
    p.add_argument("--warmup-rounds", type=int, default=30, help="Nightjar warm-up passes.")
    p.add_argument(
        "--warmup-settle-s",
        type=float,
        default=0.0,
        help="Pause before each warm-up run (only nightjar runs then, so no other engine polls).",
    )
    p.add_argument(
        "--batches",
        default=",".join(map(str, BATCHES)),
        help="e2e: batch sizes of the measured rounds (the warm-up runs them and 1, 4).",
    )
    p.add_argument(
        "--aa-control",
        action="store_true",
        help=f"e2e: add a second `off` engine ({AA_CONTROL!r}) whose ratio to `off` is the "
        "noise between two identical schedules in this run.",
    )
    p.add_argument("--overhead-gamma", type=int, default=2)
    p.add_argument("--overhead-batch", type=int, default=16)
    p.add_argument("--profile", default=None, help="C_switch CSV for the nightjar policy.")
    p.add_argument("--parts", default="overhead,skip,e2e")
    p.add_argument("--decision-log", default=None, help="Nightjar's per-step decisions (JSONL).")
    p.add_argument(
        "--e2e-policies",
        default=None,
        help="JSON [[label, policy, params], ...] replacing the e2e line-up; params may "
        'hold "policy_snapshot" (warm start). The label "nightjar" gets the warm-up rounds.',
    )
    return p.parse_args()


MEASURED, LEARNING, KERNEL_WARMUP = 0, 1, 2
"""Phases of ``prompt_seed``."""


def prompt_seed(phase: int, round_idx: int, batch: int) -> int:
    """Seed of the prompts of one (phase, round, batch size), distinct for each.

    Distinct because vLLM's prefix cache is on: a prompt an engine has seen is served from
    cache the second time, with no prefill, and nightjar's draft catches up over it
    (``engine/lag.py``), so a reused prompt would measure neither prefill nor draft.
    """
    return (phase * 1000 + round_idx) * 1000 + batch


def tps(llm: Any, batch: int, args: argparse.Namespace, seed: int, min_requests: int = 1) -> float:
    """Tokens/s over ``ceil(min_requests / batch)`` consecutive batches of distinct prompts.

    With one request per run, which gamma is fastest depends on that prompt's acceptance,
    so e2e's measured runs pass ``--min-requests`` to average over several prompts.
    """
    return measure(llm, batch, args, seed, min_requests)[0]


def measure(
    llm: Any, batch: int, args: argparse.Namespace, seed: int, min_requests: int = 1
) -> tuple[float, float]:
    """``tps``'s run: (tokens/s, mean E2E in seconds over its requests, from each request's
    entry into the engine's queue to its last token)."""
    num_batches = -(-min_requests // batch)
    prompts, outputs = request_mix(batch * num_batches, args, seed)
    runs = [
        run_batch(llm, prompts[i * batch : (i + 1) * batch], outputs[i * batch : (i + 1) * batch])
        for i in range(num_batches)
    ]
    if any(r.e2e_s is None for r in runs):
        raise ValueError("the engine kept no request stats (disable_log_stats): no E2E")
    e2e = [s for r in runs for s in r.e2e_s or []]
    tokens_per_s = sum(r.num_tokens for r in runs) / sum(r.duration_s for r in runs)
    return tokens_per_s, statistics.mean(e2e)


def request_mix(n: int, args: argparse.Namespace, seed: int) -> tuple[list[list[int]], list[int]]:
    """``n`` distinct prompts and output lengths (fixed, or uniform in the given ranges)."""
    import random

    rng = random.Random(seed)
    lo, hi = args.prompt_tokens, args.prompt_tokens_max or args.prompt_tokens
    out_lo = args.max_tokens_min or args.max_tokens
    if args.mixed:
        kinds = [rng.random() < 0.5 for _ in range(n)]
        lengths = [rng.randint((lo + hi) // 2, hi) if k else lo for k in kinds]
        prompts = [random_prompts(1, m, 2048, seed * 100_003 + i)[0] for i, m in enumerate(lengths)]
        return prompts, [out_lo if k else args.max_tokens for k in kinds]
    prompts = [
        random_prompts(1, rng.randint(lo, hi), 2048, seed * 100_003 + i)[0] for i in range(n)
    ]
    return prompts, [rng.randint(out_lo, args.max_tokens) for _ in range(n)]


def engine_overrides(args: Any) -> dict[str, Any]:
    """vLLM kwargs every engine of the run gets (``--dtype``)."""
    return {} if args.dtype is None else {"dtype": args.dtype}


def interleaved(
    pair: ModelPair, engines: dict[str, dict[str, Any]], batches: tuple[int, ...], args: Any
) -> dict[str, dict[int, float]]:
    """Median tokens/s per engine and batch, engines alive together, runs interleaved."""
    from contextlib import ExitStack

    samples: dict[str, dict[int, list[float]]] = {n: {b: [] for b in batches} for n in engines}
    with ExitStack() as stack:
        over = engine_overrides(args)
        llms = {
            n: stack.enter_context(offline_engine(pair, **kw, **over)) for n, kw in engines.items()
        }
        for name, llm in llms.items():
            # warm-up: shapes, kernels
            tps(llm, batches[-1], args, prompt_seed(KERNEL_WARMUP, 0, batches[-1]))
            print(f"warm: {name}", flush=True)
        for r in range(args.rounds):
            order = list(llms.items())
            for b in batches:
                for name, llm in order if r % 2 == 0 else order[::-1]:
                    # NOTE: an idle vLLM worker busy-polls for ~1 s after its last
                    # step; settle so it does not steal a core from the next engine.
                    time.sleep(args.settle_s)
                    samples[name][b].append(tps(llm, b, args, prompt_seed(MEASURED, r, b)))
    return {n: {b: statistics.median(v) for b, v in per.items()} for n, per in samples.items()}


def bench_overhead(pair: ModelPair, args: argparse.Namespace) -> dict[str, Any]:
    g = args.overhead_gamma
    engines = {
        "stock": {"stock_gamma": g},
        "nightjar": {
            "nightjar": NightjarConfig(
                policy="fixed", policy_params={"gamma": g}, draft_sync="stock"
            ),
            "spec_extra": {"num_speculative_tokens": g},
        },
    }
    res = interleaved(pair, engines, (args.overhead_batch,), args)
    b = args.overhead_batch
    return {"gamma": g, "batch": b, **res, "time_ratio": res["stock"][b] / res["nightjar"][b]}


def bench_skip(pair: ModelPair, args: argparse.Namespace) -> dict[str, Any]:
    def off(sync: Literal["catch-up", "stock"]) -> dict[str, Any]:
        return {
            "nightjar": NightjarConfig(policy="off", draft_sync=sync),
            "spec_extra": {"num_speculative_tokens": NUM_SPECULATIVE_TOKENS},
        }

    engines = {"plain": {}, "true-skip": off("catch-up"), "stock-k0": off("stock")}
    res = interleaved(pair, engines, SKIP_BATCHES, args)
    ratios = {b: res["stock-k0"][b] / res["true-skip"][b] for b in SKIP_BATCHES}
    return {**res, "step_time_ratio_true_skip_over_stock_k0": ratios}


def policy_config(name: str, params: dict[str, Any], args: Any) -> NightjarConfig:
    learns = name == "nightjar"
    params = dict(params)
    snapshot = params.pop("policy_snapshot", None)
    # NOTE: a nightjar preset's parameters are research overrides, not policy_params.
    preset = name in PRESETS
    return NightjarConfig(
        policy=name,
        policy_params={} if preset else params,
        testing=TestingConfig(policy_overrides=params if preset else {}),
        policy_snapshot=snapshot,
        switch_cost_profile=args.profile if learns else None,
        decision_log_path=args.decision_log if learns else None,
    )


def warm_up(llm: Any, args: argparse.Namespace, batches: tuple[int, ...]) -> dict[int, float]:
    """Nightjar alone learns over ``--warmup-rounds`` passes of the mixed sequence
    (prompts the measured rounds do not use); mean tok/s per batch size."""
    warmup: dict[int, list[float]] = {b: [] for b in batches}
    for r in range(args.warmup_rounds):
        for b in batches:
            time.sleep(args.warmup_settle_s)
            warmup[b].append(tps(llm, b, args, prompt_seed(LEARNING, r, b)))
        print(f"warm-up round {r} done", flush=True)
    return {b: statistics.mean(v) for b, v in warmup.items()}


Samples = dict[str, dict[int, list[float]]]
"""Per engine label and batch size, one value per measured round."""


def measured_rounds(
    llms: dict[str, Any], measured: tuple[int, ...], args: argparse.Namespace
) -> tuple[Samples, Samples]:
    """tok/s and mean E2E (s) of every engine, batch size and round; engine order reversed
    every round."""
    tokens_per_s: Samples = {n: {b: [] for b in measured} for n in llms}
    mean_e2e_s: Samples = {n: {b: [] for b in measured} for n in llms}
    order = list(llms.items())
    for r in range(args.rounds):
        for b in measured:
            for label, llm in order if r % 2 == 0 else order[::-1]:
                time.sleep(args.settle_s)
                rate, e2e = measure(llm, b, args, prompt_seed(MEASURED, r, b), args.min_requests)
                tokens_per_s[label][b].append(rate)
                mean_e2e_s[label][b].append(e2e)
        print(f"e2e round {r} done", flush=True)
    return tokens_per_s, mean_e2e_s


def bench_e2e(pair: ModelPair, args: argparse.Namespace) -> dict[str, Any]:
    """Every policy's engine alive together; nightjar warms up alone first, then
    all engines run the measured rounds interleaved (same prompts per round)."""
    from contextlib import ExitStack

    longest = (args.prompt_tokens_max or args.prompt_tokens) + args.max_tokens + 8
    kw = {
        "max_num_seqs": 64,
        "kv_cache_memory_bytes": 256 << 20,
        "max_model_len": max(1024, longest),
        "spec_extra": {"num_speculative_tokens": NUM_SPECULATIVE_TOKENS},
        **engine_overrides(args),
    }
    lineup = list(json.loads(args.e2e_policies) if args.e2e_policies else E2E_POLICIES)
    if args.aa_control:
        lineup.append((AA_CONTROL, "off", {}))
    measured = tuple(int(b) for b in args.batches.split(","))
    with ExitStack() as stack:
        llms = {
            label: stack.enter_context(
                offline_engine(pair, policy_config(name, params, args), **kw)
            )
            for label, name, params in lineup
        }
        for llm in llms.values():
            # engine warm-up (kernels), not policy learning
            tps(llm, 4, args, prompt_seed(KERNEL_WARMUP, 0, 4))
        warmup = warm_up(llms["nightjar"], args, tuple(sorted({*measured, *BATCHES[:2]})))
        samples, e2e = measured_rounds(llms, measured, args)
    res: dict[str, Any] = {
        label: {
            "tokens_per_s": {b: statistics.median(v) for b, v in per.items()},
            "round_tokens_per_s": per,  # every measured round, to judge the noise
            "mean_e2e_s": {b: statistics.median(v) for b, v in e2e[label].items()},
            "round_mean_e2e_s": e2e[label],
        }
        for label, per in samples.items()
    }
    res["nightjar"]["warmup_tokens_per_s"] = warmup
    return res


def main() -> None:
    args = parse_args()
    pair = generate_pair(args.pair_dir, PairSpec(residual_scale=0.05))
    parts = set(args.parts.split(","))
    out: dict[str, Any] = {"args": vars(args), "host": host_record()}
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    for part, fn in (("overhead", bench_overhead), ("skip", bench_skip), ("e2e", bench_e2e)):
        if part in parts:
            out[part] = fn(pair, args)
            print(part, json.dumps(out[part], indent=1), flush=True)
            out_path.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
