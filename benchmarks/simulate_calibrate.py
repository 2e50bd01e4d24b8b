"""The simulator's cost model against the paper's tables.

    python benchmarks/simulate_calibrate.py [--setting rtx4090-7b] [--dataset sharegpt]

Prints the setting's KV bytes per token, Table 1 (KV MiB per sequence) of the paper next to
the simulator's, Table 3 (C_switch in ms) next to the simulated draft catch-up, and the
decode speedup over plain decoding per batch size and gamma (context 512 tokens).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nightjar_ray.sim.calibration import (
    PAPER_TABLE1_MIB,
    PAPER_TABLE3_MS,
    kv_mib,
    switch_cost_ms,
    token_latency_s,
)
from nightjar_ray.sim.presets import DATASETS, SETTINGS, get_setting


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Cost model vs the paper's tables.")
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="rtx4090-7b")
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="sharegpt")
    return parser


def run(args: argparse.Namespace) -> int:
    setting = get_setting(args.setting)
    t, d = setting.target, setting.draft
    print(f"{setting.name}: KV bytes/token: target {t.kv_bytes_per_token}")
    print(f"  draft {d.kv_bytes_per_token}")
    print("Table 1 (KV MiB per sequence): context | paper 13B | sim 13B | paper 7B | sim 7B")
    presets = SETTINGS["a100-13b"].target, SETTINGS["rtx4090-7b"].target
    for ctx, (p13, p7) in PAPER_TABLE1_MIB.items():
        sim13, sim7 = kv_mib(presets[0], ctx), kv_mib(presets[1], ctx)
        print(f"  {ctx} | {p13} | {sim13:.0f} | {p7} | {sim7:.0f}")
    print("Table 3 (C_switch ms): L | B | paper (RTX 4090, 7B) | sim")
    for (skip, batch), ms in PAPER_TABLE3_MS.items():
        print(f"  {skip} | {batch} | {ms:.2f} | {switch_cost_ms(setting, skip, batch):.2f}")
    acc = setting.acceptance_for(args.dataset)
    print(f"Decode speedup over plain decoding, context 512, acceptance {acc.mean}:")
    for b in (1, 4, 16, 32, 64, 128, 256):
        base = token_latency_s(setting, b, 0, 512, acc)
        cells = " ".join(
            f"g{g}={base / token_latency_s(setting, b, g, 512, acc):.2f}" for g in range(1, 6)
        )
        print(f"  B={b:<4} plain {base * 1e3:.2f} ms/token  {cells}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
