"""``NightjarIngress``: Ray Serve LLM's ``OpenAiIngress`` with the optional API key.

``build_openai_app`` takes the ingress class from ``ingress_cls_config`` (Ray Serve LLM's
hook for a custom ingress) and wraps it in ``make_fastapi_ingress``, which builds the
FastAPI app with Ray's own middleware. On the replica, Serve then calls the class's
``__serve_build_asgi_app__`` (Serve's hook for the app an ingress serves) after the
constructor and before the app starts: there the key check (``auth.py``) goes on that
same app, outermost, so a refused request is answered before any route, body parsing
or model replica.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ray.serve.llm.ingress import OpenAiIngress

from nightjar_ray.serve.auth import key_required, require_api_key

INGRESS_CLS_CONFIG = "ingress_cls_config"


class NightjarIngress(OpenAiIngress):
    """The OpenAI ingress; requires ``$NIGHTJAR_API_KEY`` as a bearer token when set.
    Subclass it (``ingress_cls_config.ingress_cls``) to customise the ingress."""

    app: Any
    """The ASGI app Serve's ingress wrapper serves (set before the hook below runs)."""

    def __init__(self, *args: Any, require_api_key: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._require_api_key = require_api_key

    def __serve_build_asgi_app__(self) -> Any:
        """The FastAPI app, with the key check when this replica's environment has one."""
        require_api_key(self.app, os.environ, self._require_api_key)
        return self.app


def _loaded(ingress_cls: Any) -> Any:
    """``ingress_cls`` as Ray Serve LLM reads it: a class, or ``module:Class`` /
    ``module.Class``."""
    from ray.llm._internal.common.utils.import_utils import load_class

    return load_class(ingress_cls) if isinstance(ingress_cls, str) else ingress_cls


def with_nightjar_ingress(ingress: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """The app's ingress fields (``build_openai_app``'s ``ingress_deployment_config`` and
    ``ingress_cls_config``) with :class:`NightjarIngress`, told to refuse to start without
    a key when ``environ`` (where the app is built) holds one. A user's ``ingress_cls``
    must subclass it (``ValueError`` naming the field otherwise); a user's
    ``ingress_extra_kwargs`` are kept."""
    out = dict(ingress)
    cls_config = dict(out.get(INGRESS_CLS_CONFIG) or {})
    ingress_cls = _loaded(cls_config.get("ingress_cls", NightjarIngress))
    if not (isinstance(ingress_cls, type) and issubclass(ingress_cls, NightjarIngress)):
        raise ValueError(
            f"invalid config: {INGRESS_CLS_CONFIG}.ingress_cls: {ingress_cls!r} does not "
            "subclass nightjar_ray.serve.ingress.NightjarIngress (the ingress that checks "
            "the API key); subclass it to customise the ingress"
        )
    extra = dict(cls_config.get("ingress_extra_kwargs") or {})
    extra["require_api_key"] = key_required(environ)
    out[INGRESS_CLS_CONFIG] = {"ingress_cls": ingress_cls, "ingress_extra_kwargs": extra}
    return out
