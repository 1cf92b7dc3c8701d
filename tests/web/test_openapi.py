"""docs/openapi.yaml describes the internal API the code actually serves.

The document must parse, list exactly the routes the Flask app serves, require the bearer token
everywhere but ``GET /health``, document its errors with the shared ``Error`` schema, and the
bodies a real server returns must validate against the schemas it documents.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from iris_runtime import data_layout
from iris_runtime.config import Settings
from iris_runtime.engine import channels
from iris_runtime.runtime import Runtime
from iris_runtime.testing.server import HttpReply, IrisServer
from iris_runtime.web.app import create_api_app

SPEC_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
FLASK_PARAM = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    loaded = yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, item[method])
        for path, item in spec["paths"].items()
        for method in HTTP_METHODS
        if method in item
    ]


def resolve(spec: dict[str, Any], node: Any) -> Any:
    """Follow local ``$ref``s (``#/a/b``) until a node without one."""
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), f"only local refs are used: {ref}"
        node = spec
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


# -- a tiny JSON Schema checker (the subset the document uses) -----------------------------------

ANNOTATIONS = frozenset(
    {"description", "title", "example", "examples", "default", "format", "contentMediaType"}
)
TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _is_type(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in {"integer", "number"}:
        return False
    return isinstance(value, TYPES[name])


def schema_errors(spec: dict[str, Any], schema: Any, value: Any, where: str = "$") -> list[str]:
    schema = resolve(spec, schema)
    errors: list[str] = []
    for keyword in schema:
        if keyword in ANNOTATIONS:
            continue
        rule = schema[keyword]
        if keyword == "type":
            names = rule if isinstance(rule, list) else [rule]
            if not any(_is_type(value, n) for n in names):
                errors.append(f"{where}: {value!r} is not of type {rule}")
        elif keyword == "enum":
            if not any(value == v and type(value) is type(v) for v in rule):
                errors.append(f"{where}: {value!r} not in {rule}")
        elif keyword == "const":
            if value != rule:
                errors.append(f"{where}: {value!r} != {rule!r}")
        elif keyword == "required":
            if isinstance(value, dict):
                errors += [f"{where}: missing {k!r}" for k in rule if k not in value]
        elif keyword == "properties":
            if isinstance(value, dict):
                for key, sub in rule.items():
                    if key in value:
                        errors += schema_errors(spec, sub, value[key], f"{where}.{key}")
        elif keyword == "additionalProperties":
            if isinstance(value, dict):
                extra = [k for k in value if k not in schema.get("properties", {})]
                if rule is False:
                    errors += [f"{where}: unexpected property {k!r}" for k in extra]
                elif isinstance(rule, dict):
                    for key in extra:
                        errors += schema_errors(spec, rule, value[key], f"{where}.{key}")
        elif keyword == "minProperties":
            if isinstance(value, dict) and len(value) < rule:
                errors.append(f"{where}: fewer than {rule} properties")
        elif keyword == "items":
            if isinstance(value, list):
                for index, item in enumerate(value):
                    errors += schema_errors(spec, rule, item, f"{where}[{index}]")
        elif keyword in {"oneOf", "anyOf"}:
            matches = sum(not schema_errors(spec, sub, value, where) for sub in rule)
            if matches == 0 or (keyword == "oneOf" and matches > 1):
                errors.append(f"{where}: {value!r} matches {matches} of the {keyword} schemas")
        elif keyword == "not":
            if not schema_errors(spec, rule, value, where):
                errors.append(f"{where}: {value!r} matches a forbidden schema")
        elif keyword == "pattern":
            if isinstance(value, str) and not re.search(rule, value):
                errors.append(f"{where}: {value!r} does not match {rule}")
        elif keyword == "minLength":
            if isinstance(value, str) and len(value) < rule:
                errors.append(f"{where}: shorter than {rule}")
        elif keyword == "maxLength":
            if isinstance(value, str) and len(value) > rule:
                errors.append(f"{where}: longer than {rule}")
        elif keyword == "minimum":
            if _is_type(value, "number") and value < rule:
                errors.append(f"{where}: {value!r} < {rule}")
        else:
            raise AssertionError(f"the checker does not support {keyword!r} (at {where})")
    return errors


def test_checker_rejects_what_it_should(spec: dict[str, Any]) -> None:
    error = {"$ref": "#/components/schemas/Error"}
    assert schema_errors(spec, error, {"error": "x", "code": "y"}) == []
    assert schema_errors(spec, error, {"error": "x"})
    assert schema_errors(spec, error, {"error": "x", "code": "y", "extra": 1})
    assert schema_errors(spec, error, {"error": 1, "code": "y"})
    assert schema_errors(spec, error, ["error", "code"])
    assert schema_errors(spec, {"type": "integer"}, True)
    assert schema_errors(spec, {"enum": [1, 2]}, 3)


# -- the document itself ------------------------------------------------------------------------


def test_document_parses_as_openapi_31(spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.1.")
    assert spec["info"]["title"] and spec["info"]["version"]
    assert spec["paths"]
    assert spec["components"]["schemas"]["Error"]


def test_every_ref_resolves(spec: dict[str, Any]) -> None:
    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "$ref" in node:
                resolve(spec, node)  # KeyError if dangling
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(spec)


def test_error_schema_is_error_and_code(spec: dict[str, Any]) -> None:
    error = spec["components"]["schemas"]["Error"]
    assert error["type"] == "object"
    assert set(error["required"]) == {"error", "code"}
    assert {k: v["type"] for k, v in error["properties"].items()} == {
        "error": "string",
        "code": "string",
    }


def test_path_parameter_patterns_follow_the_code(spec: dict[str, Any]) -> None:
    params = spec["components"]["parameters"]
    session = params["SessionId"]["schema"]
    assert session["pattern"] == f"^{channels._SAFE_TOKEN.pattern}$"
    assert session["not"] == {"pattern": r"\.\."}
    channel = params["ChannelId"]["schema"]
    assert channel["pattern"] == f"^{channels._CHANNEL_ID.pattern}$"
    forbidden = channel["not"]["anyOf"]
    assert {"pattern": r"\.\."} in forbidden
    reserved = next(f["pattern"] for f in forbidden if f["pattern"] != r"\.\.")
    # Every top-level name of the data dir, refused in any case (the schema spells the case out).
    for name in data_layout.TOP_LEVEL:
        for spelled in (name, name.upper(), name.lower()):
            assert re.fullmatch(reserved, spelled), spelled
            assert schema_errors(spec, channel, spelled), spelled
    assert not re.fullmatch(reserved, "agents2") and not re.fullmatch(reserved, "xevents")
    for good in ("a", "abc-1.2_3", "A" * 128):
        assert not schema_errors(spec, session, good)
        channels.validate_session_id(good)
    for bad in ("", "-a", "a..b", "a/b", "a b", "A" * 129):
        assert schema_errors(spec, session, bad)
    for good in ("C123.456", "tg--100123", "SESSION-x", "a@b+c"):
        assert not schema_errors(spec, channel, good)
    for bad in ("events", "state.db", "a..b", ".x", "a/b"):
        assert schema_errors(spec, channel, bad)


@pytest.fixture
def served_routes(tmp_path: Path) -> set[tuple[str, str]]:
    settings = Settings.from_env({"IRIS_DATA_DIR": str(tmp_path), "IRIS_API_TOKEN": "t" * 32})
    runtime = Runtime.build(settings)
    try:
        app = create_api_app(runtime)
        routes = set()
        # No exemption for Flask's static route: the API must serve no files at all.
        for rule in app.url_map.iter_rules():
            path = FLASK_PARAM.sub(r"{\1}", rule.rule)
            routes |= {(m, path) for m in rule.methods or () if m not in {"HEAD", "OPTIONS"}}
        return routes
    finally:
        runtime.stop()


def test_documented_operations_are_exactly_the_served_routes(
    spec: dict[str, Any], served_routes: set[tuple[str, str]]
) -> None:
    documented = {(method, path) for method, path, _ in operations(spec)}
    assert documented == served_routes, (
        f"undocumented: {sorted(served_routes - documented)}; "
        f"not served: {sorted(documented - served_routes)}"
    )


def test_path_parameters_are_declared(spec: dict[str, Any]) -> None:
    for method, path, op in operations(spec):
        declared = {
            resolve(spec, p)["name"]
            for p in [*spec["paths"][path].get("parameters", []), *op.get("parameters", [])]
            if resolve(spec, p)["in"] == "path"
        }
        assert declared == set(re.findall(r"{([^}]+)}", path)), (method, path)


def test_bearer_token_required_everywhere_but_health(spec: dict[str, Any]) -> None:
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {**schemes["bearerAuth"], "type": "http", "scheme": "bearer"}
    for method, path, op in operations(spec):
        security = op.get("security", spec.get("security", []))
        if (method, path) == ("GET", "/health"):
            assert security == [], "GET /health must not require a token"
        else:
            assert {"bearerAuth": []} in security, f"{method} {path} must require the token"
            assert "401" in op["responses"], f"{method} {path} must document 401"


def _error_schema_refs(spec: dict[str, Any], response: dict[str, Any]) -> bool:
    schema = response.get("content", {}).get("application/json", {}).get("schema", {})
    candidates = [schema, *schema.get("oneOf", []), *schema.get("anyOf", [])]
    return any(c.get("$ref") == "#/components/schemas/Error" for c in candidates)


def test_every_operation_documents_errors_with_the_error_schema(spec: dict[str, Any]) -> None:
    for method, path, op in operations(spec):
        errors = {
            code: resolve(spec, response)
            for code, response in op["responses"].items()
            if int(code) >= 400
        }
        assert any(_error_schema_refs(spec, r) for r in errors.values()), f"{method} {path}"
        for code, response in errors.items():
            assert "application/json" in response.get("content", {}), (method, path, code)


def test_request_bodies_are_closed_objects(spec: dict[str, Any]) -> None:
    for method, path, op in operations(spec):
        body = op.get("requestBody")
        if body is None:
            continue
        for media, content in body["content"].items():
            schema = resolve(spec, content["schema"])
            if media == "application/json":
                assert schema["type"] == "object", (method, path)
                assert schema["additionalProperties"] is False, (method, path)
            else:
                assert media == "application/octet-stream", (method, path)


def test_documented_statuses(spec: dict[str, Any]) -> None:
    def statuses(method: str, path: str) -> set[str]:
        return set(spec["paths"][path][method]["responses"])

    message = statuses("post", "/sessions/{session_id}/message")
    assert {"200", "400", "401", "413", "429", "502", "503"} <= message
    assert {"201", "400", "401", "413"} <= statuses("post", "/sessions/{session_id}/attachments")
    assert {"200", "400", "401", "429"} <= statuses("get", "/sessions/{session_id}/stream")
    assert {"202", "400", "401", "413", "429"} <= statuses("post", "/channels/{channel_id}/events")
    upload = spec["paths"]["/sessions/{session_id}/attachments"]["post"]
    header = next(p for p in upload["parameters"] if p["name"] == "X-Filename")
    assert header["in"] == "header" and header["required"] is True
    stream = spec["paths"]["/sessions/{session_id}/stream"]["get"]["responses"]["200"]
    assert "text/event-stream" in stream["content"]
    assert set(stream["x-sse-events"]) == {
        "thinking",
        "status",
        "tool",
        "final",
        "file",
        "subagent",
    }


# -- a real server's answers --------------------------------------------------------------------


def _header(reply: HttpReply, name: str) -> str:
    return next((v for k, v in reply.headers.items() if k.lower() == name.lower()), "")


def assert_documented(
    spec: dict[str, Any], method: str, path: str, reply: HttpReply, expected: int
) -> Any:
    assert reply.status == expected, reply.body
    responses = spec["paths"][path][method.lower()]["responses"]
    assert str(reply.status) in responses, f"{method} {path} answered undocumented {reply.status}"
    response = resolve(spec, responses[str(reply.status)])
    assert _header(reply, "Content-Type").startswith("application/json")
    body = reply.json()
    errors = schema_errors(spec, response["content"]["application/json"]["schema"], body)
    assert not errors, f"{method} {path} {reply.status}: {errors}"
    return body


@pytest.mark.slow
def test_live_responses_match_the_documented_schemas(
    spec: dict[str, Any], iris_server: IrisServer
) -> None:
    health = iris_server.get("/health", auth=False)
    assert assert_documented(spec, "GET", "/health", health, 200)["status"] == "ok"

    message_path = "/sessions/{session_id}/message"
    reply = iris_server.post("/sessions/doc-1/message", json_body={"text": "hi"})
    assert assert_documented(spec, "POST", message_path, reply, 200)["status"] == "done"

    history = iris_server.get("/sessions/doc-1/history")
    body = assert_documented(spec, "GET", "/sessions/{session_id}/history", history, 200)
    assert [e["role"] for e in body["entries"]] == ["user", "assistant"]
    everything = iris_server.get("/sessions/doc-1/history?all=1")
    assert_documented(spec, "GET", "/sessions/{session_id}/history", everything, 200)

    upload = iris_server.post(
        "/sessions/doc-1/attachments", body=b"hello", headers={"X-Filename": "note.txt"}
    )
    staged = assert_documented(spec, "POST", "/sessions/{session_id}/attachments", upload, 201)
    assert staged["bytes"] == 5

    stop = iris_server.post("/sessions/doc-1/stop")
    assert assert_documented(spec, "POST", "/sessions/{session_id}/stop", stop, 200) == {
        "stopped": False
    }

    unauthorized = iris_server.post("/sessions/doc-1/message", json_body={"text": "hi"}, auth=False)
    assert (
        assert_documented(spec, "POST", message_path, unauthorized, 401)["code"] == "unauthorized"
    )
    assert _header(unauthorized, "WWW-Authenticate").startswith("Bearer")

    malformed = iris_server.post(
        "/sessions/doc-1/message", body=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert assert_documented(spec, "POST", message_path, malformed, 400)["code"] == "malformed_json"

    unknown = iris_server.post("/sessions/doc-1/message", json_body={"text": "hi", "x": 1})
    assert assert_documented(spec, "POST", message_path, unknown, 400)["code"] == "unknown_fields"

    bad_id = iris_server.get("/sessions/a..b/history")
    code = assert_documented(spec, "GET", "/sessions/{session_id}/history", bad_id, 400)["code"]
    assert code == "invalid_session_id"

    no_name = iris_server.post("/sessions/doc-1/attachments", body=b"x")
    upload_path = "/sessions/{session_id}/attachments"
    assert assert_documented(spec, "POST", upload_path, no_name, 400)["code"] == "missing_filename"


@pytest.mark.slow
def test_live_stream_events_match_the_documented_schemas(
    spec: dict[str, Any], iris_server: IrisServer
) -> None:
    documented = spec["paths"]["/sessions/{session_id}/stream"]["get"]["responses"]["200"]
    event_schemas = documented["x-sse-events"]
    conn = http.client.HTTPConnection("127.0.0.1", iris_server.port, timeout=30)
    try:
        conn.request(
            "GET",
            "/sessions/doc-2/stream",
            headers={"Authorization": f"Bearer {iris_server.token}"},
        )
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        assert response.readline() == b": connected\n"

        sender = threading.Thread(
            target=iris_server.post,
            args=("/sessions/doc-2/message",),
            kwargs={"json_body": {"text": "hi"}},
        )
        sender.start()
        seen: list[str] = []
        name, data = None, None
        while "final" not in seen:
            line = response.readline().decode("utf-8")
            assert line, "the stream ended before the final event"
            if line.startswith("event: "):
                name = line[len("event: ") :].strip()
            elif line.startswith("data: "):
                data = json.loads(line[len("data: ") :])
            elif line == "\n" and name is not None:
                assert name in event_schemas, f"undocumented event {name!r}"
                assert data is not None and data["type"] == name
                assert not schema_errors(spec, event_schemas[name], data), (name, data)
                seen.append(name)
                name, data = None, None
            else:
                assert line.startswith(":") or line == "\n", line
        sender.join(timeout=30)
    finally:
        conn.close()
