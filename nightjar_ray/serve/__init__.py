"""Ray Serve app: replicas wrapping Nightjar vLLM engines, a policy actor, metrics.

Serve ``import_path``: ``nightjar_ray.serve:build_app`` (see ``builder.py`` and
docs/serve.md). Modules: ``config`` (the typed app config), ``builder``,
``server`` (the replica class), ``context`` (replica identity across the
engine-core process boundary), ``link`` (the engine-core thread that pools and
exports metrics), ``policy_pool`` and ``policy_actor`` (the central policy actor).

Importing this package does not import Ray; ``build_app`` does.
"""

from __future__ import annotations

from typing import Any


def build_app(args: dict[str, Any]) -> Any:
    """The Serve application for ``args`` (``nightjar_ray.serve.builder.build_app``)."""
    from nightjar_ray.serve.builder import build_app as build

    return build(args)


__all__ = ["build_app"]
