"""Markdown tables from ``bench_engine.py``'s JSON (docs/benchmarks.md, "Engine").

python loadtest/report_engine.py docs/bench-engine.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

LEARNER = "nightjar"  # every other label in the e2e line-up is a static choice


def overhead(res: dict[str, Any]) -> str:
    b = str(res["batch"])
    stock, ours = res["stock"][b], res["nightjar"][b]
    return (
        f"| gamma | batch | stock tok/s | nightjar tok/s | step time nightjar / stock |\n"
        f"| --- | --- | --- | --- | --- |\n"
        f"| {res['gamma']} | {b} | {stock:.1f} | {ours:.1f} | {stock / ours:.3f} |\n"
    )


def skip(res: dict[str, Any]) -> str:
    rows = [
        "| batch | plain tok/s | true skip tok/s | stock K=0 tok/s | "
        "step time true skip / stock K=0 | step time true skip / plain |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for b in res["plain"]:
        plain, ours, stock = res["plain"][b], res["true-skip"][b], res["stock-k0"][b]
        rows.append(
            f"| {b} | {plain:.1f} | {ours:.1f} | {stock:.1f} | {stock / ours:.3f} | "
            f"{plain / ours:.3f} |"
        )
    return "\n".join(rows) + "\n"


def e2e(res: dict[str, Any], max_tokens: int) -> str:
    batches = list(res["off"]["tokens_per_s"])
    off = res["off"]["tokens_per_s"]
    head = "| policy | " + " | ".join(f"B={b}" for b in batches) + " | mixed sequence |"
    rows = [head, "| --- |" + " --- |" * (len(batches) + 1)]

    def seconds(tps: dict[str, float]) -> float:
        return sum(int(b) * max_tokens / tps[b] for b in batches)

    for label, r in res.items():
        tps = r["tokens_per_s"]
        cells = " | ".join(f"{tps[b]:.0f} ({tps[b] / off[b]:.2f})" for b in batches)
        rows.append(f"| {label} | {cells} | {seconds(off) / seconds(tps):.3f} |")
    out = "\n".join(rows) + "\n"
    if LEARNER in res:
        nj = res[LEARNER]["tokens_per_s"]
        static = [s for s in res if s != LEARNER]
        best = {b: max(res[s]["tokens_per_s"][b] for s in static) for b in batches}
        out += "\nnightjar / best static per batch: " + ", ".join(
            f"B={b}: {nj[b] / best[b]:.3f}" for b in batches
        )
        mixed_s = {s: seconds(res[s]["tokens_per_s"]) for s in static}
        out += f"; mixed sequence vs best static: {min(mixed_s.values()) / seconds(nj):.3f}\n"
        out += "mixed sequence, time of each static choice / nightjar's: " + ", ".join(
            f"{s} {t / seconds(nj):.3f}" for s, t in mixed_s.items()
        )
        out += "\n"
        warm = res[LEARNER].get("warmup_tokens_per_s")
        if warm:
            out += (
                "nightjar warm-up rounds (mean tok/s, ratio to off): "
                + ", ".join(f"B={b}: {warm[b]:.0f} ({warm[b] / off[b]:.2f})" for b in batches)
                + "\n"
            )
    return out


def main() -> None:
    data = json.loads(Path(sys.argv[1]).read_text())
    if "overhead" in data:
        print("Scheduler overhead\n\n" + overhead(data["overhead"]))
    if "skip" in data:
        print("gamma=0: true skip vs stock K=0\n\n" + skip(data["skip"]))
    if "e2e" in data:
        print("End to end (tok/s, ratio to off)\n\n" + e2e(data["e2e"], data["args"]["max_tokens"]))


if __name__ == "__main__":
    main()
