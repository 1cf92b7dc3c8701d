"""The served processes the token matrix is checked against, and the set-up they need.

One Iris (``iris serve`` with the Web UI on, two custom agents in ``agents.d``) with two
sub-agents registered through ``iris agents register``, each with its own token and secrets
allow-list: A is a real sub-agent runtime (its bridge answers the bridge rows), B only a
registration. The page is signed in and has made a conversation with one uploaded file, and
agent A has one finished bridge job, so that the rows reading them have something to read.
"""

from __future__ import annotations

import json
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from iris_runtime.testing.server import IrisServer, clean_environment, free_port, run_iris
from iris_runtime.testing.subagent import SubAgent, SubAgents, register
from tests.security.token_matrix import API, BRIDGE, WEBUI

A_SECRET, B_SECRET, NOBODYS = "MATRIX_A_KEY", "MATRIX_B_KEY", "MATRIX_NOBODYS_KEY"
PAGE_KEY_HEADER = "X-Iris-Page-Key"
COOKIE_NAME = "iris_webui"
DEADLINE = 30.0  # seconds for an allowed request's asynchronous work to show: a bound on a hang


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


@contextmanager
def serve_matrix(folder: Path) -> Iterator[Served]:
    """The served processes, set up under ``folder``; all stopped on leaving."""
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
