"""``nightjar-ray dashboards``: generate, provision and render the operator dashboards.

- ``generate [--check]``: write ``dashboards/nightjar-ray.json``, the Helm chart's copy,
  its ``values.schema.json`` and its README from code (``--check`` only reports stale
  files, exit 1).
- ``provision --url http://grafana:3000 [--token T | --user U --password P]``: push the
  dashboard to Grafana (folder ``nightjar-ray``), idempotently.
- ``render --prometheus http://127.0.0.1:9090 [--minutes 10] --out dashboard.png``: draw
  every panel from Prometheus to one PNG (what Grafana would show).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("dashboards", help="Grafana dashboards: generate, push, draw.")
    sub = parser.add_subparsers(dest="action", required=True)
    gen = sub.add_parser(
        "generate", help="Write the dashboard JSON, chart schema and chart README from code."
    )
    gen.add_argument("--root", type=Path, default=Path("."), help="Repository root.")
    gen.add_argument("--check", action="store_true", help="Only check; exit 1 if stale.")
    gen.set_defaults(func=_generate)
    prov = sub.add_parser("provision", help="Push the dashboards to Grafana's HTTP API.")
    prov.add_argument("--url", required=True, help="Grafana base URL.")
    prov.add_argument("--token", help="Grafana API token (service account).")
    prov.add_argument("--user", help="Basic-auth user (with --password).")
    prov.add_argument("--password", help="Basic-auth password.")
    prov.set_defaults(func=_provision)
    ren = sub.add_parser("render", help="Draw every panel from Prometheus to PNG.")
    ren.add_argument("--prometheus", default="http://127.0.0.1:9090")
    ren.add_argument("--minutes", type=float, default=10.0, help="Window ending at --end.")
    ren.add_argument("--end", type=float, help="Window end, unix seconds (default: now).")
    ren.add_argument("--step-s", type=float, default=5.0)
    ren.add_argument("--rate-interval", default="30s", help="Stands for $__rate_interval.")
    ren.add_argument("--out", type=Path, default=Path("dashboard.png"))
    ren.set_defaults(func=_render)


def _generate(args: argparse.Namespace) -> int:
    from nightjar_ray.ops.artifacts import stale_artifacts, write_artifacts

    if args.check:
        stale = stale_artifacts(args.root)
        for path in stale:
            print(f"stale: {path} (run `nightjar-ray dashboards generate`)", file=sys.stderr)
        return 1 if stale else 0
    for path in write_artifacts(args.root):
        print(f"wrote {path}")
    return 0


def _provision(args: argparse.Namespace) -> int:
    from nightjar_ray.ops.grafana import build_dashboard
    from nightjar_ray.ops.provision import provision

    if (args.user is None) != (args.password is None):
        raise SystemExit("--user and --password go together")
    credential = args.token or ((args.user, args.password) if args.user else None)
    for result in provision(args.url, [build_dashboard()], credential):
        print(json.dumps({"uid": result.uid, "url": result.url, "version": result.version}))
    return 0


def _render(args: argparse.Namespace) -> int:
    from nightjar_ray.ops.render import PrometheusClient, Window, render_dashboard

    end = args.end if args.end is not None else time.time()
    window = Window(end - args.minutes * 60, end, args.step_s)
    counts = render_dashboard(
        PrometheusClient(args.prometheus), window, args.out, args.rate_interval
    )
    empty = [title for title, n in counts.items() if n == 0]
    print(f"wrote {args.out}: {len(counts)} panels, {len(empty)} without data {empty or ''}")
    return 1 if empty else 0
