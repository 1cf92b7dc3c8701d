"""Process mode end to end, one agent's life: a real ``iris serve`` supervises a real sub-agent
(``iris serve`` too), driven from this process through :class:`ProcessService` exactly as the
CLI drives it. Installed, it runs with its own settings and none of Iris's secrets, is restarted
after ``kill -9`` and is removed; an install that cannot work fails cleanly, leaving nothing."""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from iris_runtime.errors import ProvisionError
from iris_runtime.provision.process_service import ProcessService
from iris_runtime.provision.supervised import SupervisedStore
from tests.provisioning.supervised_agents import (
    IRIS_ENV,
    PARENT_SECRET,
    StartIris,
    agent_launch,
    alive,
    healthy,
    http_get,
    port_free,
    row,
    running_pid,
    wait_for,
)

pytestmark = pytest.mark.slow


def test_agent_runs_restarts_after_kill_and_is_removed(
    reap_agents: None, start_iris: StartIris, tmp_path: Path
) -> None:
    iris = start_iris(**IRIS_ENV)
    service = ProcessService(iris.data_dir)
    launch = agent_launch(tmp_path)
    lines: list[str] = []

    service.install(launch, lines.append)

    assert service.exists("digest")
    assert any("running" in line for line in lines), lines
    pid = running_pid(iris.data_dir)
    wait_for(lambda: healthy(launch), "the agent's /health")
    # Its bridge takes the API token it made for itself in its home.
    token = (launch.home / "api-token").read_text().strip()
    reply = http_get(f"{launch.bridge_url}/bridge/jobs/{uuid.uuid4()}", token)
    assert reply is not None and reply[0] == 404
    assert json.loads(reply[1])["code"] == "unknown_job"

    # The agent sees its own literal settings and none of Iris's secrets.
    environ = dict(
        item.split("=", 1)
        for item in Path(f"/proc/{pid}/environ").read_text().split("\0")
        if "=" in item
    )
    assert environ["AGENT_NAME"] == "digest"
    assert environ["IRIS_DATA_DIR"] == str(launch.home)
    assert "IRIS_API_TOKEN" not in environ
    assert "ANTHROPIC_API_KEY" not in environ
    assert iris.token not in "\n".join(environ.values())
    assert PARENT_SECRET not in "\n".join(environ.values())
    log_path = launch.home / "logs" / "agent.log"
    assert log_path.stat().st_mode & 0o777 == 0o600

    # kill -9 of the agent: the supervisor clears its group (the gunicorn worker holds the
    # ports) and starts a new one after the backoff.
    os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: (
            (r := row(iris.data_dir)) is not None
            and r.state == "running"
            and r.pid not in (None, pid)
        ),
        "a restarted agent",
    )
    restarted = row(iris.data_dir)
    assert restarted is not None
    assert restarted.restarts == 1
    assert restarted.last_exit == "killed by SIGKILL"
    wait_for(lambda: healthy(launch), "the restarted agent's /health")
    assert "killed by SIGKILL; restarting" in log_path.read_text()

    assert service.remove("digest", lines.append) is True
    assert restarted.pid is not None
    wait_for(lambda: not alive(restarted.pid), "the removed agent's process to be gone")
    assert row(iris.data_dir) is None
    assert not service.exists("digest")
    assert port_free(launch.api_port) and port_free(launch.bridge_port)
    assert service.remove("digest", lines.append) is False  # idempotent


def test_install_fails_cleanly(reap_agents: None, start_iris: StartIris, tmp_path: Path) -> None:
    # No Iris at all: a clear refusal and nothing left behind.
    lonely = ProcessService(tmp_path / "no-iris")
    (tmp_path / "no-iris").mkdir()
    with pytest.raises(ProvisionError, match="process mode needs a running Iris"):
        lonely.install(agent_launch(tmp_path, "lonely"), lambda line: None)
    assert not lonely.exists("lonely")

    iris = start_iris(**IRIS_ENV)
    service = ProcessService(iris.data_dir)

    # A command that exits at once: install fails with its log, and the row is gone.
    crashing = agent_launch(
        tmp_path,
        "crashing",
        (sys.executable, "-c", "import sys; print('exploded on purpose'); sys.exit(3)"),
    )
    with pytest.raises(ProvisionError) as failed:
        service.install(crashing, lambda line: None)
    assert "exit status 3" in failed.value.message
    assert "exploded on purpose" in failed.value.message
    assert not service.exists("crashing")

    # A command that cannot even start: same, and the supervisor keeps working afterwards.
    missing = agent_launch(tmp_path, "missing", ("/nonexistent/iris",))
    with pytest.raises(ProvisionError, match="No such file"):
        service.install(missing, lambda line: None)
    assert not service.exists("missing")

    good = agent_launch(tmp_path, "good")
    service.install(good, lambda line: None)
    wait_for(lambda: healthy(good), "the good agent's /health")
    assert service.remove("good", lambda line: None)


def test_unusable_state_db_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "state.db").write_bytes(b"this is not a database" * 100)
    service = ProcessService(tmp_path)
    with pytest.raises(ProvisionError, match=r"state\.db is unusable"):
        service.exists("digest")
    with pytest.raises(ProvisionError, match=r"state\.db is unusable"):
        service.install(agent_launch(tmp_path), lambda line: None)


def test_secret_values_are_refused_in_a_row(tmp_path: Path) -> None:
    launch = agent_launch(tmp_path)
    with SupervisedStore(tmp_path) as store, pytest.raises(ProvisionError, match="IRIS_API_TOKEN"):
        store.request(
            "digest",
            launch.command,
            {**launch.environment, "IRIS_API_TOKEN": "secret"},
            launch.home,
            tmp_path / "agent.log",
        )
    assert row(tmp_path) is None
