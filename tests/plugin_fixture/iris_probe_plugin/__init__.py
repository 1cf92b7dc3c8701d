"""A fake third-party Iris plugin for tests: it implements every hook Iris defines.

Each hook call appends one JSON line ``{"hook": "<name>"}`` to the file named by the environment
variable ``IRIS_PROBE_LOG`` (when it is set), so a test can tell which hooks the runtime really
called, in which processes it ran. Besides logging, the probe contributes one of everything:

- tool ``probe_echo`` (returns its ``text`` argument);
- skill folder ``skills/probe-skill``;
- provider ``probe`` (always answers "probe says hi");
- secret backend ``probe``; sandbox levels ``probe`` (wrap only: refused
  unless IRIS_SANDBOX_UNPROVEN=1), ``probe-box`` (a full level:
  bubblewrap with its own hostname) and ``probe-leaky`` (claims a boundary, runs on the host);
- blueprint ``GET /probe`` on the API surface;
- command ``iris probe-hello``.

It registers no transport: ``register_transports`` only logs the call. It does declare the
channel-id shape ``PROBE-<digits>`` (``register_channel_shapes``), so such channels are refused
as belonging to a transport that is not running (``PROBE-x`` as no valid probe channel).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from flask import Blueprint, Response, jsonify

from iris_runtime import hookimpl
from iris_runtime.engine.provider import Done, ProviderEvent, ProviderRequest, TextDelta
from iris_runtime.engine.tools import ToolContext, ToolResult
from iris_runtime.engine.transport import ChannelShape
from iris_runtime.tools.sandbox import Level

LOG_ENV = "IRIS_PROBE_LOG"
SKILL_DIR = Path(__file__).resolve().parent / "skills" / "probe-skill"
REPLY = "probe says hi"


def _log(hook: str, **fields: Any) -> None:
    """Append ``{"hook": hook}`` to $IRIS_PROBE_LOG with a single O_APPEND write, so lines from
    the gunicorn master, its worker and CLI runs never interleave."""
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = json.dumps({"hook": hook, **fields}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


# -- contributions ----------------------------------------------------------------------------


class ProbeEchoTool:
    name = "probe_echo"
    description = "Return the given text unchanged (a test tool from the probe plugin)."
    parameters: dict[str, Any] = {  # noqa: RUF012 (read-only schema)
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The text to echo."}},
        "required": ["text"],
        "additionalProperties": False,
    }

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(str(args["text"]))


class ProbeProvider:
    name = "probe"

    def stream(self, request: ProviderRequest, abort: threading.Event) -> Iterator[ProviderEvent]:
        yield TextDelta(REPLY)
        yield Done()


def create_provider(settings: Any) -> ProbeProvider:
    return ProbeProvider()


class ProbeSecrets:
    """Resolves a fixed, fake secret; anything else is unknown. Read-only."""

    name = "probe"
    values = {"probe-secret": "not-really-a-secret"}  # noqa: RUF012

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def put(self, name: str, value: str) -> None:
        from iris_runtime.secrets.backend import ReadOnlyStore

        raise ReadOnlyStore("the probe store is read-only")

    def delete(self, name: str) -> bool:
        from iris_runtime.secrets.backend import ReadOnlyStore

        raise ReadOnlyStore("the probe store is read-only")

    def names(self) -> list[str]:
        return sorted(self.values)

    def describe(self) -> str:
        return "probe (fixed values)"

    def check(self) -> None:
        return None


def create_secret_backend(settings: Any) -> ProbeSecrets:
    return ProbeSecrets()


class ProbeSandbox:
    """Runs the command on the host, marked with ``IRIS_PROBE_SANDBOX=1`` in its environment so
    a test can see the bash tool went through this sandbox."""

    name = "probe"

    def wrap(self, argv: list[str]) -> list[str]:
        return ["env", "IRIS_PROBE_SANDBOX=1", *argv]


blueprint = Blueprint("probe", __name__)


@blueprint.get("/probe")
def probe_endpoint() -> Response:
    return jsonify({"probe": True})


@click.command("probe-hello")
def probe_hello() -> None:
    """Say hello from the probe plugin."""
    click.echo("hello from probe")


# -- hooks ------------------------------------------------------------------------------------


@hookimpl
def register_transports(register: Callable[..., None], settings: Any) -> None:
    _log("register_transports")  # a probe: it owns no channel, so it registers nothing


@hookimpl
def register_channel_shapes(register: Callable[[ChannelShape], None]) -> None:
    _log("register_channel_shapes")
    register(
        ChannelShape(
            "probe",
            claims=re.compile(r"PROBE-.*"),
            valid=re.compile(r"PROBE-[0-9]+"),
            rule="PROBE-<digits>",
        )
    )


@hookimpl
def register_tools(register: Callable[[Any], None]) -> None:
    _log("register_tools")
    register(ProbeEchoTool())


@hookimpl
def register_skills(register: Callable[[Any], None]) -> None:
    _log("register_skills")
    register(SKILL_DIR)


@hookimpl
def register_providers(register: Callable[[str, Any], None]) -> None:
    _log("register_providers")
    register("probe", create_provider)


@hookimpl
def register_secret_backends(register: Callable[[str, Any], None]) -> None:
    _log("register_secret_backends")
    register("probe", create_secret_backend)


@hookimpl
def register_sandboxes(register: Callable[[str, Any], None]) -> None:
    _log("register_sandboxes")
    register("probe", ProbeSandbox())
    register("probe-box", Level(_open_box))
    register("probe-leaky", Level(_open_leaky))


def _open_box(spec: Any) -> Any:
    """The built-in namespace level under another name and hostname: what a plugin level is."""
    from iris_runtime.tools.sandbox.namespace import NamespaceSandbox

    class ProbeBox(NamespaceSandbox):
        def bwrap_args(self, cwd: str) -> list[str]:
            args = super().bwrap_args(cwd)
            args[args.index("--hostname") + 1] = "probe-box"
            return args

    return ProbeBox(spec, shutil.which("bwrap"))


def _open_leaky(spec: Any) -> Any:
    """A level whose configuration claims a boundary it does not have: its probe must refuse it."""
    from iris_runtime.tools.sandbox.host import HostSandbox

    leaky = HostSandbox(spec.data_dir)
    leaky.isolated = True  # type: ignore[misc]
    leaky.level = spec.configured  # type: ignore[misc]
    return leaky


@hookimpl
def register_blueprints(register: Callable[..., None]) -> None:
    _log("register_blueprints")
    register(blueprint, surface="api")


@hookimpl
def register_commands(cli: click.Group) -> None:
    _log("register_commands")
    cli.add_command(probe_hello)


@hookimpl
def engine_started(engine: Any) -> None:
    # Whether messages could already arrive: they must not, or they would miss our routes.
    _log("engine_started", transports_started=engine.started)


@hookimpl
def engine_stopping(engine: Any) -> None:
    _log("engine_stopping")
