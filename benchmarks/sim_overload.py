"""Nightjar against the static choices under sustained overload, outside the suite
(docs/benchmarks.md, "Sustained overload (simulator)"): the check that keeps a change to
the offload rule from winning the suite by losing long-output traffic past capacity.

    python benchmarks/sim_overload.py --setting l20x2-32b --mix long-output --loads 1.2,1.5,2.0

For every load (a multiple of the setting's ``capacity_qps`` for the mix) and seed, a
Poisson stream of about ``--requests`` requests runs under ``nightjar`` (defaults, elastic
memory), ``off`` and ``fixed-1`` to ``fixed-3``; it prints nightjar's throughput over the
best static and over ``off`` per seed, the mean and the worst per load, and nightjar's
preemption count. Deterministic for the same arguments.
"""

from __future__ import annotations

import argparse
import statistics

from nightjar_ray.sim.experiments import compare_loads, default_contenders
from nightjar_ray.sim.presets import get_setting
from nightjar_ray.sim.suite import MIXES, capacity_qps, poisson

STATICS = ("off", "fixed-1", "fixed-2", "fixed-3")


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--setting", default="l20x2-32b")
    p.add_argument("--mix", default="long-output", choices=sorted(MIXES))
    p.add_argument("--loads", default="1.5", help="Comma-separated multiples of capacity.")
    p.add_argument("--seeds", type=int, default=10, help="Seeds 0..N-1.")
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--jobs", type=int, default=2)
    return p.parse_args()


def main() -> None:
    args = _parse()
    if args.seeds < 1 or args.requests < 1:
        raise SystemExit("--seeds and --requests must be >= 1")
    setting = get_setting(args.setting)
    mix = MIXES[args.mix]
    labels = ("nightjar", *STATICS)
    contenders = [c for c in default_contenders() if c.label in labels]
    for load in (float(x) for x in args.loads.split(",")):
        rate = load * capacity_qps(setting, mix)
        cases = [
            (f"{load}x", n, poisson(rate, mix, setting, n, args.requests))
            for n in range(args.seeds)
        ]
        rows = compare_loads(setting, contenders, cases, "sharegpt", jobs=args.jobs)
        ratios = [row.ratio("nightjar", row.oracle_label)[0] for row in rows]
        for (_, seed, _), row, of_best in zip(cases, rows, ratios, strict=True):
            pre = row.summaries["nightjar"].num_preemptions
            print(
                f"{args.setting} {args.mix} {load}x seed {seed}: nightjar / best static "
                f"({row.oracle_label}) {of_best:.3f}, / off "
                f"{row.ratio('nightjar')[0]:.3f}, preemptions {pre}"
            )
        print(
            f"{args.setting} {args.mix} {load}x: nightjar / best static mean "
            f"{statistics.mean(ratios):.3f}, worst {min(ratios):.3f} ({args.seeds} seeds)"
        )


if __name__ == "__main__":
    main()
