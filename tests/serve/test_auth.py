"""The optional API key (``serve/auth.py``) without a Ray cluster: the middleware on a
recording app, and the real ingress class Ray Serve LLM builds, set up as Serve's
replica does (constructor, then ``__serve_build_asgi_app__``). The deployed app's
check is in ``test_serve_app.py``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.types import Receive, Scope, Send

from nightjar_ray.loadgen.client import API_KEY_ENV as CLIENT_API_KEY_ENV
from nightjar_ray.loadgen.client import request_headers
from nightjar_ray.serve.auth import (
    API_KEY_ENV,
    ApiKeyMiddleware,
    api_key_from_env,
    require_api_key,
)

KEY = "sk-test-0123456789"


class Recorder:
    """A downstream ASGI app that answers 200 and records the paths it was asked for."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.paths.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"served"})


def test_server_and_client_read_the_same_variable() -> None:
    assert API_KEY_ENV == CLIENT_API_KEY_ENV == "NIGHTJAR_API_KEY"


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "Missing API key"),
        ({"Authorization": KEY}, "Missing API key"),  # no scheme
        ({"Authorization": f"Basic {KEY}"}, "Missing API key"),
        ({"Authorization": "Bearer "}, "Missing API key"),
        ({"Authorization": "Bearer sk-test-012345678"}, "Invalid API key"),  # a prefix
        ({"Authorization": f"Bearer {KEY}x"}, "Invalid API key"),
        ({"Authorization": f"Bearer {KEY.upper()}"}, "Invalid API key"),
    ],
)
def test_a_request_without_the_key_gets_an_openai_style_401_and_reaches_nothing(
    headers: dict[str, str], message: str
) -> None:
    downstream = Recorder()
    client = TestClient(ApiKeyMiddleware(downstream, api_key=KEY))
    for method, path in [("GET", "/v1/models"), ("POST", "/v1/completions"), ("GET", "/")]:
        resp = client.request(method, path, headers=headers, json={"prompt": "x"})
        assert resp.status_code == 401, (method, path)
        assert resp.headers["WWW-Authenticate"] == "Bearer"
        error = resp.json()["error"]
        assert error["code"] == 401 and error["type"] == "AuthenticationError"
        assert error["message"].startswith(message) and error["param"] is None
        assert KEY not in resp.text
    assert downstream.paths == []


@pytest.mark.parametrize("authorization", [f"Bearer {KEY}", f"bearer {KEY}", f"Bearer  {KEY} "])
def test_the_key_as_a_bearer_token_is_served(authorization: str) -> None:
    downstream = Recorder()
    client = TestClient(ApiKeyMiddleware(downstream, api_key=KEY))
    resp = client.get("/v1/models", headers={"Authorization": authorization})
    assert resp.status_code == 200 and resp.text == "served"
    assert downstream.paths == ["/v1/models"]


def test_the_load_generators_headers_pass_and_a_cors_preflight_needs_no_key() -> None:
    downstream = Recorder()
    client = TestClient(ApiKeyMiddleware(downstream, api_key=KEY))
    headers = request_headers([], {CLIENT_API_KEY_ENV: KEY})
    assert client.post("/v1/completions", headers=headers, json={}).status_code == 200
    assert client.options("/v1/completions").status_code == 200
    assert downstream.paths == ["/v1/completions", "/v1/completions"]


def test_a_websocket_without_the_key_is_closed_before_the_app() -> None:
    from starlette.websockets import WebSocketDisconnect

    downstream = Recorder()
    client = TestClient(ApiKeyMiddleware(downstream, api_key=KEY))
    closed = None
    try:  # the reason is on the exception's attributes, not in its text
        with client.websocket_connect("/ws"):
            pass
    except WebSocketDisconnect as e:
        closed = e
    assert closed is not None and closed.code == 1008, closed
    assert closed.reason.startswith("Missing API key") and downstream.paths == []


def test_the_key_comes_from_the_environment_and_must_be_usable_in_a_header() -> None:
    assert api_key_from_env({}) is None
    assert api_key_from_env({API_KEY_ENV: ""}) is None
    assert api_key_from_env({API_KEY_ENV: KEY}) == KEY
    for bad in [f"{KEY}\n", "two words", "clé"]:
        with pytest.raises(ValueError, match=f"{API_KEY_ENV}: the API key must be visible"):
            api_key_from_env({API_KEY_ENV: bad})


def test_the_builder_asks_for_the_key_where_it_is_set_and_rejects_an_unusable_one() -> None:
    from nightjar_ray.serve.ingress import NightjarIngress, with_nightjar_ingress

    assert with_nightjar_ingress({}, {API_KEY_ENV: KEY}) == {
        "ingress_cls_config": {
            "ingress_cls": NightjarIngress,
            "ingress_extra_kwargs": {"require_api_key": True},
        }
    }
    off = with_nightjar_ingress({}, {})["ingress_cls_config"]["ingress_extra_kwargs"]
    assert off == {"require_api_key": False}
    with pytest.raises(ValueError, match=f"{API_KEY_ENV}: the API key must be visible"):
        with_nightjar_ingress({}, {API_KEY_ENV: "with space"})


class CustomIngress:
    """Not a NightjarIngress: an app with it would take requests without the key."""


def test_a_users_ingress_fields_are_kept_and_their_class_must_check_the_key() -> None:
    from nightjar_ray.serve.ingress import NightjarIngress, with_nightjar_ingress

    user = {
        "ingress_deployment_config": {"num_replicas": 2},
        "ingress_cls_config": {
            "ingress_cls": "nightjar_ray.serve.ingress:NightjarIngress",
            "ingress_extra_kwargs": {"custom_option": 1},
        },
    }
    assert with_nightjar_ingress(user, {API_KEY_ENV: KEY}) == {
        "ingress_deployment_config": {"num_replicas": 2},
        "ingress_cls_config": {
            "ingress_cls": NightjarIngress,
            "ingress_extra_kwargs": {"custom_option": 1, "require_api_key": True},
        },
    }
    other = {"ingress_cls_config": {"ingress_cls": CustomIngress}}
    with pytest.raises(ValueError, match=r"ingress_cls_config\.ingress_cls: .* does not subclass"):
        with_nightjar_ingress(other, {})


def _ingress_app(environ: dict[str, str], required: bool) -> Any:
    """Ray Serve LLM's ingress for ``NightjarIngress`` (as ``build_openai_app`` makes it),
    constructed and given its app as Serve's replica does, with ``environ`` as the
    replica's environment."""
    from ray.serve.llm.ingress import make_fastapi_ingress

    from nightjar_ray.serve.ingress import NightjarIngress

    wrapper = make_fastapi_ingress(NightjarIngress)
    ingress = wrapper.__new__(wrapper)
    asyncio.run(ingress.__init__(llm_deployments={}, model_cards={}, require_api_key=required))
    with pytest.MonkeyPatch.context() as mp:
        for name, value in environ.items():
            mp.setenv(name, value)
        if API_KEY_ENV not in environ:
            mp.delenv(API_KEY_ENV, raising=False)
        return ingress.__serve_build_asgi_app__()


def test_the_ingress_guards_every_openai_route_when_its_replica_has_the_key() -> None:
    app = _ingress_app({API_KEY_ENV: KEY}, required=True)
    paths = {route.path for route in app.routes}
    assert {"/v1/models", "/v1/completions", "/v1/chat/completions", "/tokenize"} <= paths
    client = TestClient(app)
    for path in sorted(paths):
        concrete = path.replace("{model:path}", "tiny")
        assert client.post(concrete, json={}).status_code == 401, path
        assert client.get(concrete).status_code == 401, path
    # with the key the request reaches the app's routing (an unknown path: its own 404)
    assert client.get("/nope", headers={"Authorization": f"Bearer {KEY}"}).status_code == 404


def test_without_the_key_the_ingress_takes_requests_as_before() -> None:
    client = TestClient(_ingress_app({}, required=False))
    assert client.get("/nope").status_code == 404
    assert client.get("/openapi.json").status_code == 200


def test_a_replica_without_the_key_the_app_was_built_with_refuses_to_start() -> None:
    with pytest.raises(RuntimeError, match=f"{API_KEY_ENV} was set where the app was built"):
        _ingress_app({}, required=True)


def test_require_api_key_says_whether_it_put_the_check_on(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from fastapi import FastAPI

    from nightjar_ray.serve.auth import logger

    logger.addHandler(caplog.handler)  # Serve's logger may not propagate to the root
    try:
        with caplog.at_level(logging.INFO, logger=logger.name):
            assert require_api_key(FastAPI(), {API_KEY_ENV: KEY}, required=False)
            assert not require_api_key(FastAPI(), {}, required=False)
    finally:
        logger.removeHandler(caplog.handler)
    messages = [r.getMessage() for r in caplog.records]
    assert any("requires an API key" in m for m in messages)
    assert any("without a key" in m for m in messages)
    assert all(KEY not in m for m in messages)
