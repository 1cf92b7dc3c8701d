"""A sandboxed run's token on the secrets routes it may not use (list, write, delete): refused
by the broker like an agent's token, as ``secret_denied``, and every refusal is in the audit log
("every request, refused ones included, leaves one line"). Run tokens live in the process that
issued them, so the API app is driven in that process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from iris_runtime.config import Settings
from iris_runtime.runtime import Runtime
from iris_runtime.secrets.run_tokens import RUN_TOKENS, RunGrant
from iris_runtime.web.app import create_api_app

SHARED = "s" * 32


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[FlaskClient, Path]]:
    settings = Settings.from_env({"IRIS_DATA_DIR": str(tmp_path), "IRIS_API_TOKEN": SHARED})
    runtime = Runtime.build(settings)
    try:
        client = create_api_app(runtime).test_client()
        auth = {"Authorization": f"Bearer {SHARED}"}
        assert (
            client.put("/secrets/A_KEY", json={"value": "a-value"}, headers=auth).status_code == 200
        )
        yield client, tmp_path / "audit" / "secrets.jsonl"
    finally:
        runtime.stop()


@pytest.fixture
def grant() -> Iterator[RunGrant]:
    issued = RUN_TOKENS.issue(["A_KEY"], 60)
    yield issued
    RUN_TOKENS.revoke(issued)


@pytest.mark.parametrize(
    ("method", "path", "action", "name"),
    [
        ("GET", "/secrets", "list", "*"),
        ("PUT", "/secrets/A_KEY", "write", "A_KEY"),
        ("DELETE", "/secrets/A_KEY", "delete", "A_KEY"),
    ],
)
def test_a_run_token_is_refused_by_the_broker_and_audited(
    app: tuple[FlaskClient, Path], grant: RunGrant, method: str, path: str, action: str, name: str
) -> None:
    client, audit = app
    reply = client.open(
        path,
        method=method,
        json={"value": "x"} if method == "PUT" else None,
        headers={"Authorization": f"Bearer {grant.token}"},
    )
    assert reply.status_code == 403
    assert reply.get_json()["code"] == "secret_denied"
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    refused = [r for r in lines if r["caller"] == grant.caller]
    assert [(r["action"], r["name"], r["decision"]) for r in refused] == [(action, name, "denied")]


def test_a_run_token_still_reads_its_grant(app: tuple[FlaskClient, Path], grant: RunGrant) -> None:
    client, _ = app
    reply = client.get("/secrets/A_KEY", headers={"Authorization": f"Bearer {grant.token}"})
    assert reply.status_code == 200 and reply.get_json()["value"] == "a-value"
