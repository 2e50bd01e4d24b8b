"""The OpenAI endpoint's optional API key: ``$NIGHTJAR_API_KEY`` on the ingress replica.

With the variable set, every HTTP request to the app must carry
``Authorization: Bearer <key>`` (what OpenAI clients and ``vllm serve --api-key``
send); any other request gets 401 with an OpenAI-style error body before the app
routes it, so it reaches no model replica. ``/v1/models`` is guarded like the rest.
CORS preflights (``OPTIONS``) pass, as in vLLM. Serve's own ``/-/healthz`` and
``/-/routes`` are answered by Serve's proxy and Ray's metrics port is a separate
server: neither ever reaches this check. Without the variable (or with it empty) the
app takes requests without credentials.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Mapping
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketClose

API_KEY_ENV = "NIGHTJAR_API_KEY"
"""Environment variable holding the key (the load generator's client sends the same)."""

AUTH_ERROR_TYPE = "AuthenticationError"
"""``error.type`` of a rejection: the OpenAI client's name for a 401, as vLLM names its
other errors after the client's exception classes (``BadRequestError``, ...)."""

logger = logging.getLogger(f"ray.serve.{__name__}")
"""Under Serve's logger, as Ray Serve LLM's own: the line lands in the replica's log."""


def api_key_from_env(environ: Mapping[str, str]) -> str | None:
    """The key in ``environ`` (``None`` when unset or empty). ``ValueError`` naming
    ``NIGHTJAR_API_KEY`` when it holds anything but visible ASCII characters (a header
    value cannot carry them; a pasted newline would make the key unusable)."""
    key = environ.get(API_KEY_ENV, "")
    if not key:
        return None
    if not all("!" <= c <= "~" for c in key):
        raise ValueError(
            f"{API_KEY_ENV}: the API key must be visible ASCII characters without spaces "
            "(check for a trailing newline)"
        )
    return key


def _digest(value: str) -> bytes:
    """SHA-256 of ``value``: digests of equal length, so the comparison leaks no length."""
    return hashlib.sha256(value.encode("latin-1", errors="replace")).digest()


def bearer_token(headers: Headers) -> str | None:
    """The token of ``Authorization: Bearer <token>`` (scheme case-insensitive)."""
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def rejection(message: str) -> JSONResponse:
    """The 401 an unauthenticated request gets (OpenAI's error shape, vLLM's fields)."""
    body = {"error": {"message": message, "type": AUTH_ERROR_TYPE, "param": None, "code": 401}}
    return JSONResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})


class ApiKeyMiddleware:
    """Pure ASGI middleware: an HTTP or WebSocket request whose bearer token is not the
    key never reaches ``app``; HTTP gets :func:`rejection`, WebSocket a policy-violation
    close. Keys are compared in constant time; the middleware keeps only their digest."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._key_digest = _digest(api_key)

    def check(self, headers: Headers) -> str | None:
        """Why ``headers`` are refused (the 401's message), or ``None`` when they pass."""
        token = bearer_token(headers)
        if token is None:
            return "Missing API key: send it as 'Authorization: Bearer <key>'"
        if not hmac.compare_digest(_digest(token), self._key_digest):
            return "Invalid API key"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("method") == "OPTIONS":
            await self.app(scope, receive, send)  # lifespan, CORS preflight
            return
        refused = self.check(Headers(scope=scope))
        if refused is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await WebSocketClose(code=1008, reason=refused)(scope, receive, send)
        else:
            await rejection(refused)(scope, receive, send)


def require_api_key(app: Any, environ: Mapping[str, str], required: bool) -> bool:
    """Put :class:`ApiKeyMiddleware` on the Starlette/FastAPI ``app`` (before it starts)
    when ``environ`` holds a key; log whether the endpoint requires one. Returns whether
    it does. ``required``: the app was built where the key was set; a replica that lacks
    it then refuses to start (``RuntimeError``) instead of serving without one."""
    key = api_key_from_env(environ)
    if key is None and required:
        raise RuntimeError(
            f"{API_KEY_ENV} was set where the app was built but is not set in this "
            "replica's environment: set it on every node (every Ray pod) that runs the app"
        )
    if key is None:
        logger.info(
            "nightjar: %s is not set: the endpoint takes requests without a key", API_KEY_ENV
        )
        return False
    app.add_middleware(ApiKeyMiddleware, api_key=key)
    logger.info("nightjar: the endpoint requires an API key (%s is set)", API_KEY_ENV)
    return True


def key_required(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` asks for a key (validates it: see :func:`api_key_from_env`)."""
    return api_key_from_env(environ) is not None
