"""The broker through its real entry point: ``GET/PUT/DELETE /secrets`` on a served Iris (file
backend), agents identified by their own tokens from ``agents.json``."""

from __future__ import annotations

import json
import secrets as random
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris

TOKEN_A = "agent-a-" + random.token_urlsafe(24)
TOKEN_B = "agent-b-" + random.token_urlsafe(24)
VALUES = {
    "A_KEY": "value-of-a-" + random.token_hex(8),
    "B_KEY": "value-of-b-" + random.token_hex(8),
    "SHARED.name-1": "value-shared-" + random.token_hex(8),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IrisServer]:
    data = tmp_path_factory.mktemp("broker") / "data"
    iris = IrisServer(data).start()
    registry = AgentRegistry(data / "agents.json")
    registry.register("alpha", "http://127.0.0.1:4001", ["A_KEY", "GONE"], TOKEN_A)
    registry.register("beta", "http://127.0.0.1:4002", ["B_KEY"], TOKEN_B)
    registry.register("gamma", "http://127.0.0.1:4003", [], "agent-g-" + random.token_hex(16))
    for name, value in VALUES.items():
        assert iris.request("PUT", f"/secrets/{name}", json_body={"value": value}).status == 200
    yield iris
    iris.stop()


def as_agent(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_an_agent_reads_its_own_secret(server: IrisServer) -> None:
    reply = server.get("/secrets/A_KEY", headers=as_agent(TOKEN_A))
    assert reply.status == 200
    assert reply.json() == {"name": "A_KEY", "value": VALUES["A_KEY"]}
    assert reply.headers["Cache-Control"] == "no-store"


def test_an_agent_cannot_read_another_agents_secret(server: IrisServer) -> None:
    reply = server.get("/secrets/B_KEY", headers=as_agent(TOKEN_A))
    assert reply.status == 403
    assert reply.json()["code"] == "secret_denied"
    assert VALUES["B_KEY"] not in reply.body.decode()
    assert reply.headers["Cache-Control"] == "no-store"


def test_an_empty_allow_list_grants_nothing(server: IrisServer) -> None:
    registry = AgentRegistry(server.data_dir / "agents.json")
    gamma = registry.get("gamma")
    assert gamma is not None and gamma.token is not None
    for name in VALUES:
        assert server.get(f"/secrets/{name}", headers=as_agent(gamma.token)).status == 403


def test_an_allowed_name_missing_from_the_store_is_404(server: IrisServer) -> None:
    reply = server.get("/secrets/GONE", headers=as_agent(TOKEN_A))
    assert reply.status == 404
    assert reply.json()["code"] == "secret_not_found"


def test_the_shared_token_reads_anything(server: IrisServer) -> None:
    for name, value in VALUES.items():
        assert server.get(f"/secrets/{name}").json()["value"] == value


def test_an_unknown_token_is_401(server: IrisServer) -> None:
    reply = server.get("/secrets/A_KEY", headers=as_agent("not-a-registered-token"))
    assert reply.status == 401
    assert reply.headers["Cache-Control"] == "no-store"
    assert server.get("/secrets/A_KEY", auth=False).status == 401


def test_an_agent_whose_token_is_not_registered_yet_is_401(server: IrisServer) -> None:
    registry = AgentRegistry(server.data_dir / "agents.json")
    late = "agent-late-" + random.token_urlsafe(16)
    registry.register("late", "http://127.0.0.1:4009", ["A_KEY"])  # no token yet
    assert server.get("/secrets/A_KEY", headers=as_agent(late)).status == 401
    registry.register("late", "http://127.0.0.1:4009", token=late)  # registered: works at once
    assert server.get("/secrets/A_KEY", headers=as_agent(late)).status == 200
    registry.unregister("late")  # and stops at once
    assert server.get("/secrets/A_KEY", headers=as_agent(late)).status == 401


@pytest.mark.parametrize(
    "claim",
    [
        {"X-Iris-Caller": "iris"},
        {"X-Agent-Name": "beta"},
        {"X-Forwarded-User": "iris", "X-Caller": "beta"},
    ],
)
def test_a_header_claiming_another_caller_is_ignored(
    server: IrisServer, claim: dict[str, str]
) -> None:
    reply = server.get("/secrets/B_KEY", headers={**as_agent(TOKEN_A), **claim})
    assert reply.status == 403
    audit = audit_lines(server)
    assert audit[-1]["caller"] == "alpha"


def test_a_query_or_body_cannot_change_the_caller(server: IrisServer) -> None:
    reply = server.request(
        "GET", "/secrets/B_KEY?caller=iris&agent=beta", headers=as_agent(TOKEN_A)
    )
    assert reply.status == 403


@pytest.mark.parametrize(
    "path", ["/secrets/..%2Fapi-token", "/secrets/a/b", "/secrets/%00x", "/secrets/" + "A" * 129]
)
def test_unsafe_names_are_400(server: IrisServer, path: str) -> None:
    reply = server.get(path)
    assert reply.status == 400, reply.body
    assert reply.json()["code"] == "invalid_secret_name"


def test_agents_cannot_manage_secrets(server: IrisServer) -> None:
    put = server.request(
        "PUT", "/secrets/A_KEY", json_body={"value": "hijacked"}, headers=as_agent(TOKEN_A)
    )
    assert put.status == 403
    assert server.request("DELETE", "/secrets/A_KEY", headers=as_agent(TOKEN_A)).status == 403
    assert server.get("/secrets", headers=as_agent(TOKEN_A)).status == 403
    assert server.get("/secrets/A_KEY").json()["value"] == VALUES["A_KEY"]


def test_iris_lists_puts_and_deletes(server: IrisServer) -> None:
    assert server.request("PUT", "/secrets/TEMP", json_body={"value": "t"}).status == 200
    names = server.get("/secrets").json()["names"]
    assert "TEMP" in names and set(VALUES) <= set(names)
    assert "value" not in server.get("/secrets").body.decode()
    assert server.request("DELETE", "/secrets/TEMP").status == 204
    assert server.get("/secrets/TEMP").status == 404
    assert server.request("DELETE", "/secrets/TEMP").status == 404


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "malformed_json"),
        (b'{"value": 5}', 400, "invalid_secret_value"),
        (b'{"value": "x", "ttl": 3}', 400, "unknown_fields"),
        (b"[]", 400, "malformed_json"),
        (json.dumps({"value": "x" * (64 * 1024 + 1)}).encode(), 400, "secret_too_large"),
        (json.dumps({"value": "x" * (7 * 64 * 1024)}).encode(), 413, "payload_too_large"),
    ],
)
def test_bad_put_bodies_are_refused_and_change_nothing(
    server: IrisServer, body: bytes, status: int, code: str
) -> None:
    reply = server.request(
        "PUT", "/secrets/A_KEY", body=body, headers={"Content-Type": "application/json"}
    )
    assert (reply.status, reply.json()["code"]) == (status, code)
    assert server.get("/secrets/A_KEY").json()["value"] == VALUES["A_KEY"]


def audit_lines(server: IrisServer) -> list[dict[str, str]]:
    path = server.data_dir / "audit" / "secrets.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_request_leaves_one_audit_line_without_the_value(server: IrisServer) -> None:
    before = len(audit_lines(server))
    server.get("/secrets/A_KEY", headers={**as_agent(TOKEN_A), "X-Request-Id": "req-allowed-1"})
    server.get("/secrets/B_KEY", headers={**as_agent(TOKEN_A), "X-Request-Id": "req-denied-1"})
    server.get("/secrets/GONE", headers={**as_agent(TOKEN_A), "X-Request-Id": "req-missing-1"})
    server.get("/secrets/A_KEY", headers={**as_agent("wrong"), "X-Request-Id": "req-unauth-1"})
    server.get("/secrets/a%2Fb", headers={"X-Request-Id": "req-invalid-1"})
    lines = audit_lines(server)[before:]
    assert [(e["caller"], e["name"], e["decision"], e["request_id"]) for e in lines] == [
        ("alpha", "A_KEY", "allowed", "req-allowed-1"),
        ("alpha", "B_KEY", "denied", "req-denied-1"),
        ("alpha", "GONE", "missing", "req-missing-1"),
        ("(unknown)", "A_KEY", "unauthenticated", "req-unauth-1"),
        ("iris", "a/b", "invalid", "req-invalid-1"),
    ]
    assert all(
        set(e) == {"time", "caller", "action", "name", "decision", "request_id"} for e in lines
    )
    text = (server.data_dir / "audit" / "secrets.jsonl").read_text()
    assert not any(value in text for value in VALUES.values())


def test_a_response_carries_its_request_id(server: IrisServer) -> None:
    reply = server.get("/secrets/A_KEY", headers={"X-Request-Id": "trace-42"})
    assert reply.headers["X-Request-Id"] == "trace-42"
    generated = server.get("/secrets/A_KEY", headers={"X-Request-Id": "bad/../id"})
    assert generated.headers["X-Request-Id"] not in ("", "bad/../id")


def test_store_files_are_private_and_encrypted(server: IrisServer) -> None:
    folder = server.data_dir / "secrets"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in (folder / "store.key", folder / "store.enc", server.data_dir / "agents.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    blob = (folder / "store.enc").read_bytes()
    assert not any(value.encode() in blob for value in VALUES.values())
    audit = server.data_dir / "audit" / "secrets.jsonl"
    assert stat.S_IMODE(audit.stat().st_mode) == 0o600


def test_the_file_backend_survives_a_restart(start_iris: Callable[..., IrisServer]) -> None:
    iris = start_iris()
    assert iris.request("PUT", "/secrets/KEEP", json_body={"value": "kept-value"}).status == 200
    iris.restart()
    assert iris.get("/secrets/KEEP").json()["value"] == "kept-value"


def test_a_damaged_store_is_a_clear_error_and_is_left_alone(
    start_iris: Callable[..., IrisServer],
) -> None:
    iris = start_iris()
    iris.request("PUT", "/secrets/KEEP", json_body={"value": "kept-value"})
    store = iris.data_dir / "secrets" / "store.enc"
    store.write_bytes(b"garbage")
    reply = iris.get("/secrets/KEEP")
    assert reply.status == 500 and "cannot be decrypted" in reply.json()["error"]
    assert iris.request("PUT", "/secrets/OTHER", json_body={"value": "v"}).status == 500
    assert store.read_bytes() == b"garbage"


def test_the_cli_manages_the_same_store(tmp_path: Path) -> None:
    env = clean_environment(IRIS_DATA_DIR=str(tmp_path / "data"))
    secret = "cli-value-" + random.token_hex(8)
    stored = subprocess.run(
        [sys.executable, "-m", "iris_runtime", "secrets", "set", "CLI_KEY"],
        input=secret + "\n",
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert stored.returncode == 0, stored.stderr
    assert secret not in stored.stdout + stored.stderr
    got = run_iris("secrets", "get", "CLI_KEY", env=env)
    assert got.stdout == secret + "\n"
    assert run_iris("secrets", "ls", "--json", env=env).stdout.strip() == '["CLI_KEY"]'
    missing = run_iris("secrets", "get", "NOPE", env=env)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert run_iris("secrets", "rm", "CLI_KEY", env=env).returncode == 0
    audit = run_iris("secrets", "audit", "--json", "--decision", "missing", env=env)
    assert [json.loads(line)["name"] for line in audit.stdout.splitlines()] == ["NOPE"]
    everything = run_iris("secrets", "audit", env=env).stdout
    assert secret not in everything and everything.count("\n") == 5
