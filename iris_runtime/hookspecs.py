"""Every plugin hook Iris calls. These docstrings are the plugin documentation of record.

Hooks that contribute things take a ``register`` callback (call it once per thing you add); hooks
whose return value matters say so. Implement a hook with ``@iris_runtime.hookimpl`` on a function
of the same name in a module exposed through the ``iris`` entry-point group::

    [options.entry_points]
    iris =
        my_plugin = my_package.plugin

A hookimpl whose name is not listed here is rejected when the plugin loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

from iris_runtime import PROJECT_NAME

if TYPE_CHECKING:
    from collections.abc import Callable

    import click

    from iris_runtime.config import Settings
    from iris_runtime.engine.core import Engine
    from iris_runtime.engine.transport import ChannelShape

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


@hookspec
def register_transports(register: Callable[..., None], settings: Settings) -> None:
    """Contribute chat transports.

    Call ``register(factory)`` where ``factory(engine) -> ChannelTransport`` builds the transport
    once the engine exists. Register only when your credentials are present in ``settings.env``:
    a transport with no token configured registers nothing and costs nothing (no connection, no
    log lines). Transports are consulted in registration order to find a channel's owner; the
    built-in headless bridge transport owns every channel and is always consulted last. Pass
    ``register(factory, fallback=True)`` only for another such catch-all. Declare the shape of
    your channel ids with ``register_channel_shapes`` too, so they are never the catch-all's.
    """


@hookspec
def register_channel_shapes(register: Callable[[ChannelShape], None]) -> None:
    """Declare the channel ids your transport claims, whether or not it is configured.

    Call ``register(ChannelShape(transport_id, claims, valid=..., rule=...))`` (see
    ``iris_runtime.engine.transport.ChannelShape``): ``claims`` is a compiled pattern matched
    against the whole id (``re.compile(r"tg-.*")``), ``valid`` the subset that is well-formed
    (``tg-<integer>``; None when every claimed id is), ``rule`` one phrase for error messages.
    Claim a distinctive prefix in any case (``re.IGNORECASE``): on a case-insensitive file
    system ``TG-1`` and ``tg-1`` would share a folder.
    Iris calls this in every serving process, credentials or not, so it must cost nothing:
    compile patterns, import nothing heavy, connect nowhere, log nothing.

    An id a shape claims is never handed to the bridge catch-all. When no running transport
    owns it, the API refuses it (and an event file gets the reason in its ``.error`` file):
    ``404 no_such_channel`` when it is not ``valid`` or the running transport does not own it,
    ``409 transport_not_running`` when the transport is not running. The first declared shape
    that claims an id wins; pick a distinct prefix.
    """


@hookspec
def register_tools(register: Callable[[Any], None]) -> None:
    """Contribute agent tools.

    Call ``register(tool)`` with an object that has ``name``, ``description``, ``parameters`` (a
    JSON schema of the arguments) and ``run(args, ctx) -> ToolResult`` (see
    ``iris_runtime.engine.tools``). Tool names must be unique across all plugins.
    """


@hookspec
def register_skills(register: Callable[[Any], None]) -> None:
    """Contribute skill folders.

    Call ``register(path)`` with a folder holding a ``SKILL.md`` whose frontmatter gives at least
    ``name`` and ``description``; it may also declare ``secrets: [NAME, ...]``, the secret
    names the skill's scripts fetch (spawning an agent with the skill puts them on its
    allow-list). Skills in the workspace's own ``skills/`` folder win over plugin skills of the
    same name.
    """


@hookspec
def register_providers(register: Callable[[str, Any], None]) -> None:
    """Contribute LLM providers.

    Call ``register(name, factory)`` where ``factory(settings) -> Provider``. ``IRIS_PROVIDER``
    selects one by name; the built-in ``offline`` provider is the default. A provider's
    ``stream(request, abort)`` yields events and reports failures as ``ProviderError`` events,
    never as exceptions. A provider should also expose ``context_window`` (tokens): the engine
    compacts conversations that approach it.
    """


@hookspec
def register_secret_backends(register: Callable[[str, Any], None]) -> None:
    """Contribute secret backends for the secret broker.

    Call ``register(name, factory)`` where ``factory(settings)`` returns a backend; the broker
    uses the one named by ``IRIS_SECRET_BACKEND`` (in ``store`` mode). Built in: ``file``,
    ``vault``, ``env``. A backend has a ``name`` and these methods
    (``iris_runtime.secrets.backend.SecretBackend``):

    - ``get(name) -> str | None``: the value, ``None`` when there is no such secret;
    - ``put(name, value)`` and ``delete(name) -> bool`` (False when absent); a read-only store
      raises ``ReadOnlyStore`` (HTTP 409);
    - ``names() -> list[str]``: every name, never values;
    - ``describe() -> str``: one line for ``iris doctor``, without credentials;
    - ``check()``: raises when the store cannot answer.

    Raise ``SecretStoreUnavailable`` (HTTP 503) when the store cannot answer now; the broker
    retries on the next request. The factory must not connect anywhere: a store that is down
    at start-up must not keep Iris from starting. Names arrive already validated; values must
    never appear in logs or exception messages.
    """


@hookspec
def register_sandboxes(register: Callable[[str, Any], None]) -> None:
    """Contribute isolation levels for the bash and file tools.

    Call ``register(level, Level(open))`` (``iris_runtime.tools.sandbox.Level``). ``IRIS_SANDBOX``
    (or ``--sandbox``) names a level, optionally with an option after a colon (``docker:web``);
    ``open(spec)`` gets a ``SandboxSpec`` (``level``, ``option``, ``data_dir``, ``env``,
    ``run_secrets``) and returns the sandbox, without starting anything. The sandbox has:

    - ``level`` (as configured), ``isolated`` (True when it claims a boundary: then its probe
      may refuse it) and ``isolates_network`` (True when the probe must see only loopback);
    - ``view``: a ``WorkspaceView`` — the work folder (``root``: host path, the path inside,
      writable) and read-only ``extras``. The file tools and ``attach`` resolve paths through it,
      so they touch exactly what the command sees;
    - ``check()``: raise ``SandboxUnavailable`` with the reason when the level cannot run here
      (missing binary, device, image, container); ``iris serve`` then stops, never falling back;
    - ``launch(argv, cwd, env) -> Launch``: ``argv`` is a list, never a shell string; ``cwd``
      is the path inside; ``env`` is the command's whole environment. ``Launch.argv`` runs on
      the host as its own process group, which the bash tool kills on timeout and Stop; name a
      ``Launch.kill`` for what escapes the group (a container's processes), a
      ``Launch.cleanup`` for what one run leaves behind, and ``Launch.pass_fds`` for
      descriptors the process must inherit (a lease it holds while it lives).

    At start-up and on ``iris doctor --sandbox`` a probe runs inside (it needs ``sh``,
    ``/proc``, ``id``, ``cat``, ``tail``, ``cut``, ``tr`` and ``rm``), and an isolated level
    that shows the host (Iris's uid, Iris's data folder, network where none was asked for) is
    refused. Built in: ``host``, ``namespace``, ``gvisor``,
    ``docker``, ``firecracker`` (docs/sandbox.md). An object with only ``wrap(argv) -> argv``
    is refused unless ``IRIS_SANDBOX_UNPROVEN=1`` is set: it has no view and no probe, so its
    commands (and the file tools) reach the host's whole data dir, unproven. With the opt-in it
    runs, the log and ``iris doctor`` warn, and its commands never get ``IRIS_API_TOKEN``.
    """


@hookspec
def register_blueprints(register: Callable[..., None]) -> None:
    """Contribute Flask blueprints (only the web layer calls this hook).

    Call ``register(blueprint, surface="api")``; ``surface`` is ``api`` (the internal API port,
    behind the API token) or ``webui`` (the Web UI port, when ``IRIS_WEBUI_PORT`` is set).
    ``blueprint`` may also be a function taking no argument and returning the blueprint: it is
    called only when that surface is served, so a heavy module need not load otherwise.
    """


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add subcommands to the ``iris`` command: ``cli.add_command(my_command)``."""


@hookspec
def engine_started(engine: Engine) -> None:
    """Called once in the serving process when the engine is assembled, just before its
    transports start taking messages: add routers and tools here, and start background work.

    Transports are registered (``engine.transports``) but not started yet, so whatever this
    hook adds is in place for the very first message — a chat's backlog included. Tools and
    routers may also be added later; runs read the registries safely while they change."""


@hookspec
def engine_stopping(engine: Engine) -> None:
    """Called once when the serving process stops, before transports stop and runs are drained.

    Release what you acquired in ``engine_started``; keep it quick.
    """
