"""The benchmark report: a table like the paper's Tables 4 and 5 (throughput and mean E2E
latency per policy and scenario, as paired ratios to ``off``), the A/A resolution, and a
plot. :func:`write_section` puts it between the ``START`` and ``END`` markers of a
markdown file (``bench-serve --report``; docs/benchmarks.md, "Serving: policies side by
side"), so a rerun replaces it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from nightjar_ray.loadgen.bench import BASELINE, CONTROL, BenchResult
from nightjar_ray.loadgen.stats import RatioSummary, paired_ratios, resolution

START, END = "<!-- bench-serve:start -->", "<!-- bench-serve:end -->"
METRICS = (("output_throughput", "throughput"), ("mean_e2el_ms", "mean E2E latency"))


def ratio_table(result: BenchResult, key: str) -> dict[str, dict[str, RatioSummary]]:
    """scenario -> contender -> paired ratio summary of ``key`` to the baseline (each run
    over ``off``'s of its own wave and round; contenders absent from a scenario are left
    out)."""
    out: dict[str, dict[str, RatioSummary]] = {}
    for scenario, by_contender in result.summaries.items():
        out[scenario] = {
            c: paired_ratios(*result.paired(scenario, c, key), random.Random(0))
            for c in by_contender
            if c != BASELINE
        }
    return out


def _cell(r: RatioSummary | None) -> str:
    return "-" if r is None else f"{r.median:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]"


def markdown(result: BenchResult, header: str) -> str:
    """The report section (tables, A/A resolution, failures)."""
    scenarios = list(result.summaries)
    contenders = sorted({c for s in result.summaries.values() for c in s} - {BASELINE})
    lines = [START, header, ""]
    for key, label in METRICS:
        table = ratio_table(result, key)
        lines += [f"**{label}**, median paired ratio to `off` [95% bootstrap CI of the mean]:", ""]
        lines.append("| policy | " + " | ".join(scenarios) + " |")
        lines.append("| --- |" + " --- |" * len(scenarios))
        for c in contenders:
            cells = " | ".join(_cell(table[s].get(c)) for s in scenarios)
            lines.append(f"| {c} | {cells} |")
        if all(CONTROL in table[s] for s in scenarios):
            res = " | ".join(f"±{resolution(table[s][CONTROL]):.3f}" for s in scenarios)
            lines.append(f"| A/A resolution | {res} |")
        lines.append("")
    failed = {
        (s, c): sum(int(x["failed"]) for x in runs)
        for s, by in result.summaries.items()
        for c, runs in by.items()
    }
    lines.append(f"Failed requests in the whole run: {sum(failed.values())}.")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    """Replace the marked section of ``path`` (append it if absent)."""
    text = path.read_text() if path.exists() else ""
    if START in text and END in text:
        before, rest = text.split(START, 1)
        after = rest.split(END, 1)[1].lstrip("\n")
        text = before + section + after
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def plot_ratios(result: BenchResult, out_png: Path) -> None:
    """Throughput ratio to ``off`` per scenario and contender, with CI whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = ratio_table(result, "output_throughput")
    scenarios = list(table)
    contenders = sorted({c for s in table.values() for c in s})
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(scenarios)), 4))
    width = 0.8 / max(1, len(contenders))
    for i, c in enumerate(contenders):
        xs = [j + i * width for j, s in enumerate(scenarios) if c in table[s]]
        rs: list[Any] = [table[s][c] for s in scenarios if c in table[s]]
        ax.bar(xs, [r.median for r in rs], width, label=c)
        ax.errorbar(
            xs,
            [r.median for r in rs],
            yerr=[[r.median - r.ci_low for r in rs], [r.ci_high - r.median for r in rs]],
            fmt="none",
            ecolor="black",
            linewidth=0.6,
        )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(scenarios))], scenarios)
    ax.set_ylabel("throughput / off")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=90)
    plt.close(fig)
