"""What a serving Iris imports before anyone uses it.

``iris serve``'s gunicorn master only checks the configuration and forks, and the worker serves;
modules only some requests need (an HTTP client for delegating, the secret store's crypto, the
Web UI's WebSocket stack while its port is off, the other subcommands) load on first use. Each
check runs in a fresh interpreter, through the real entry points (the ``iris`` command group and
the gunicorn app factory), and reads ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

# Heavy to import, and not needed until used: none may load while Iris only starts.
NOT_AT_START = ("requests", "urllib3", "cryptography", "yaml", "hvac", "flask_sock", "asyncio")

MASTER = """
import json, sys
import click
from iris_runtime.cli import cli
from iris_runtime.cli.common import load_settings

serve = cli.get_command(click.Context(cli), "serve")
from iris_runtime.cli.serve import check_startup
from gunicorn.util import load_class

check_startup(load_settings())
load_class("iris_runtime.web.worker.IrisWorker")  # gunicorn loads the worker class in the master
print(json.dumps(sorted(sys.modules)))
"""

WORKER = """
import json, sys
from iris_runtime.web import create_app

create_app(start=False)
print(json.dumps(sorted(sys.modules)))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _modules(code: str, data_dir: Path, **extra: str) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_")}
    env.update(
        IRIS_DATA_DIR=str(data_dir),
        IRIS_API_HOST="127.0.0.1",
        IRIS_API_PORT=str(_free_port()),
        IRIS_API_TOKEN="t" * 43,
        IRIS_PROVIDER="offline",
        **extra,
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_serve_master_loads_plugins_but_neither_flask_nor_other_commands(
    tmp_path: Path,
) -> None:
    modules = _modules(MASTER, tmp_path / "data")
    assert "iris_runtime.plugins" in modules  # the plugins are checked before forking
    assert not {"flask", "sqlite3"} & modules  # state.db is opened by the worker
    assert not {m for m in modules if m.startswith("iris_runtime.cli.")} - {
        "iris_runtime.cli.common",
        "iris_runtime.cli.env_file",
        "iris_runtime.cli.serve",
    }
    assert not modules & set(NOT_AT_START)


def test_a_sub_agent_app_leaves_clients_crypto_and_the_web_ui_stack_unloaded(
    tmp_path: Path,
) -> None:
    modules = _modules(
        WORKER, tmp_path / "data", AGENT_NAME="helper", BRIDGE_PORT=str(_free_port())
    )
    assert "iris_runtime.web.bridge_app" in modules
    assert not modules & set(NOT_AT_START)
