"""Every cell of the token matrix (``token_matrix.MATRIX``) against served processes.

One Iris (``iris serve`` with the Web UI on, two custom agents in ``agents.d``) with two
sub-agents registered through ``iris agents register``, each with its own token and secrets
allow-list: A is a real sub-agent runtime (its bridge answers the bridge rows), B only a
registration. One request per cell, each with a body the route accepts, so the status is the
auth decision and not a 400; each aimed at a target of its own (a session, a channel, a secret
name, an event) so that a refused request can be shown to have changed nothing, and an allowed
one to have done its work (which proves the check can see a change).
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import websocket
import yaml
from flask import Flask

from iris_runtime.testing.server import IrisServer, clean_environment, free_port, run_iris
from iris_runtime.testing.subagent import SubAgent, SubAgents
from tests.bridge.conftest import register
from tests.security.token_matrix import (
    AGENT_A,
    AGENT_B,
    API,
    BRIDGE,
    CALLERS,
    DOC,
    END,
    MATRIX,
    NONE,
    PAGE,
    REGENERATE,
    SHARED,
    START,
    WEBUI,
    WRONG,
    Decision,
    Row,
    documented,
    render,
)

ROOT = Path(__file__).resolve().parents[2]
A_SECRET, B_SECRET, NOBODYS = "MATRIX_A_KEY", "MATRIX_B_KEY", "MATRIX_NOBODYS_KEY"
PAGE_KEY_HEADER = "X-Iris-Page-Key"
COOKIE_NAME = "iris_webui"
FAR_FUTURE = "2099-01-01T00:00:00+00:00"  # a one-shot event that never fires by itself
DEADLINE = 30.0  # seconds for an allowed request's asynchronous work to show: a bound on a hang


# -- the served processes ------------------------------------------------------------------------


@dataclass
class Served:
    iris: IrisServer
    agent: SubAgent  # agent A, whose bridge is the bridge listener
    webui_port: int
    b_token: str
    cookie: str
    page_key: str
    web_session: str  # a Web UI conversation the page made
    web_file: str  # a file uploaded to it (``attachments/<stamp>_<name>``)
    job_id: str  # a finished bridge job of agent A
    wrong_token: str = field(default_factory=lambda: "wrong-" + secrets.token_urlsafe(24))
    # What a request may need to compare its effect with (e.g. the conversations before it).
    baselines: dict[str, Any] = field(default_factory=dict)
    # The "did it change anything?" checks of refused cells whose route works asynchronously,
    # looked at again once all the cells are done.
    refused_effects: dict[str, Callable[[], bool]] = field(default_factory=dict)

    @property
    def data(self) -> Path:
        return self.iris.data_dir

    @property
    def webui_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}"

    def base_url(self, listener: str) -> str:
        return {
            API: self.iris.url,
            BRIDGE: self.agent.bridge_url,
            WEBUI: self.webui_url,
        }[listener]

    def as_iris(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """A set-up or checking request with the Iris API token (never one of the cells)."""
        headers = {"Authorization": f"Bearer {self.iris.token}"}
        return requests.request(method, self.iris.url + path, headers=headers, timeout=60, **kwargs)

    def as_page(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """A set-up or checking request of the signed-in Web UI page."""
        headers = {
            "Cookie": f"{COOKIE_NAME}={self.cookie}",
            PAGE_KEY_HEADER: self.page_key,
            "Origin": self.webui_url,
        }
        return requests.request(
            method, self.webui_url + path, headers=headers, timeout=60, **kwargs
        )


def write_custom_agents(data: Path, record: Path) -> None:
    """An ACP agent offering models (the Web UI's model routes need one) and a relay agent to
    restart; neither is ever asked anything."""
    agents_d = data / "agents.d"
    agents_d.mkdir(parents=True)
    coder = {
        "kind": "coder",
        "bin": sys.executable,
        "args": ["-m", "iris_runtime.testing.acp_agent", str(record)],
        "models": [{"id": "fast"}, {"id": "deep"}],
    }
    butler = {"kind": "butler", "relay": f"http://127.0.0.1:{free_port()}/inbound"}
    (agents_d / "coder.json").write_text(json.dumps(coder))
    (agents_d / "butler.json").write_text(json.dumps(butler))


def wait_for_custom_agents(iris: IrisServer) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        listed = iris.get("/custom-agents")
        if listed.status == 200 and {"coder", "butler"} <= kinds_in(listed.json()):
            return
        time.sleep(0.1)
    raise AssertionError(f"the custom agents did not load:\n{iris.log_tail()}")


def kinds_in(listing: Any) -> set[str]:
    agents = listing.get("agents", []) if isinstance(listing, dict) else []
    return {str(a.get("kind")) for a in agents if isinstance(a, dict)}


def sign_in(iris: IrisServer, webui_port: int) -> tuple[str, str]:
    """The cookie and the page key of a sign-in through a fresh one-time link (``iris webui
    link``, as plugins/iris-webui/tests/server_harness.py does)."""
    env = clean_environment(IRIS_DATA_DIR=str(iris.data_dir), IRIS_WEBUI_PORT=str(webui_port))
    done = run_iris("webui", "link", env=env)
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip().rsplit("key=", 1)[-1]
    url = f"http://127.0.0.1:{webui_port}"
    reply = requests.get(f"{url}/login", params={"key": key}, allow_redirects=False, timeout=60)
    assert reply.status_code == 303, reply.text
    location = reply.headers["Location"]
    assert location.startswith("/#k="), location
    return reply.cookies[COOKIE_NAME], location.removeprefix("/#k=")


def make_web_session(iris_port: int, webui_port: int, cookie: str, key: str) -> tuple[str, str]:
    """A conversation made by the page, with one uploaded file: (its id, the file's path)."""
    url = f"http://127.0.0.1:{webui_port}"
    headers = {"Cookie": f"{COOKIE_NAME}={cookie}", PAGE_KEY_HEADER: key, "Origin": url}
    made = requests.post(f"{url}/api/sessions", json={}, headers=headers, timeout=60)
    assert made.status_code == 201, made.text
    session = str(made.json()["id"])
    files = {"file": ("seed.txt", b"seed", "text/plain")}
    upload = requests.post(
        f"{url}/api/sessions/{session}/uploads", files=files, headers=headers, timeout=60
    )
    assert upload.status_code == 201, upload.text
    return session, str(upload.json()["path"])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("matrix")
    socket_dir = Path(tempfile.mkdtemp(prefix="iris-sock-"))  # a unix socket path is short
    agents = SubAgents(folder)
    iris: IrisServer | None = None
    try:
        agent = agents.start("alpha")
        data = folder / "iris-data"
        write_custom_agents(data, folder / "coder.jsonl")
        webui_port = free_port()
        env = {"IRIS_WEBUI_PORT": str(webui_port), "IRIS_REACH_SOCKET": str(socket_dir / "r")}
        iris = IrisServer(data, env=env).start()
        b_token = "agent-b-" + secrets.token_urlsafe(24)
        register(iris, "alpha", agent.bridge_url, "--secret", A_SECRET, token=agent.token)
        dead_bridge = f"http://127.0.0.1:{free_port()}"  # B is only registered, never called
        register(iris, "beta", dead_bridge, "--secret", B_SECRET, token=b_token)
        for name in (A_SECRET, B_SECRET, NOBODYS):
            stored = iris.request("PUT", f"/secrets/{name}", json_body={"value": name.lower()})
            assert stored.status == 200, stored.body
        job_id = "matrix-job"
        assert agent.stream({"text": "hello", "requestId": job_id})[-1]["type"] == "final"
        cookie, page_key = sign_in(iris, webui_port)
        web_session, web_file = make_web_session(iris.port, webui_port, cookie, page_key)
        wait_for_custom_agents(iris)
        yield Served(
            iris, agent, webui_port, b_token, cookie, page_key, web_session, web_file, job_id
        )
    finally:
        if iris is not None:
            iris.stop()
        agents.stop_all()
        shutil.rmtree(socket_dir, ignore_errors=True)


# -- what a cell sends ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    json: Any = None
    data: bytes | None = None
    files: dict[str, tuple[str, bytes, str]] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    stream: bool = False


@dataclass(frozen=True)
class Exercise:
    """How to send a route a request it accepts (setting up the cell's own target first), and
    whether that cell's request did what the route does (None: nothing to see, e.g. a read)."""

    call: Callable[[Served, str], Call]
    effect: Callable[[Served, str], bool] | None = None
    asynchronous: bool = False  # the work shows after the answer (a run, a fired event)


def credentials(served: Served, caller: str) -> dict[str, str]:
    """The headers that make a request come from ``caller``."""
    bearer = {
        NONE: None,
        WRONG: served.wrong_token,
        AGENT_A: served.agent.token,
        AGENT_B: served.b_token,
        SHARED: served.iris.token,
    }
    if caller in bearer:
        token = bearer[caller]
        return {} if token is None else {"Authorization": f"Bearer {token}"}
    headers = {"Cookie": f"{COOKIE_NAME}={served.cookie}"}
    if caller == PAGE:
        headers[PAGE_KEY_HEADER] = served.page_key
    return headers


def log_entries(served: Served, channel: str) -> list[dict[str, Any]]:
    path = served.data / channel / "log.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def has_log(channel: Callable[[str], str]) -> Callable[[Served, str], bool]:
    return lambda served, caller: (served.data / channel(caller) / "log.jsonl").exists()


def secret_status(served: Served, name: str) -> int:
    return served.as_iris("GET", f"/secrets/{name}").status_code


def event_file(served: Served, name: str) -> Path:
    return served.data / "events" / f"{name}.json"


def add_event(served: Served, name: str, channel: str) -> None:
    body = {"name": name, "type": "one-shot", "channelId": channel, "text": "matrix"}
    added = served.as_iris("POST", "/events", json={**body, "at": FAR_FUTURE})
    assert added.status_code == 201, added.text


def web_sessions(served: Served) -> set[str]:
    return {p.name for p in served.data.glob("WEBUI-*")}


# Setting up a cell's target, before its request.


def reset_call(served: Served, caller: str) -> Call:
    turn = served.as_iris("POST", f"/sessions/reset-{caller}/inject-turn", json={"user": "hi"})
    assert turn.status_code == 200, turn.text
    return Call("POST", f"/sessions/reset-{caller}/reset", json={})


def put_secret_call(served: Served, caller: str) -> Call:
    return Call("PUT", f"/secrets/PUT_{caller}", json={"value": "v"})


def delete_secret_call(served: Served, caller: str) -> Call:
    stored = served.as_iris("PUT", f"/secrets/DEL_{caller}", json={"value": "v"})
    assert stored.status_code == 200, stored.text
    return Call("DELETE", f"/secrets/DEL_{caller}")


def add_event_call(served: Served, caller: str) -> Call:
    body = {"name": f"add-{caller}", "type": "one-shot", "channelId": f"evt-{caller}"}
    return Call("POST", "/events", json={**body, "text": "matrix", "at": FAR_FUTURE})


def delete_event_call(served: Served, caller: str) -> Call:
    add_event(served, f"del-{caller}", f"evt-{caller}")
    return Call("DELETE", f"/events/del-{caller}")


def fire_event_call(served: Served, caller: str) -> Call:
    add_event(served, f"fire-{caller}", f"fire-{caller}")
    return Call("POST", f"/events/fire-{caller}/fire", json={})


def fired(served: Served, caller: str) -> bool:
    """An immediate copy was written, or already ran on the event's channel."""
    copies = list((served.data / "events").glob(f"fire-{caller}.fired-*"))
    return bool(copies) or (served.data / f"fire-{caller}").exists()


def new_web_session_call(served: Served, caller: str) -> Call:
    served.baselines[f"sessions-{caller}"] = web_sessions(served)
    return Call("POST", "/api/sessions", json={})


def upload_call(served: Served, caller: str) -> Call:
    files = {"file": (f"up-{caller}.txt", b"matrix", "text/plain")}
    return Call("POST", f"/api/sessions/{served.web_session}/uploads", files=files)


def uploaded(served: Served, caller: str) -> bool:
    folder = served.data / f"WEBUI-{served.web_session}" / "attachments"
    return bool(list(folder.glob(f"*_up-{caller}.txt")))


def choose_model_call(served: Served, caller: str) -> Call:
    made = served.as_page("POST", "/api/sessions", json={})
    assert made.status_code == 201, made.text
    session = served.baselines[f"model-{caller}"] = made.json()["id"]
    return Call("POST", f"/api/sessions/{session}/agents/coder/model", json={"model": "deep"})


def model_chosen(served: Served, caller: str) -> bool:
    session = served.baselines[f"model-{caller}"]
    choice = served.as_page("GET", f"/api/sessions/{session}/agents/coder/model")
    assert choice.status_code == 200, choice.text
    return bool(choice.json()["model"] == "deep")


def fixed(method: str, path: str, **kwargs: Any) -> Callable[[Served, str], Call]:
    return lambda served, caller: Call(method, path, **kwargs)


def bridge_body(prefix: str) -> Callable[[Served, str], Call]:
    return lambda served, caller: Call(
        "POST", "/bridge", json={"text": "hello", "requestId": f"{prefix}-{caller}"}
    )


def web(path: str) -> Callable[[Served, str], Call]:
    """A GET of the Web UI on the page's own conversation (``{s}``) and file (``{f}``)."""
    return lambda served, caller: Call("GET", path.format(s=served.web_session, f=served.web_file))


EXERCISES: dict[str, Exercise] = {
    "api GET /health": Exercise(fixed("GET", "/health")),
    "api POST /sessions/{session_id}/message": Exercise(
        lambda s, c: Call("POST", f"/sessions/msg-{c}/message", json={"text": "hello"}),
        has_log(lambda c: f"SESSION-msg-{c}"),
    ),
    "api POST /sessions/{session_id}/attachments": Exercise(
        lambda s, c: Call(
            "POST", f"/sessions/att-{c}/attachments", data=b"bytes", headers={"X-Filename": "a"}
        ),
        lambda s, c: bool(list((s.data / f"SESSION-att-{c}" / "attachments").glob("*"))),
    ),
    # Nothing is running to stop: the decision is all there is to see.
    "api POST /sessions/{session_id}/stop": Exercise(
        lambda s, c: Call("POST", f"/sessions/stop-{c}/stop")
    ),
    "api GET /sessions/{session_id}/stream": Exercise(
        lambda s, c: Call("GET", f"/sessions/stream-{c}/stream", stream=True)
    ),
    "api GET /sessions/{session_id}/history": Exercise(fixed("GET", "/sessions/hist/history")),
    "api GET /sessions/{session_id}/subagents": Exercise(fixed("GET", "/sessions/hist/subagents")),
    "api POST /sessions/{session_id}/reset": Exercise(
        reset_call,
        lambda s, c: any(e.get("type") == "reset" for e in log_entries(s, f"SESSION-reset-{c}")),
    ),
    "api POST /sessions/{session_id}/inject-turn": Exercise(
        lambda s, c: Call("POST", f"/sessions/inject-{c}/inject-turn", json={"user": "hi"}),
        has_log(lambda c: f"SESSION-inject-{c}"),
    ),
    "api GET /channels": Exercise(fixed("GET", "/channels")),
    "api POST /channels/{channel_id}/events": Exercise(
        lambda s, c: Call("POST", f"/channels/chev-{c}/events", json={"text": "hello"}),
        has_log(lambda c: f"chev-{c}"),
        asynchronous=True,
    ),
    "api POST /escalate": Exercise(
        lambda s, c: Call("POST", "/escalate", json={"text": "help", "channel": f"esc-{c}"}),
        has_log(lambda c: f"esc-{c}"),
    ),
    "api GET /secrets": Exercise(fixed("GET", "/secrets")),
    "api GET /secrets/{name} (on A's allow-list)": Exercise(fixed("GET", f"/secrets/{A_SECRET}")),
    "api GET /secrets/{name} (on no allow-list)": Exercise(fixed("GET", f"/secrets/{NOBODYS}")),
    "api PUT /secrets/{name}": Exercise(
        put_secret_call, lambda s, c: secret_status(s, f"PUT_{c}") == 200
    ),
    "api DELETE /secrets/{name}": Exercise(
        delete_secret_call, lambda s, c: secret_status(s, f"DEL_{c}") == 404
    ),
    "api GET /events": Exercise(fixed("GET", "/events")),
    "api POST /events": Exercise(add_event_call, lambda s, c: event_file(s, f"add-{c}").exists()),
    "api DELETE /events/{name}": Exercise(
        delete_event_call, lambda s, c: not event_file(s, f"del-{c}").exists()
    ),
    "api POST /events/{name}/fire": Exercise(fire_event_call, fired, asynchronous=True),
    "api GET /custom-agents": Exercise(fixed("GET", "/custom-agents")),
    # A restart re-reads an unchanged file: nothing to see but the decision.
    "api POST /custom-agents/{kind}/restart": Exercise(
        fixed("POST", "/custom-agents/butler/restart", json={})
    ),
    "bridge POST /bridge": Exercise(
        bridge_body("bridge"),
        lambda s, c: (s.agent.server.data_dir / "bridge-jobs" / f"bridge-{c}.jsonl").exists(),
    ),
    "bridge GET /bridge/jobs/{request_id}": Exercise(
        lambda s, c: Call("GET", f"/bridge/jobs/{s.job_id}")
    ),
    "bridge GET /bridge/jobs/{request_id} (no such job)": Exercise(
        fixed("GET", "/bridge/jobs/no-such-job")
    ),
    "webui GET /": Exercise(fixed("GET", "/")),
    "webui GET /api/sessions": Exercise(fixed("GET", "/api/sessions")),
    "webui POST /api/sessions": Exercise(
        new_web_session_call, lambda s, c: web_sessions(s) != s.baselines[f"sessions-{c}"]
    ),
    "webui GET /api/sessions/{session}/history": Exercise(web("/api/sessions/{s}/history")),
    "webui GET /api/agents": Exercise(fixed("GET", "/api/agents")),
    "webui POST /api/sessions/{session}/uploads": Exercise(upload_call, uploaded),
    "webui GET /api/sessions/{session}/files/{relative}": Exercise(
        web("/api/sessions/{s}/files/{f}")
    ),
    "webui GET /api/sessions/{session}/agents/{kind}/model": Exercise(
        web("/api/sessions/{s}/agents/coder/model")
    ),
    "webui POST /api/sessions/{session}/agents/{kind}/model": Exercise(
        choose_model_call, model_chosen
    ),
    "webui GET /ws": Exercise(web("/ws?session={s}")),
    "bridge GET /health": Exercise(fixed("GET", "/health")),
    "bridge GET /secrets/{name} (on A's allow-list)": Exercise(
        fixed("GET", f"/secrets/{A_SECRET}")
    ),
    "api POST /bridge": Exercise(
        bridge_body("cross"),
        lambda s, c: (s.agent.server.data_dir / "bridge-jobs" / f"cross-{c}.jsonl").exists(),
    ),
    "api GET /api/sessions": Exercise(fixed("GET", "/api/sessions")),
    "webui GET /secrets/{name} (on A's allow-list)": Exercise(fixed("GET", f"/secrets/{A_SECRET}")),
}


# -- what a cell gets ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    code: str | None
    headers: dict[str, str]
    close_code: int | None = None  # a WebSocket closed after its first frame


def send(served: Served, row: Row, caller: str, call: Call) -> Answer:
    headers = {**credentials(served, caller), **call.headers}
    if row.listener == WEBUI:
        headers["Origin"] = served.webui_url  # the page's own: only the credentials differ
    if call.path.startswith("/ws"):
        return open_socket(served, caller, call.path, headers)
    reply = requests.request(
        call.method,
        served.base_url(row.listener) + call.path,
        json=call.json,
        data=call.data,
        files=call.files,
        headers=headers,
        allow_redirects=False,
        stream=call.stream,
        timeout=60,
    )
    with reply:
        return Answer(reply.status_code, code_of(reply), dict(reply.headers))


def code_of(reply: requests.Response) -> str | None:
    """What tells one answer from another: a redirect's target, an error body's ``code``."""
    if reply.is_redirect:
        return reply.headers.get("Location")
    if reply.status_code < 300 or not reply.headers.get("Content-Type", "").startswith(
        "application/json"
    ):
        return None
    code = reply.json().get("code")
    return str(code) if code is not None else None


def open_socket(served: Served, caller: str, path: str, headers: dict[str, str]) -> Answer:
    """The socket's handshake; once upgraded, its hello (with the page key the caller has, if
    any) and the first frame that answers it."""
    origin = headers.pop("Origin")
    url = f"ws://127.0.0.1:{served.webui_port}{path}"
    try:
        ws = websocket.create_connection(url, header=headers, origin=origin, timeout=DEADLINE)
    except websocket.WebSocketBadStatusException as refused:
        body = json.loads(refused.resp_body or b"{}")
        return Answer(refused.status_code, body.get("code"), dict(refused.resp_headers or {}))
    try:
        hello: dict[str, str] = {"type": "hello"}
        if PAGE_KEY_HEADER in headers:
            hello["page_key"] = headers[PAGE_KEY_HEADER]
        ws.send(json.dumps(hello))
        frame = json.loads(ws.recv())
        if frame.get("type") != "error":
            return Answer(101, frame.get("type"), {})
        opcode, payload = ws.recv_data(control_frame=True)
        closed = (
            int.from_bytes(payload[:2], "big") if opcode == websocket.ABNF.OPCODE_CLOSE else None
        )
        return Answer(101, frame.get("code"), {}, close_code=closed)
    finally:
        ws.close()


def eventually(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# -- the tests -----------------------------------------------------------------------------------

CELLS = [(row, caller) for row in MATRIX for caller in CALLERS]


@pytest.mark.parametrize(("row", "caller"), CELLS, ids=[f"{r.key} | {c}" for r, c in CELLS])
def test_cell(served: Served, row: Row, caller: str) -> None:
    expected = row.decision(caller)
    exercise = EXERCISES[row.key]
    call = exercise.call(served, caller)
    answer = send(served, row, caller, call)
    where = f"{row.key} as {caller}"
    got = (answer.status, answer.code, answer.close_code)
    assert got == (expected.status, expected.code, expected.close_code), where
    check_refusal_headers(row, expected, answer, where)
    if exercise.effect is not None:
        check_effect(served, exercise, expected, caller, where)


def check_refusal_headers(row: Row, expected: Decision, answer: Answer, where: str) -> None:
    """A bearer listener's 401 names its scheme: exactly so on the API (docs/openapi.yaml),
    ``Bearer`` on the bridge (docs/bridge.md)."""
    if expected.status != 401 or row.listener == WEBUI:
        return
    challenge = answer.headers.get("WWW-Authenticate", "")
    if row.listener == API:
        assert challenge == 'Bearer realm="iris"', where
    else:
        assert challenge.startswith("Bearer"), where


def check_effect(
    served: Served, exercise: Exercise, expected: Decision, caller: str, where: str
) -> None:
    def changed() -> bool:
        assert exercise.effect is not None
        return exercise.effect(served, caller)

    if expected.allowed:
        # Asynchronous work (a run on a channel, a fired event) shows in time.
        assert eventually(changed), f"{where}: allowed, but its work never showed"
    else:
        assert not changed(), f"{where}: refused, yet it changed something"
        if exercise.asynchronous:
            served.refused_effects[where] = changed


def test_refused_cells_left_nothing_behind_later(served: Served) -> None:
    """Asynchronous work (a run, a fired event) could show after a refusal was answered: those
    refused cells are looked at again, once all the cells (and their runs) are done."""
    if not served.refused_effects:
        pytest.skip("no refused cell of a route with asynchronous work ran in this session")
    time.sleep(0.5)  # the event watcher schedules within a second
    late = [where for where, changed in served.refused_effects.items() if changed()]
    assert late == []


def test_every_row_has_an_exercise() -> None:
    keys = [row.key for row in MATRIX]
    assert len(keys) == len(set(keys)), "two rows with one key: tell them apart by their case"
    assert set(keys) == set(EXERCISES)


def test_the_api_rows_are_the_routes_of_the_openapi_document() -> None:
    document = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())
    methods = {"get", "put", "post", "delete", "patch"}
    documented_routes = {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in methods
    }
    assert served_routes(API) == documented_routes


def test_the_bridge_rows_are_the_routes_the_bridge_serves() -> None:
    from iris_runtime.web.bridge_app import blueprint

    assert served_routes(BRIDGE) == flask_routes(blueprint)


# Web UI routes that need no sign-in: the pages to sign in with, and static files.
PUBLIC_WEBUI_ROUTES = {
    ("GET", "/login"),
    ("POST", "/login"),
    ("GET", "/login/options"),
    ("POST", "/logout"),
    ("GET", "/static/{filename}"),
}


def test_the_webui_rows_are_its_routes_that_need_a_sign_in() -> None:
    from iris_webui.routes import blueprint  # with every route joined

    assert served_routes(WEBUI) == flask_routes(blueprint) - PUBLIC_WEBUI_ROUTES


def served_routes(listener: str) -> set[tuple[str, str]]:
    return {(r.method, r.path) for r in MATRIX if r.listener == listener and r.served}


def flask_routes(blueprint: Any) -> set[tuple[str, str]]:
    """``(method, path)`` of every rule a blueprint adds, written as the table writes them."""
    app = Flask("token-matrix")
    app.register_blueprint(blueprint)
    return {
        (method, re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule))
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"  # the bare app's own, not the blueprint's
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})
    }


def test_docs_security_md_shows_the_table() -> None:
    shown = documented(DOC.read_text(encoding="utf-8"))
    assert shown is not None, f"docs/security.md lacks the {START} … {END} markers"
    assert shown == render(), (
        "the token matrix in docs/security.md differs from tests/security/token_matrix.py; "
        f"regenerate it with `{REGENERATE}`"
    )
