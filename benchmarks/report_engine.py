"""Markdown tables from ``bench_engine.py``'s JSON (docs/benchmarks.md, the "Engine on
CPU" sections).

python benchmarks/report_engine.py benchmarks/results/bench-engine.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from nightjar_ray.loadgen.host import host_line

LEARNER = "nightjar"  # the learner every other engine of the e2e line-up is judged against
# NOTE: the label bench_engine.py gives its --aa-control engine (not imported: that
# module needs vLLM, this one runs anywhere); a second `off`: the noise, not a choice.
AA_CONTROL = "off (A/A control)"
MIXED_SEQUENCE = (1, 4, 16, 48)
STATIC_POLICIES = frozenset({"off", "fixed", "vllm-static"})
"""Policies that choose gamma by a fixed rule (at most per batch size): what the verdict's
"best static" ranges over (not another nightjar configuration, such as the step gate)."""


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


def table(res: dict[str, Any], batches: list[str], mixed: bool, max_tokens: int) -> str:
    """Median tok/s per policy and batch (ratio to off), plus the mixed sequence."""
    off = res["off"]["tokens_per_s"]
    head = "| policy | " + " | ".join(f"B={b}" for b in batches)
    rows = [head + (" | mixed sequence |" if mixed else " |")]
    rows.append("| --- |" + " --- |" * (len(batches) + int(mixed)))
    for label, r in res.items():
        tps = r["tokens_per_s"]
        cells = " | ".join(f"{tps[b]:.0f} ({tps[b] / off[b]:.2f})" for b in batches)
        tail = f" {seconds(off, max_tokens) / seconds(tps, max_tokens):.3f} |" if mixed else ""
        rows.append(f"| {label} | {cells} |{tail}")
    return "\n".join(rows) + "\n"


def seconds(tps: dict[str, float], max_tokens: int) -> float:
    """Time of the mixed sequence (one batch of each size) at these tok/s."""
    return sum(int(b) * max_tokens / tps[b] for b in tps)


def round_ratios(res: dict[str, Any], a: str, b: str, key: str, batch: str) -> list[float] | None:
    """``a``'s per-round ``key`` (``round_tokens_per_s``, ``round_mean_e2e_s``) over ``b``'s
    in the same round (paired: same prompts, same host moment); None if either lacks it."""
    ra, rb = res[a].get(key), res[b].get(key)
    if not ra or not rb:
        return None
    return [x / y for x, y in zip(ra[batch], rb[batch], strict=True)]


def paired(res: dict[str, Any], a: str, b: str, batch: str) -> str:
    """Median (min..max) over measured rounds of a's tok/s / b's in the same round."""
    ratios = round_ratios(res, a, b, "round_tokens_per_s", batch)
    if ratios is None:
        return ""
    return f" (per round {statistics.median(ratios):.3f}, {min(ratios):.3f}..{max(ratios):.3f})"


def static_labels(res: dict[str, Any], e2e_policies: str | None) -> list[str]:
    """The labels of ``res`` whose engine runs a static policy, by the run's
    ``--e2e-policies`` (label, policy, params); a run of the default line-up, where every
    engine but nightjar's runs one: every label but nightjar's and the A/A control's."""
    if not e2e_policies:
        return [s for s in res if s not in (LEARNER, AA_CONTROL)]
    policy = {label: name for label, name, _ in json.loads(e2e_policies)}
    return [s for s in res if policy.get(s) in STATIC_POLICIES]


def verdict(
    res: dict[str, Any], batches: list[str], mixed: bool, max_tokens: int, static: list[str]
) -> str:
    """nightjar against the best of the ``static`` choices per batch size and over the
    mixed sequence."""
    nj = res[LEARNER]["tokens_per_s"]
    out = ""
    for b in batches:
        best = max(static, key=lambda s: res[s]["tokens_per_s"][b])
        ratio = nj[b] / res[best]["tokens_per_s"][b]
        out += f"B={b}: nightjar / best static ({best}) {ratio:.3f}"
        out += paired(res, LEARNER, best, b) + "\n"
        if AA_CONTROL in res:
            aa = res[AA_CONTROL]["tokens_per_s"][b] / res["off"]["tokens_per_s"][b]
            out += f"  A/A control / off {aa:.3f}" + paired(res, AA_CONTROL, "off", b) + "\n"
    if mixed:
        nj_s = seconds(nj, max_tokens)
        out += "mixed sequence, time of each static choice / nightjar's: " + ", ".join(
            f"{s} {seconds(res[s]['tokens_per_s'], max_tokens) / nj_s:.3f}" for s in static
        )
        out += "\n"
    return out


def spread(ratios: list[float] | None) -> str:
    """Median (range) of per-round ratios."""
    if ratios is None:
        return "-"
    return f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"


def paired_table(res: dict[str, Any]) -> str:
    """Per contender and batch: throughput and mean E2E over ``off``'s, round by round."""
    rows = [
        "| contender | batch | throughput / `off` | mean E2E / `off` |",
        "| --- | --- | --- | --- |",
    ]
    for label in res:
        for b in res["off"]["tokens_per_s"]:
            thr = spread(round_ratios(res, label, "off", "round_tokens_per_s", b))
            lat = spread(round_ratios(res, label, "off", "round_mean_e2e_s", b))
            rows.append(f"| {label} | {b} | {thr} | {lat} |")
    return "\n".join(rows) + "\n"


def paired_test(res: dict[str, Any], a: str, b: str, key: str, batch: str) -> str:
    """``a`` over ``b`` per round on ``key``: median ratio, rounds where ``a`` is higher, and
    the Wilcoxon signed-rank p of the per-round log ratios (scipy); "-" without the data."""
    from scipy.stats import wilcoxon

    ratios = round_ratios(res, a, b, key, batch)
    if ratios is None:
        return "-"
    logs = [math.log(r) for r in ratios]
    p = math.nan if len(logs) < 2 else 1.0 if not any(logs) else wilcoxon(logs).pvalue
    higher = sum(r > 1 for r in ratios)
    return f"{statistics.median(ratios):.3f} (higher in {higher} of {len(ratios)}; p {p:.3f})"


def learner_table(res: dict[str, Any]) -> str:
    """nightjar over every other engine (the A/A control: over ``off``), round by round."""
    rows = ["| over | batch | throughput | mean E2E |", "| --- | --- | --- | --- |"]
    for label in res:
        if label == LEARNER:
            continue
        a, b = (AA_CONTROL, "off") if label == AA_CONTROL else (LEARNER, label)
        for batch in res["off"]["tokens_per_s"]:
            thr = paired_test(res, a, b, "round_tokens_per_s", batch)
            lat = paired_test(res, a, b, "round_mean_e2e_s", batch)
            rows.append(f"| {a} / {b} | {batch} | {thr} | {lat} |")
    return "\n".join(rows) + "\n"


def e2e(res: dict[str, Any], args: dict[str, Any]) -> str:
    max_tokens = args["max_tokens"]
    batches = list(res["off"]["tokens_per_s"])
    mixed = {int(b) for b in batches} == set(MIXED_SEQUENCE)
    out = table(res, batches, mixed, max_tokens)
    out += "\nPer round, over `off`'s in the same round: median (range)\n\n" + paired_table(res)
    if LEARNER in res:
        out += "\nPer round, paired\n\n" + learner_table(res)
        static = static_labels(res, args.get("e2e_policies"))
        out += "\n" + verdict(res, batches, mixed, max_tokens, static)
        warm = res[LEARNER].get("warmup_tokens_per_s")
        if warm:
            off = res["off"]["tokens_per_s"]
            out += "nightjar warm-up rounds (mean tok/s, ratio to off's measured median): "
            out += ", ".join(f"B={b}: {warm[b]:.0f} ({warm[b] / off[b]:.2f})" for b in batches)
            out += "\n"
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", type=Path, help="bench_engine.py's JSON (its --out).")
    data = json.loads(p.parse_args().results.read_text())
    if (line := host_line(data.get("host"))) is not None:
        print(line + "\n")
    if "overhead" in data:
        print("Scheduler overhead\n\n" + overhead(data["overhead"]))
    if "skip" in data:
        print("gamma=0: true skip vs stock K=0\n\n" + skip(data["skip"]))
    if "e2e" in data:
        print("End to end (tok/s, ratio to off)\n\n" + e2e(data["e2e"], data["args"]))


if __name__ == "__main__":
    main()
