"""Markdown rendering of simulator results (what ``nightjar-ray simulate`` prints)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nightjar_ray.sim.experiments import LoadRow
from nightjar_ray.sim.metrics import Summary


def summary_lines(label: str, s: Summary) -> list[str]:
    return [
        f"{label}: {s.num_requests} requests, makespan {s.makespan_s:.1f} s",
        f"  throughput {s.throughput_tokens_per_s:.1f} tok/s "
        f"(output {s.output_throughput_tokens_per_s:.1f} tok/s)",
        f"  TTFT mean {s.mean_ttft_s * 1e3:.1f} ms p99 {s.p99_ttft_s * 1e3:.1f} ms | "
        f"TPOT mean {s.mean_tpot_s * 1e3:.2f} ms | "
        f"E2E mean {s.mean_e2e_s:.3f} s p99 {s.p99_e2e_s:.3f} s",
        f"  mean gamma {s.mean_gamma:.2f} | preemptions {s.num_preemptions} | "
        f"draft offloads {s.num_offloads}",
    ]


def ratio_table(rows: Sequence[LoadRow], labels: Sequence[str]) -> list[str]:
    """Throughput and mean-E2E ratios to ``off`` per load; the oracle and nightjar's gap."""
    head = "| load | " + " | ".join(labels) + " | oracle | nightjar / oracle |"
    sep = "|" + "---|" * (len(labels) + 3)
    out = [
        "Throughput ratio to `off` (higher is better) / mean E2E latency ratio to `off` "
        "(lower is better):",
        "",
        head,
        sep,
    ]
    for row in rows:
        cells = []
        for label in labels:
            tput, lat = row.ratio(label)
            cells.append(f"{tput:.3f} / {lat:.2f}")
        o_tput, o_lat = row.ratio(row.oracle_label)
        gap = row.ratio("nightjar", row.oracle_label)[0] if "nightjar" in labels else float("nan")
        out.append(
            f"| {row.load} | "
            + " | ".join(cells)
            + f" | {o_tput:.3f} / {o_lat:.2f} ({row.oracle_label}) | {gap:.3f} |"
        )
    return out


def seed_summary_table(rows_by_seed: Mapping[int, Sequence[LoadRow]]) -> list[str]:
    """Nightjar against the oracle (best static per seed, in hindsight) at each load over seeds.

    Columns: nightjar's throughput over the oracle's in each seed, their mean and worst, the
    number of seeds where nightjar is ahead (ratio > 1), and nightjar's mean E2E latency
    over the oracle's, averaged over seeds. Rows are matched by position (same loads)."""
    seeds = sorted(rows_by_seed)
    head = "| load | " + " | ".join(f"seed {n}" for n in seeds)
    out = [
        "nightjar throughput / oracle throughput per seed (oracle: best static in that seed):",
        "",
        head + " | mean | worst | ahead in | mean E2E latency / oracle's |",
        "|" + "---|" * (len(seeds) + 5),
    ]
    for i, first in enumerate(rows_by_seed[seeds[0]]):
        rows = [rows_by_seed[n][i] for n in seeds]
        tput, lat = zip(*(row.ratio("nightjar", row.oracle_label) for row in rows), strict=True)
        ahead = sum(t > 1.0 for t in tput)
        out.append(
            f"| {first.load} | "
            + " | ".join(f"{t:.3f} ({row.oracle_label})" for t, row in zip(tput, rows, strict=True))
            + f" | {sum(tput) / len(tput):.3f} | {min(tput):.3f} | {ahead}/{len(tput)}"
            + f" | {sum(lat) / len(lat):.2f} |"
        )
    return out


def absolute_table(rows: Sequence[LoadRow], labels: Sequence[str]) -> list[str]:
    """Absolute throughput (tok/s) per load, for reference."""
    out = ["| load | " + " | ".join(labels) + " |", "|" + "---|" * (len(labels) + 1)]
    for row in rows:
        cells = [f"{row.summaries[k].throughput_tokens_per_s:.0f}" for k in labels]
        out.append(f"| {row.load} | " + " | ".join(cells) + " |")
    return out
