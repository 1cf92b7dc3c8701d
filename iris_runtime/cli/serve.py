"""``iris serve``: the runtime under gunicorn (one gthread-based worker, many threads).

One worker because the engine keeps in-process state (runs, watchers, queues); scale-out is more
hosts and more sub-agents. The app is built after fork, in the worker, so the engine's threads
live in the process that serves requests.
"""

from __future__ import annotations

import logging
import resource
import signal
import threading
from typing import Any

import click
from gunicorn.app.base import BaseApplication

from iris_runtime.cli.common import load_settings, plugin_host, port_problem
from iris_runtime.config import Settings, ensure_api_token
from iris_runtime.errors import ConfigError
from iris_runtime.provision.supervised_child import backoff_from
from iris_runtime.runtime import check_selection, prepare_data_dir
from iris_runtime.tls import server_context
from iris_runtime.tools.sandbox.configured import prove_configured
from iris_runtime.web.capacity import (
    THREAD_STACK_BYTES,
    descriptors_needed,
    server_threads,
    worker_connections,
)

log = logging.getLogger(__name__)


def _runtime_of(worker: Any) -> Any:
    return getattr(getattr(worker, "wsgi", None), "runtime", None)


def _post_fork(server: Any, worker: Any) -> None:
    """Before the worker starts any thread: small stacks, since held requests each keep one."""
    threading.stack_size(THREAD_STACK_BYTES)


def raise_open_files_limit(needed: int) -> None:
    """Every held request is a socket (a Web UI socket also a selector): lift the soft descriptor
    limit (often 1024) to the hard one, and say so when the hard one is below what the
    configured slots may need."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # e.g. a platform cap below the hard limit
            click.echo(f"warning: cannot raise the open-file limit to {hard}: {exc}", err=True)
    if hard != resource.RLIM_INFINITY and hard < needed:
        click.echo(
            f"warning: the open-file limit {hard} is below the {needed} this configuration may "
            "use; raise LimitNOFILE (or ulimit -n) or lower IRIS_MAX_STREAMS / IRIS_MAX_WAITS",
            err=True,
        )


def _post_worker_init(worker: Any) -> None:
    """Abort runs as soon as SIGTERM arrives, so waiting requests resolve inside the grace
    period instead of being cut off when it ends."""
    runtime = _runtime_of(worker)
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        if runtime is not None:
            threading.Thread(target=runtime.engine.begin_shutdown, name="iris-shutdown").start()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, on_term)
    signal.siginterrupt(signal.SIGTERM, False)


def _stop_runtime(worker: Any) -> None:
    runtime = _runtime_of(worker)
    if runtime is not None:
        runtime.stop()


def _worker_exit(server: Any, worker: Any) -> None:
    _stop_runtime(worker)


class IrisServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        super().__init__()

    def load_config(self) -> None:
        s = self.settings
        binds = [f"{host}:{port}" for host, port in s.listeners().values()]
        options: dict[str, Any] = {
            "bind": binds,
            "workers": 1,
            "worker_class": "iris_runtime.web.worker.IrisWorker",  # gthread, see its docstring
            "threads": server_threads(s),
            "worker_connections": worker_connections(s),
            "timeout": 60,
            "graceful_timeout": 15,
            "keepalive": 5,
            "proc_name": f"iris-{s.agent_name or 'main'}",
            "control_socket": str(s.control_socket),
            "control_socket_mode": 0o600,
            "loglevel": s.log_level,
            "errorlog": "-",
            "post_fork": _post_fork,
            "post_worker_init": _post_worker_init,
            "worker_int": _stop_runtime,
            "worker_exit": _worker_exit,
        }
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        # Imported here, in the worker: the master never serves, so Flask stays out of it.
        from iris_runtime.web.app import create_app

        return create_app(self.settings, start=True, host=plugin_host(self.settings))


def check_startup(settings: Settings) -> None:
    """Fail fast, with the reason, before gunicorn starts retrying binds."""
    for name, (bind_host, port) in settings.listeners().items():
        problem = port_problem(bind_host, port)
        if problem:
            raise click.ClickException(
                f"cannot listen on {bind_host}:{port} ({name}): {problem}. "
                "Is another Iris already running? Choose another port or stop it."
            )
    # Only a process that serves TLS needs the files (a Docker agent inherits the variables of a
    # host whose paths do not exist in its container, and binds loopback only).
    if settings.tls_ports and settings.tls_cert is not None and settings.tls_key is not None:
        try:  # the worker builds its own; this one only proves the files make a context
            server_context(settings.tls_cert, settings.tls_key)
        except ConfigError as exc:
            raise click.ClickException(exc.message) from None
    host = plugin_host(settings)
    if host.errors:
        lines = "\n".join(f"  {name}: {problem}" for name, problem in host.errors.items())
        raise click.ClickException(f"plugins failed to load:\n{lines}")
    try:
        backoff_from(settings.env)  # read in the worker, where a bad value would only be logged
        check_selection(settings, host)
        prove_configured(settings, host.sandboxes())
        # Building the provider resolves its model: an unknown one stops here, not in a worker.
        host.providers()[settings.provider](settings)
    except ConfigError as exc:
        raise click.ClickException(exc.message) from None


@click.command()
@click.option("--agent", "agent_name", help="Run as the sub-agent NAME (sets AGENT_NAME).")
@click.option("--bridge-port", type=int, help="Sub-agent bridge port (sets BRIDGE_PORT).")
@click.option(
    "--sandbox",
    metavar="LEVEL",
    help="Isolation level of the bash and file tools (sets IRIS_SANDBOX): host, namespace[:net], "
    "gvisor[:ptrace|:kvm], docker:<container>, firecracker[:net].",
)
def serve(agent_name: str | None, bridge_port: int | None, sandbox: str | None) -> None:
    """Start Iris (internal API on IRIS_API_HOST:IRIS_API_PORT, default 127.0.0.1:3000)."""
    settings = load_settings()
    if agent_name or bridge_port or sandbox:
        import os

        env = dict(settings.env)
        if agent_name:
            env["AGENT_NAME"] = agent_name
        if bridge_port:
            env["BRIDGE_PORT"] = str(bridge_port)
        if sandbox:
            env["IRIS_SANDBOX"] = sandbox
        chosen = ("AGENT_NAME", "BRIDGE_PORT", "IRIS_SANDBOX")
        os.environ.update({k: env[k] for k in chosen if k in env})
        settings = load_settings()
    try:
        prepare_data_dir(settings)
        settings = ensure_api_token(settings)
    except (OSError, ConfigError) as exc:
        raise click.ClickException(f"data dir {settings.data_dir}: {exc}") from None
    settings.control_socket.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_startup(settings)
    source = (
        settings.env.get("IRIS_API_TOKEN_FILE", "").strip()
        or ("IRIS_API_TOKEN" if settings.env.get("IRIS_API_TOKEN") else "")
        or str(settings.token_file)
    )
    scheme = "https" if settings.api_port in settings.tls_ports else "http"
    click.echo(
        f"Iris API on {scheme}://{settings.api_host}:{settings.api_port} "
        f"(data {settings.data_dir}; API token in {source})",
        err=True,
    )
    _announce_webui(settings)
    raise_open_files_limit(descriptors_needed(settings))
    IrisServer(settings).run()


def _announce_webui(settings: Settings) -> None:
    """Print the Web UI's one-time login link on stderr. The Web UI plugin makes the key here, in
    the master, before the worker forks, and stores only its digest; the key itself is never
    logged, nor put in the environment or on a command line."""
    if not settings.webui_port:
        return
    issue = getattr(plugin_host(settings).module("webui"), "issue_login_link", None)
    line = issue(settings) if callable(issue) else None
    if isinstance(line, str):
        click.echo(line, err=True)
