"""A known path with the wrong method is ``405`` with ``Allow`` (RFC 9110 §15.5.6) and a JSON
error, on the API port (the Web UI port has the same test in its plugin's suite)."""

from __future__ import annotations

import re

import pytest

from iris_runtime.config import Settings
from iris_runtime.runtime import Runtime
from iris_runtime.testing.server import HttpReply, IrisServer
from iris_runtime.web.app import create_api_app

FLASK_PARAM = re.compile(r"<(?:[^:<>]+:)?[^<>]+>")
PROBES = ("GET", "POST", "PUT", "DELETE", "PATCH")


def allow(reply: HttpReply) -> set[str]:
    raw = next((v for k, v in reply.headers.items() if k.lower() == "allow"), None)
    assert raw is not None, f"405 without Allow: {reply.headers}"
    return {method.strip() for method in raw.split(",") if method.strip()}


def assert_405(reply: HttpReply, methods: set[str]) -> None:
    assert reply.status == 405, reply.body
    assert reply.json()["code"] == "method_not_allowed"
    assert allow(reply) == methods


def test_wrong_method_on_a_session_route_lists_post(shared_iris_server: IrisServer) -> None:
    reply = shared_iris_server.request("DELETE", "/sessions/x/message", auth=False)
    assert_405(reply, {"POST", "OPTIONS"})


def test_wrong_method_on_a_secret_lists_its_three_methods(shared_iris_server: IrisServer) -> None:
    reply = shared_iris_server.request("PATCH", "/secrets/NAME", json_body={"value": "v"})
    assert_405(reply, {"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


@pytest.fixture(scope="module")
def accepted_methods(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Every served path (parameters filled with ``x``) and the methods the app's router accepts
    for it (``/events/x/fire`` is also ``DELETE /events/<path:name>``, so rules alone are not
    enough)."""
    data_dir = tmp_path_factory.mktemp("routes")
    settings = Settings.from_env({"IRIS_DATA_DIR": str(data_dir), "IRIS_API_TOKEN": "t" * 32})
    runtime = Runtime.build(settings)
    try:
        routes = create_api_app(runtime).url_map
        router = routes.bind("127.0.0.1")
        paths = {FLASK_PARAM.sub("x", rule.rule) for rule in routes.iter_rules()}
        return {path: set(router.allowed_methods(path)) for path in paths}
    finally:
        runtime.stop()


def test_every_route_answers_a_wrong_method_with_its_allow(
    shared_iris_server: IrisServer, accepted_methods: dict[str, set[str]]
) -> None:
    for path, methods in accepted_methods.items():
        wrong = next(m for m in PROBES if m not in methods)
        reply = shared_iris_server.request(wrong, path)
        assert_405(reply, methods)


def test_an_events_fire_path_does_not_also_route_to_delete(shared_iris_server: IrisServer) -> None:
    """``/events/x/fire`` is the fire route only: ``DELETE /events/<name>`` takes no name that
    ends in ``/fire``, so Allow does not advertise a DELETE that could never succeed."""
    options = shared_iris_server.request("OPTIONS", "/events/x/fire")
    assert options.status == 200 and allow(options) == {"POST", "OPTIONS"}
    assert_405(shared_iris_server.request("DELETE", "/events/x/fire"), {"POST", "OPTIONS"})
