"""The installed ``get-secret`` command against a served Iris whose agents hold their own tokens,
run as a subprocess with a clean environment; and the skill reaching a served Iris's prompt.

Every run also checks that neither the token nor any stored value ever shows on stderr.
"""

from __future__ import annotations

import json
import secrets as random
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from iris_skill_get_secret import cli

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.secrets.backend import SECRET_NAME_RE
from iris_runtime.testing.fake_llm import FakeAnthropic
from iris_runtime.testing.server import IrisServer, clean_environment, free_port, run_iris

pytestmark = pytest.mark.slow

SCRIPT = Path(sys.executable).parent / "get-secret"
TOKEN_A = "agent-a-" + random.token_urlsafe(24)
TOKEN_B = "agent-b-" + random.token_urlsafe(24)
VALUES = {
    "A_KEY": "a-" + random.token_hex(12),
    "A.multi-line": f"  first {random.token_hex(6)}\nsecond line ✓ \n",
    "B_KEY": "b-" + random.token_hex(12),
}
ALL_SECRETS = (TOKEN_A, TOKEN_B, *VALUES.values())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IrisServer]:
    data = tmp_path_factory.mktemp("get-secret") / "data"
    iris = IrisServer(data).start()
    registry = AgentRegistry(data / "agents.json")
    registry.register("alpha", "http://127.0.0.1:4001", ["A_KEY", "A.multi-line", "GONE"], TOKEN_A)
    registry.register("beta", "http://127.0.0.1:4002", ["B_KEY"], TOKEN_B)
    for name, value in VALUES.items():
        assert iris.request("PUT", f"/secrets/{name}", json_body={"value": value}).status == 200
    yield iris
    iris.stop()


def get_secret(
    *args: str, env: dict[str, str], timeout: float = 60.0
) -> subprocess.CompletedProcess[bytes]:
    """Run the installed script; fail the test if anything secret reaches stderr."""
    assert SCRIPT.exists(), f"{SCRIPT} is missing: pip install -e plugins/iris-skill-get-secret"
    result = subprocess.run(
        [str(SCRIPT), *args],
        env=clean_environment(**env),
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    stderr = result.stderr.decode("utf-8", "replace")
    for secret in (*ALL_SECRETS, env.get("IRIS_API_TOKEN", "")):
        assert not secret.strip() or secret.strip() not in stderr, "a secret leaked to stderr"
    return result


def as_agent(server: IrisServer, token: str, **env: str) -> dict[str, str]:
    return {"IRIS_SECRET_BROKER_URL": server.url, "IRIS_API_TOKEN": token, **env}


def one_line(result: subprocess.CompletedProcess[bytes]) -> str:
    text = result.stderr.decode()
    assert text.count("\n") == 1 and text.startswith("get-secret: "), text
    return text


def audit_lines(server: IrisServer) -> list[str]:
    path = server.data_dir / "audit" / "secrets.jsonl"
    return path.read_text().splitlines() if path.exists() else []


# -- 0: found -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["A_KEY", "A.multi-line"])
def test_an_allowed_secret_is_printed_with_one_newline(server: IrisServer, name: str) -> None:
    result = get_secret(name, env=as_agent(server, TOKEN_A))

    assert result.returncode == 0, result.stderr
    assert result.stdout == VALUES[name].encode() + b"\n"
    assert result.stderr == b""


def test_no_newline_prints_the_value_exactly(server: IrisServer) -> None:
    result = get_secret("--no-newline", "A.multi-line", env=as_agent(server, TOKEN_A))

    assert result.returncode == 0, result.stderr
    assert result.stdout == VALUES["A.multi-line"].encode()


def test_the_token_can_come_from_a_file(server: IrisServer, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN_B + "\n")
    env = {"IRIS_SECRET_BROKER_URL": server.url, "IRIS_API_TOKEN_FILE": str(token_file)}

    result = get_secret("B_KEY", env=env)

    assert result.returncode == 0, result.stderr
    assert result.stdout == VALUES["B_KEY"].encode() + b"\n"


def test_without_a_broker_url_it_asks_the_local_api_port(server: IrisServer) -> None:
    result = get_secret("A_KEY", env={"IRIS_API_TOKEN": TOKEN_A, "IRIS_API_PORT": str(server.port)})

    assert result.returncode == 0, result.stderr
    assert result.stdout == VALUES["A_KEY"].encode() + b"\n"


def test_proxy_settings_are_ignored(server: IrisServer) -> None:
    """The bearer token goes to the broker only, never through a proxy from the environment."""
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    env = as_agent(server, TOKEN_A, HTTP_PROXY=dead_proxy, http_proxy=dead_proxy, NO_PROXY="")

    result = get_secret("A_KEY", env=env)

    assert result.returncode == 0, result.stderr
    assert result.stdout == VALUES["A_KEY"].encode() + b"\n"


# -- 3: refused ---------------------------------------------------------------------------------


def test_a_secret_not_on_the_allow_list_is_exit_3_saying_403(server: IrisServer) -> None:
    result = get_secret("B_KEY", env=as_agent(server, TOKEN_A))

    assert result.returncode == 3
    assert result.stdout == b""
    message = one_line(result)
    assert "403" in message and "allow-list" in message and "B_KEY" in message


def test_an_unknown_token_is_exit_3_saying_401(server: IrisServer) -> None:
    wrong = "unknown-" + random.token_urlsafe(16)
    result = get_secret("A_KEY", env=as_agent(server, wrong))

    assert result.returncode == 3
    assert result.stdout == b""
    message = one_line(result)
    assert "401" in message and "token" in message and "403" not in message


# -- 4: missing ---------------------------------------------------------------------------------


def test_an_allowed_name_missing_from_the_store_is_exit_4(server: IrisServer) -> None:
    result = get_secret("GONE", env=as_agent(server, TOKEN_A))

    assert result.returncode == 4
    assert result.stdout == b""
    assert "GONE" in one_line(result)


# -- 5: unreachable -----------------------------------------------------------------------------


def test_nobody_listening_is_exit_5() -> None:
    env = {"IRIS_SECRET_BROKER_URL": f"http://127.0.0.1:{free_port()}", "IRIS_API_TOKEN": TOKEN_A}
    result = get_secret("A_KEY", env=env)

    assert result.returncode == 5
    assert "connection refused" in one_line(result)


def test_a_stopped_iris_is_exit_5(start_iris: Callable[..., IrisServer]) -> None:
    iris = start_iris()
    iris.stop()

    result = get_secret(
        "A_KEY", env={"IRIS_SECRET_BROKER_URL": iris.url, "IRIS_API_TOKEN": iris.token}
    )

    assert result.returncode == 5
    assert "unreachable" in one_line(result)


def test_a_broker_that_does_not_answer_in_time_is_exit_5() -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        env = {
            "IRIS_SECRET_BROKER_URL": f"http://127.0.0.1:{silent.getsockname()[1]}",
            "IRIS_API_TOKEN": TOKEN_A,
            "IRIS_SECRET_TIMEOUT_SECONDS": "0.5",
        }
        result = get_secret("A_KEY", env=env, timeout=20)

    assert result.returncode == 5
    assert "no answer within 0.5s" in one_line(result)


def test_a_secret_store_that_is_down_is_exit_5(start_iris: Callable[..., IrisServer]) -> None:
    vault_down = f"http://127.0.0.1:{free_port()}"
    iris = start_iris(
        IRIS_SECRET_BACKEND="vault",  # noqa: S106 (a backend name)
        IRIS_VAULT_ADDR=vault_down,
        IRIS_VAULT_TOKEN="unused",  # noqa: S106 (nothing listens to check it)
    )
    AgentRegistry(iris.data_dir / "agents.json").register(
        "alpha", "http://127.0.0.1:4001", ["A_KEY"], TOKEN_A
    )

    result = get_secret("A_KEY", env=as_agent(iris, TOKEN_A))

    assert result.returncode == 5
    message = one_line(result)
    assert "503" in message and "secret_store_unavailable" in message


def test_a_url_that_is_not_a_broker_is_exit_5_not_missing(server: IrisServer) -> None:
    """A 404 from the wrong server (a path prefix Iris does not serve) is no "missing secret"."""
    result = get_secret(
        "A_KEY", env=as_agent(server, TOKEN_A, IRIS_SECRET_BROKER_URL=f"{server.url}/nope")
    )

    assert result.returncode == 5
    assert "404" in one_line(result)


class Redirector(BaseHTTPRequestHandler):
    target = ""
    seen: list[dict[str, str]] = []  # noqa: RUF012 (shared with the test, one server at a time)

    def do_GET(self) -> None:
        Redirector.seen.append(dict(self.headers))
        self.send_response(302)
        self.send_header("Location", Redirector.target + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_redirect_is_not_followed_with_the_token() -> None:
    Redirector.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Redirector)
    Redirector.target = f"http://127.0.0.1:{httpd.server_address[1]}/elsewhere"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        broker = f"http://127.0.0.1:{httpd.server_address[1]}"
        result = get_secret(
            "A_KEY", env={"IRIS_SECRET_BROKER_URL": broker, "IRIS_API_TOKEN": TOKEN_A}
        )
    finally:
        httpd.shutdown()
        httpd.server_close()

    assert result.returncode == 5
    assert "302" in one_line(result)
    assert len(Redirector.seen) == 1  # the redirect target was never asked


# -- 2: usage -----------------------------------------------------------------------------------


def test_no_token_is_exit_2_before_any_request(server: IrisServer) -> None:
    before = audit_lines(server)
    result = get_secret("A_KEY", env={"IRIS_SECRET_BROKER_URL": server.url})

    assert result.returncode == 2
    assert "IRIS_API_TOKEN" in one_line(result)
    assert audit_lines(server) == before


def test_an_unreadable_token_file_is_exit_2(server: IrisServer, tmp_path: Path) -> None:
    env = {"IRIS_SECRET_BROKER_URL": server.url, "IRIS_API_TOKEN_FILE": str(tmp_path / "none")}
    result = get_secret("A_KEY", env=env)

    assert result.returncode == 2
    assert "IRIS_API_TOKEN_FILE" in one_line(result)


def test_a_token_that_cannot_be_one_is_exit_2_and_not_quoted(
    server: IrisServer, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN_A}\n{TOKEN_B}\n")  # two tokens pasted into one file
    env = {"IRIS_SECRET_BROKER_URL": server.url, "IRIS_API_TOKEN_FILE": str(token_file)}

    result = get_secret("A_KEY", env=env)

    assert result.returncode == 2
    assert "token" in one_line(result)


@pytest.mark.parametrize("name", ["a/b", "1STARTS_WITH_DIGIT", "has space", "A" * 129, ""])
def test_an_invalid_name_is_exit_2_and_never_sent(server: IrisServer, name: str) -> None:
    before = audit_lines(server)
    result = get_secret(name, env=as_agent(server, TOKEN_A))

    assert result.returncode == 2
    message = one_line(result)
    assert "invalid secret name" in message
    assert (name or "\0") not in message  # the name may be a misplaced value: never echoed
    assert audit_lines(server) == before  # refused locally, the broker never asked


@pytest.mark.parametrize("args", [[], ["A_KEY", "B_KEY"], ["--nope", "A_KEY"]])
def test_a_bad_command_line_is_exit_2(server: IrisServer, args: list[str]) -> None:
    result = get_secret(*args, env=as_agent(server, TOKEN_A))

    assert result.returncode == 2
    assert b"usage: get-secret" in result.stderr


def test_a_broker_url_that_is_not_http_is_exit_2(tmp_path: Path) -> None:
    target = tmp_path / "secrets" / "A_KEY"
    target.parent.mkdir()
    target.write_text('{"value": "from a file"}')
    env = {"IRIS_SECRET_BROKER_URL": f"file://{tmp_path}", "IRIS_API_TOKEN": TOKEN_A}

    result = get_secret("A_KEY", env=env)

    assert result.returncode == 2
    assert result.stdout == b""
    assert "http" in one_line(result)


def test_the_name_rule_is_the_brokers() -> None:
    assert cli.SECRET_NAME_RE.pattern == SECRET_NAME_RE.pattern


# -- the skill reaches Iris ---------------------------------------------------------------------


def test_iris_plugins_lists_the_skill_plugin(tmp_path: Path) -> None:
    result = run_iris("plugins", "--json", env=clean_environment(IRIS_DATA_DIR=str(tmp_path)))

    plugins = {plugin["name"]: plugin for plugin in json.loads(result.stdout)["plugins"]}
    assert plugins["get_secret"]["source"] == "iris-skill-get-secret"
    assert plugins["get_secret"]["hooks"] == ["register_skills"]


def test_a_served_iris_lists_the_skill_in_its_system_prompt(
    start_iris: Callable[..., IrisServer], fake_anthropic: FakeAnthropic
) -> None:
    iris = start_iris(**fake_anthropic.iris_env())

    reply = iris.post("/sessions/skills/message", json_body={"text": "which skills?"})

    assert reply.status == 200, reply.body
    system = fake_anthropic.system_text()
    skill_md = Path(cli.__file__).parent / "skill" / "SKILL.md"
    assert "- get-secret: Fetch an API key, password or other secret by name" in system
    assert str(skill_md) in system
    assert skill_md.read_text().startswith("---\nname: get-secret\n")


def test_plain_http_to_another_host_is_exit_2_before_any_request() -> None:
    # TEST-NET-2: nothing is sent there, the refusal comes first.
    env = {"IRIS_SECRET_BROKER_URL": "http://198.51.100.55:3000", "IRIS_API_TOKEN": TOKEN_A}
    result = get_secret("A_KEY", env=env, timeout=30)
    assert result.returncode == 2
    line = one_line(result)
    assert "plain HTTP to another host" in line and "IRIS_INSECURE_HTTP=1" in line
    # The explicit switch lets the URL through (not run: it would send a packet off this host).
    from iris_skill_get_secret.cli import broker_url

    assert broker_url({**env, "IRIS_INSECURE_HTTP": "1"}) == env["IRIS_SECRET_BROKER_URL"]


def test_a_missing_ca_file_is_exit_2_not_a_traceback(tmp_path: Path) -> None:
    env = {
        "IRIS_SECRET_BROKER_URL": "https://127.0.0.1:9",
        "IRIS_API_TOKEN": TOKEN_A,
        "IRIS_TLS_CACERT": str(tmp_path / "no-such-ca.pem"),
    }
    result = get_secret("A_KEY", env=env, timeout=30)
    assert result.returncode == 2, result.stderr
    assert "IRIS_TLS_CACERT" in one_line(result)


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.8.9.10",
        "::1",
        "[::1]",
        "::ffff:127.0.0.1",
        "LOCALHOST",
        "ip6-localhost",
        "0.0.0.0",
        "::",
        "192.0.2.1",
        "::ffff:192.0.2.1",
        "example.com",
        "fe80::1%eth0",
    ],
)
def test_the_loopback_rule_is_irises(host: str) -> None:
    """The script cannot import Iris: its copy of the rule must answer as Iris's does."""
    from iris_runtime.tls import is_loopback

    assert cli._is_loopback(host) is is_loopback(host)
