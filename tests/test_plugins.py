"""Plugins end to end: real ``iris`` entry points, real CLI processes, a real ``iris serve``.

``tests/plugin_fixture`` is a site directory holding two fake installed distributions (a
package plus its ``.dist-info``), found through ``PYTHONPATH``:

- ``iris-probe-plugin`` (entry point ``probe``) implements every hook and contributes one of
  everything (tool ``probe_echo``, provider ``probe``, sandbox ``probe``, ``GET /probe``, ...);
- ``iris-bad-plugin`` (entry point ``bad``) has a hookimpl named ``register_toolz`` and must be
  rejected whenever it is allowed to load.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iris_runtime import PROJECT_NAME, hookspecs
from iris_runtime.testing.server import IrisServer, clean_environment, free_port, run_iris

pytestmark = pytest.mark.slow

FIXTURE_DIR = Path(__file__).resolve().parent / "plugin_fixture"
BUILTINS = {"bridge", "channel_modes", "custom_agents", "providers", "secrets", "tools"}
HOOK_NAMES = sorted(
    name
    for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
    if hasattr(function, f"{PROJECT_NAME}_spec")
)
CLI_TIMEOUT = 120.0
STARTUP_TIMEOUT = 60.0


def python_path() -> str:
    """The fixture site dir first, then whatever PYTHONPATH the test run already has."""
    return os.pathsep.join([str(FIXTURE_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment with the fixture site dir on the path, plus ``extra``."""
    return clean_environment(
        PYTHONPATH=python_path(), IRIS_DATA_DIR=str(tmp_path / "data"), **extra
    )


def plugins_report(env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """``iris plugins --json``: its exit code and its parsed report."""
    result = run_iris("plugins", "--json", env=env)
    try:
        report = json.loads(result.stdout)
    except ValueError:
        pytest.fail(f"iris plugins --json printed no JSON:\n{result.stdout}\n{result.stderr}")
    return result.returncode, report


def loaded(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {plugin["name"]: plugin for plugin in report["plugins"]}


def start_server(tmp_path: Path, **env: str) -> IrisServer:
    server = IrisServer(tmp_path / "data", env={"PYTHONPATH": python_path(), **env})
    return server.start(timeout=STARTUP_TIMEOUT)


# -- iris plugins: what loads --------------------------------------------------------------------


def test_hookspecs_are_found() -> None:
    assert len(HOOK_NAMES) >= 10
    assert {"register_tools", "engine_started", "engine_stopping"} <= set(HOOK_NAMES)


def test_unset_allow_list_loads_everything_and_rejects_the_misspelt_plugin(
    tmp_path: Path,
) -> None:
    code, report = plugins_report(cli_env(tmp_path))

    assert code == 1, report  # a rejected plugin is an error
    plugins = loaded(report)
    assert BUILTINS | {"probe", "scripted"} <= plugins.keys()
    for name in BUILTINS:
        assert plugins[name]["source"] == "builtin"
    assert plugins["bridge"]["hooks"] == ["engine_started", "register_transports"]
    assert plugins["providers"]["hooks"] == ["register_providers"]
    assert plugins["tools"]["hooks"] == ["register_sandboxes", "register_tools"]
    assert plugins["probe"]["source"] == "iris-probe-plugin"
    assert plugins["probe"]["hooks"] == HOOK_NAMES  # sorted, and every single hook
    assert plugins["scripted"]["source"] == "iris-runtime"

    assert "bad" not in plugins  # rejected as a whole, never half-loaded
    assert report["skipped"] == []
    assert list(report["errors"]) == ["bad"]
    assert report["errors"]["bad"].startswith("rejected")
    assert "register_toolz" in report["errors"]["bad"]


def test_text_listing_reports_the_rejected_plugin(tmp_path: Path) -> None:
    result = run_iris("plugins", env=cli_env(tmp_path))

    assert result.returncode == 1
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert "iris-probe-plugin" in lines["probe"]
    assert "ERROR" in lines["bad"]
    assert "register_toolz" in lines["bad"]


@pytest.mark.parametrize(
    ("allow_list", "expected"),
    [
        ("probe", {"probe"}),
        ("probe,scripted", {"probe", "scripted"}),
        (" scripted , probe ,", {"probe", "scripted"}),
    ],
)
def test_allow_list_loads_only_the_named_plugins(
    tmp_path: Path, allow_list: str, expected: set[str]
) -> None:
    code, report = plugins_report(cli_env(tmp_path, IRIS_LOAD_PLUGINS=allow_list))

    assert code == 0, report
    assert set(loaded(report)) == BUILTINS | expected
    assert "bad" in report["skipped"]
    assert not expected & set(report["skipped"])
    assert report["errors"] == {}


def test_empty_allow_list_loads_only_the_builtins(tmp_path: Path) -> None:
    code, report = plugins_report(cli_env(tmp_path, IRIS_LOAD_PLUGINS=""))

    assert code == 0, report
    assert set(loaded(report)) == BUILTINS
    assert {"bad", "probe", "scripted"} <= set(report["skipped"])
    assert report["errors"] == {}


def test_allow_listed_plugin_that_is_not_installed_is_an_error(tmp_path: Path) -> None:
    code, report = plugins_report(cli_env(tmp_path, IRIS_LOAD_PLUGINS="probe,no_such_plugin"))

    assert code == 1
    assert "probe" in loaded(report)  # the others still load
    assert list(report["errors"]) == ["no_such_plugin"]
    assert "no such plugin is installed" in report["errors"]["no_such_plugin"]


def test_doctor_fails_on_a_rejected_plugin(tmp_path: Path) -> None:
    result = run_iris("doctor", "--json", env=cli_env(tmp_path, IRIS_LOAD_PLUGINS="probe,bad"))

    assert result.returncode == 1
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["plugin:bad"]["status"] == "fail"
    assert "register_toolz" in checks["plugin:bad"]["detail"]


def test_doctor_sees_the_plugin_contributions(tmp_path: Path) -> None:
    env = cli_env(
        tmp_path,
        IRIS_LOAD_PLUGINS="probe",
        IRIS_PROVIDER="probe",
        IRIS_SANDBOX="probe",
        IRIS_SANDBOX_UNPROVEN="1",  # a wrap-only level: refused without it, warned with it
    )
    result = run_iris("doctor", "--json", env=env)

    assert result.returncode == 0, result.stdout + result.stderr
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["provider"] == {"name": "provider", "status": "ok", "detail": "probe"}
    assert checks["sandbox"]["status"] == "warn"
    assert "probe" in checks["sandbox"]["detail"] and "unproven" in checks["sandbox"]["detail"]
    assert "probe" in checks["secret_backends"]["detail"].split(", ")


def test_a_plugin_secret_backend_serves_the_broker(start_iris: Callable[..., IrisServer]) -> None:
    iris = start_iris(
        PYTHONPATH=python_path(), IRIS_LOAD_PLUGINS="probe", IRIS_SECRET_BACKEND="probe"
    )
    assert iris.get("/secrets/probe-secret").json()["value"] == "not-really-a-secret"
    assert iris.get("/secrets").json()["names"] == ["probe-secret"]
    assert iris.get("/secrets/other").status == 404
    refused = iris.request("PUT", "/secrets/other", json_body={"value": "v"})
    assert refused.status == 409


def test_an_unknown_secret_backend_is_a_start_up_error(tmp_path: Path) -> None:
    env = cli_env(tmp_path, IRIS_SECRET_BACKEND="nope")
    result = run_iris("doctor", "--json", env=env)
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["secrets"]["status"] == "fail"
    assert "'nope'" in checks["secrets"]["detail"] and "known:" in checks["secrets"]["detail"]


def test_contributions_reach_the_plugin_host(tmp_path: Path) -> None:
    """The skill folder is a valid skill, and the secret backend and sandbox work as objects."""
    script = """
import json
from iris_runtime.config import Settings
from iris_runtime.engine.skills import load_skill
from iris_runtime.plugins import PluginHost

settings = Settings.from_env()
host = PluginHost(settings)
skills = [load_skill(path) for path in host.skills()]
print(json.dumps({
    "tools": sorted(tool.name for tool in host.tools()),
    "skills": [{"name": s.name, "description": s.description} for s in skills if s],
    "secret": host.secret_backends()["probe"](settings).get("probe-secret"),
    "wrapped": host.sandboxes()["probe"].wrap(["bash", "-c", "true"]),
    "transports": len(host.transports()),
}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=cli_env(tmp_path, IRIS_LOAD_PLUGINS="probe"),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert "probe_echo" in found["tools"]
    assert found["skills"] == [
        {
            "name": "probe-skill",
            "description": "A do-nothing skill contributed by the iris probe plugin, "
            "to test skill registration.",
        }
    ]
    assert found["secret"] == "not-really-a-secret"
    assert found["wrapped"][-3:] == ["bash", "-c", "true"]
    assert found["transports"] == 1  # only the built-in bridge: the probe registers none


# -- iris serve refuses broken plugins ---------------------------------------------------------


@pytest.mark.parametrize(
    ("allow_list", "culprit", "reason"),
    [
        ("probe,bad", "bad", "register_toolz"),
        ("probe,no_such_plugin", "no_such_plugin", "no such plugin is installed"),
    ],
)
def test_serve_refuses_to_start_when_a_plugin_fails(
    tmp_path: Path, allow_list: str, culprit: str, reason: str
) -> None:
    server = IrisServer(
        tmp_path / "data", env={"PYTHONPATH": python_path(), "IRIS_LOAD_PLUGINS": allow_list}
    )
    try:
        with pytest.raises(RuntimeError, match="iris serve exited") as refused:
            server.start(timeout=STARTUP_TIMEOUT)
    finally:
        server.stop()

    assert server.process is not None
    assert server.process.returncode != 0
    message = str(refused.value)  # carries the tail of the server's output
    assert "plugins failed to load" in message
    assert f"{culprit}: " in message
    assert reason in message


# -- tracing and plugin commands -----------------------------------------------------------------


def test_trace_plugins_logs_hook_calls_to_stderr(tmp_path: Path) -> None:
    traced = run_iris(
        "plugins", env=cli_env(tmp_path, IRIS_LOAD_PLUGINS="probe", IRIS_TRACE_PLUGINS="1")
    )
    quiet = run_iris("plugins", env=cli_env(tmp_path, IRIS_LOAD_PLUGINS="probe"))

    assert traced.returncode == 0, traced.stderr
    trace = [line for line in traced.stderr.splitlines() if "plugin trace:" in line]
    assert any("register_commands" in line for line in trace), traced.stderr
    assert "plugin trace:" not in traced.stdout
    assert quiet.returncode == 0, quiet.stderr
    assert "plugin trace:" not in quiet.stderr


def test_plugin_command_exists_only_while_its_plugin_is_loaded(tmp_path: Path) -> None:
    allowed = cli_env(tmp_path, IRIS_LOAD_PLUGINS="probe")
    none = cli_env(tmp_path, IRIS_LOAD_PLUGINS="")

    hello = run_iris("probe-hello", env=allowed)
    assert hello.returncode == 0, hello.stderr
    assert hello.stdout.strip() == "hello from probe"
    assert "probe-hello" in run_iris("--help", env=allowed).stdout

    missing = run_iris("probe-hello", env=none)
    assert missing.returncode == 2  # click's usage error
    assert "No such command" in missing.stderr
    assert "probe-hello" in missing.stderr
    assert "probe-hello" not in run_iris("--help", env=none).stdout


# -- a served Iris with the probe plugin -----------------------------------------------------


@pytest.fixture
def probe_server(tmp_path: Path) -> Iterator[IrisServer]:
    server = start_server(tmp_path, IRIS_LOAD_PLUGINS="probe,scripted", IRIS_PROVIDER="probe")
    try:
        yield server
    finally:
        server.stop()


def test_served_iris_answers_through_the_plugin_provider(probe_server: IrisServer) -> None:
    reply = probe_server.post("/sessions/x/message", json_body={"text": "hi"})

    assert reply.status == 200, reply.body
    assert reply.json()["text"] == "probe says hi"
    assert reply.json()["status"] == "done"


def test_plugin_blueprint_is_on_the_api_surface_behind_the_token(
    probe_server: IrisServer,
) -> None:
    authorized = probe_server.get("/probe")
    assert authorized.status == 200, authorized.body
    assert authorized.json() == {"probe": True}

    assert probe_server.get("/probe", auth=False).status == 401
    wrong = probe_server.get("/probe", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status == 401


class Watcher(threading.Thread):
    """Reads ``GET /sessions/<id>/stream`` (SSE) until the run's ``final`` event."""

    def __init__(self, server: IrisServer, session: str) -> None:
        super().__init__(daemon=True, name=f"watch-{session}")
        self.request = urllib.request.Request(
            f"{server.url}/sessions/{session}/stream",
            headers={"Authorization": f"Bearer {server.token}"},
        )
        self.connected = threading.Event()
        self.events: list[dict[str, Any]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with urllib.request.urlopen(self.request, timeout=CLI_TIMEOUT) as response:
                for raw in response:
                    line = raw.decode("utf-8").rstrip("\r\n")
                    if line == ": connected":
                        self.connected.set()
                    elif line.startswith("data: "):
                        event = json.loads(line.removeprefix("data: "))
                        self.events.append(event)
                        if event.get("type") == "final":
                            return
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc
        finally:
            self.connected.set()


def test_plugin_tool_and_sandbox_serve_a_run(tmp_path: Path) -> None:
    marker = "sandbox-marker.txt"
    echo = {"tool": "probe_echo", "args": {"text": "echo me"}, "id": "echo"}
    bash_command = (
        f'printf %s "$IRIS_PROBE_SANDBOX" > {marker}; '
        'printf %s "${IRIS_API_TOKEN:-none}" > token-seen.txt'
    )
    bash = {"tool": "bash", "args": {"command": bash_command}, "id": "bash"}
    rule = {"when": "use the probe", "turns": [[echo, bash], [{"text": "all done"}]]}
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [rule]}))
    server = start_server(
        tmp_path,
        IRIS_LOAD_PLUGINS="probe,scripted",
        IRIS_PROVIDER="scripted",
        IRIS_SCRIPT_FILE=str(script),
        IRIS_SANDBOX="probe",
        IRIS_SANDBOX_UNPROVEN="1",  # a wrap-only level: refused without it
    )
    try:
        watcher = Watcher(server, "tools")
        watcher.start()
        assert watcher.connected.wait(CLI_TIMEOUT), "the SSE stream never connected"
        assert watcher.error is None, watcher.error

        reply = server.post("/sessions/tools/message", json_body={"text": "use the probe"})
        watcher.join(CLI_TIMEOUT)
    finally:
        server.stop()

    assert reply.status == 200, reply.body
    assert reply.json()["text"] == "all done"
    assert watcher.error is None, watcher.error
    results = {
        event["id"]: event
        for event in watcher.events
        if event.get("type") == "tool" and event.get("phase") == "end"
    }
    assert results["echo"]["name"] == "probe_echo"
    assert results["echo"]["result"] == "echo me"
    assert results["echo"]["isError"] is False
    assert results["bash"]["isError"] is False, results["bash"]
    # The bash tool ran its command through the probe sandbox's wrap().
    assert (server.data_dir / marker).read_text() == "1"
    # An unproven level's command never gets Iris's own API token.
    assert (server.data_dir / "token-seen.txt").read_text() == "none"


def test_an_unknown_sandbox_level_stops_serve_with_a_clear_error(tmp_path: Path) -> None:
    env = cli_env(
        tmp_path, IRIS_LOAD_PLUGINS="", IRIS_SANDBOX="nosuch", IRIS_API_PORT=str(free_port())
    )
    result = run_iris("serve", env=env)
    assert result.returncode != 0
    assert "IRIS_SANDBOX='nosuch' is not installed" in result.stderr
    assert "Traceback" not in result.stderr


def test_naming_a_builtin_in_the_allow_list_is_not_an_error(tmp_path: Path) -> None:
    code, report = plugins_report(cli_env(tmp_path, IRIS_LOAD_PLUGINS="probe,tools"))
    assert code == 0, report
    assert report["errors"] == {}


def test_a_plugin_crashing_in_register_commands_does_not_break_the_cli(tmp_path: Path) -> None:
    env = cli_env(tmp_path, IRIS_LOAD_PLUGINS="crashy")
    result = run_iris("doctor", "--json", env=env)
    assert json.loads(result.stdout)["settings"]["load_plugins"] == ["crashy"]
    assert "plugin commands unavailable" in result.stderr
