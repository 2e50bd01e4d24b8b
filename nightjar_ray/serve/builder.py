"""``build_app``: the Serve ``import_path`` of a Nightjar deployment.

``serve run deploy/cpu-demo.yaml`` (or ``serve deploy``) calls it with the
application's ``args``; it validates everything first (``config.py``), then
builds Ray Serve LLM's OpenAI app around :class:`NightjarLLMServer`, one deployment
(and one policy actor) per model, with :class:`NightjarIngress` as its ingress (the
optional API key, ``auth.py``). A bad config raises before any deployment, replica or
actor exists.
"""

from __future__ import annotations

import os
from typing import Any

from nightjar_ray.serve.config import parse_app_config


def build_app(args: dict[str, Any]) -> Any:
    """OpenAI-compatible Serve application: one Nightjar deployment per model."""
    from ray.serve.llm import build_openai_app

    from nightjar_ray.serve.ingress import with_nightjar_ingress

    app_config = parse_app_config(args)
    llm_configs = [model.llm_config for model in app_config.models]
    ingress = with_nightjar_ingress(app_config.ingress, os.environ)
    return build_openai_app({"llm_configs": llm_configs, **ingress})
