"""The bridge authenticates its caller: only the agent's own API token drives it or reads its
job logs, and Iris presents the right token for each agent she calls."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import requests

from iris_runtime.testing.server import IrisServer, clean_environment, run_iris
from iris_runtime.testing.subagent import NDJSON, SubAgent, register

StartSub = Callable[..., SubAgent]
StartIris = Callable[..., IrisServer]


def bad_headers(own: str, other: str) -> list[dict[str, str]]:
    """Everything that is not exactly ``Authorization: Bearer <own>``."""
    values = [
        f"Bearer {other}",  # another agent's token
        "Bearer ",
        "Bearer",
        f"Bearer {own}x",  # trailing junk
        f"Bearer {own} junk",
        f"Basic {own}",
        own,
    ]
    return [{}, *({"Authorization": value} for value in values)]


def assert_refused(response: requests.Response, what: object) -> None:
    assert response.status_code == 401, (what, response.status_code, response.text[:200])
    assert response.headers["WWW-Authenticate"].startswith("Bearer"), what
    assert response.headers["Content-Type"].startswith("application/json"), what
    assert response.json()["code"] == "unauthorized", what


def nothing_ran(agent: SubAgent, marker: Path) -> None:
    data = agent.server.data_dir
    assert not marker.exists(), "a refused request ran a tool"
    assert not list((data / "bridge-jobs").glob("*")), "a refused request left a job log"
    assert not list(data.glob("*/log.jsonl")), "a refused request was logged as a turn"


def test_one_agents_token_cannot_drive_another(start_subagent: StartSub, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    rule = {
        "when": "run it",
        "turns": [[{"tool": "bash", "args": {"command": f"touch {marker}"}}], [{"text": "ran"}]],
    }
    alpha = start_subagent("alpha", rules=[rule])
    beta = start_subagent("beta", rules=[rule])
    assert alpha.token != beta.token
    url = f"{beta.bridge_url}/bridge"
    for n, headers in enumerate(bad_headers(beta.token, alpha.token)):
        body = {"text": "run it", "requestId": f"r-bad-{n}"}
        for accept in ({"Accept": NDJSON}, {}):
            refused = requests.post(url, json=body, headers={**accept, **headers}, timeout=10)
            assert_refused(refused, (headers, accept))
        job = requests.get(f"{url}/jobs/r-bad-{n}", headers=headers, timeout=10)
        assert_refused(job, headers)
    nothing_ran(beta, marker)

    # The right token drives it; its job log still opens only to that token.
    final = beta.stream({"text": "run it", "requestId": "r-good"})[-1]
    assert final["type"] == "final" and final["text"] == "ran" and marker.exists()
    for headers in bad_headers(beta.token, alpha.token):
        assert_refused(requests.get(f"{url}/jobs/r-good", headers=headers, timeout=10), headers)
    # RFC 9110: the scheme is case-insensitive and one or more spaces may follow it.
    for value in (f"Bearer {beta.token}", f"bearer {beta.token}", f"BEARER  {beta.token}"):
        job = requests.get(f"{url}/jobs/r-good", headers={"Authorization": value}, timeout=10)
        assert job.status_code == 200 and job.json()["events"][-1]["text"] == "ran", value


def test_iris_presents_each_agent_its_own_token_or_her_api_token(
    start_subagent: StartSub, start_iris: StartIris
) -> None:
    iris = start_iris()
    own = start_subagent("own")  # its own token, registered with it
    shared = start_subagent("shared", token=iris.token)  # Iris's API token, none registered
    stranger = start_subagent("stranger")  # its own token, which Iris was never given
    register(iris, "own", own.bridge_url, token=own.token)
    register(iris, "shared", shared.bridge_url)
    register(iris, "stranger", stranger.bridge_url)

    for name in ("own", "shared"):
        reply = iris.post(f"/sessions/a-{name}/message", json_body={"text": f"@{name} hi"})
        assert reply.status == 200, reply.body
        assert reply.json()["text"] == "echo: hi"

    refused = iris.post("/sessions/a-stranger/message", json_body={"text": "@stranger hi"})
    assert refused.status == 502, refused.body
    body = refused.json()
    assert body["code"] == "route_failed" and "HTTP 401" in body["error"], body
    nothing_ran(stranger, stranger.server.data_dir / "none")
    assert iris.token not in body["error"] and stranger.token not in body["error"]


def test_bridge_recover_sends_the_registered_or_the_api_token(
    start_subagent: StartSub, start_iris: StartIris
) -> None:
    iris = start_iris()
    own = start_subagent("own")
    shared = start_subagent("shared", token=iris.token)
    register(iris, "own", own.bridge_url, token=own.token)
    register(iris, "shared", shared.bridge_url)
    own.stream({"text": "for the record", "requestId": "r-own"})
    shared.stream({"text": "shared record", "requestId": "r-shared"})

    # The token comes from agents.json, or from the API token in the environment, never argv.
    env = clean_environment(IRIS_DATA_DIR=str(iris.data_dir), IRIS_API_TOKEN=iris.token)
    for name, request_id, text in (
        ("own", "r-own", "for the record"),
        ("shared", "r-shared", "shared record"),
    ):
        done = run_iris("bridge", "recover", name, request_id, env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"echo: {text}"
        for token in (own.token, iris.token):
            assert token not in done.stdout + done.stderr
