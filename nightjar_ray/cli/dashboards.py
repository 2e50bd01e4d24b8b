"""``nightjar-ray dashboards``: generate, provision and render the operator dashboards.

- ``generate [--check]``: write ``dashboards/nightjar-ray.json``, the Helm chart's copy,
  its ``values.schema.json`` and its README from code (``--check`` only reports stale
  files, exit 1).
- ``provision --url http://grafana:3000 [--user U]``: push the dashboard to Grafana
  (folder ``nightjar-ray``), idempotently; the secret comes from the environment, never
  argv: ``$GRAFANA_PASSWORD`` with ``--user``, else ``$GRAFANA_TOKEN`` if set.
- ``render --prometheus http://127.0.0.1:9090 [--minutes 10] --out dashboard.png``: draw
  every panel from Prometheus to one PNG (what Grafana would show).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from nightjar_ray.cli.args import UsageError, existing_dir, output_file

PASSWORD_ENV = "GRAFANA_PASSWORD"
TOKEN_ENV = "GRAFANA_TOKEN"


class _Refused(argparse.Action):
    """A flag that once took a secret on argv: using it is an error naming the variable."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        var = {"--password": "--password-env", "--token": "--token-env"}[str(option)]
        name = getattr(namespace, var[2:].replace("-", "_"))
        parser.error(f"{option} is not taken on the command line; set ${name} ({var})")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("dashboards", help="Grafana dashboards: generate, push, draw.")
    sub = parser.add_subparsers(dest="action", required=True)
    gen = sub.add_parser(
        "generate", help="Write the dashboard JSON, chart schema and chart README from code."
    )
    gen.add_argument("--root", type=existing_dir, default=".", help="Repository root.")
    gen.add_argument("--check", action="store_true", help="Only check; exit 1 if stale.")
    gen.set_defaults(func=_generate)
    prov = sub.add_parser("provision", help="Push the dashboards to Grafana's HTTP API.")
    prov.add_argument("--url", required=True, help="Grafana base URL.")
    prov.add_argument(
        "--user",
        help="Basic-auth user; the password is read from the variable --password-env names."
        " Without it, the token of --token-env is sent if that variable is set.",
    )
    prov.add_argument(
        "--password-env",
        default=PASSWORD_ENV,
        metavar="VAR",
        help="Environment variable holding --user's password.",
    )
    prov.add_argument(
        "--token-env",
        default=TOKEN_ENV,
        metavar="VAR",
        help="Environment variable holding a Grafana API token (service account).",
    )
    for flag, var in (("--password", "--password-env"), ("--token", "--token-env")):
        prov.add_argument(
            flag,
            action=_Refused,
            help=f"Refused: a secret on argv is visible to every user of the host; set the"
            f" variable {var} names.",
        )
    prov.set_defaults(func=_provision)
    ren = sub.add_parser("render", help="Draw every panel from Prometheus to PNG.")
    ren.add_argument("--prometheus", default="http://127.0.0.1:9090", help="Prometheus URL.")
    ren.add_argument("--minutes", type=float, default=10.0, help="Window ending at --end.")
    ren.add_argument("--end", type=float, help="Window end, unix seconds (default: now).")
    ren.add_argument("--step-s", type=float, default=5.0, help="Query resolution.")
    ren.add_argument("--rate-interval", default="30s", help="Stands for $__rate_interval.")
    ren.add_argument("--out", type=output_file, default="dashboard.png", help="PNG to write.")
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


def credential_of(
    args: argparse.Namespace, environ: Mapping[str, str]
) -> str | tuple[str, str] | None:
    """``(user, password)`` with ``--user`` (the password from ``--password-env``), else
    the token of ``--token-env`` if set, else ``None`` (credentials in the URL, or none)."""
    if args.user is not None:
        password = environ.get(args.password_env)
        if not password:
            raise UsageError(f"--user {args.user}: set ${args.password_env} to the password")
        return args.user, password
    return environ.get(args.token_env) or None


def _provision(args: argparse.Namespace) -> int:
    from nightjar_ray.ops.grafana import build_dashboard
    from nightjar_ray.ops.provision import provision

    credential = credential_of(args, os.environ)
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
