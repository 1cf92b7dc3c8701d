"""A unit's life: installed, restarted by systemd after `kill -9` and removed without a trace;
installs whose command dies at once or is missing on the target fail and leave nothing."""

from __future__ import annotations

import stat
import sys
import uuid
from pathlib import Path

import pytest

from iris_runtime.agents.ports import can_bind
from iris_runtime.errors import ProvisionError
from iris_runtime.provision.launch import no_progress
from iris_runtime.provision.systemd import DEFAULT_AGENT_USER, SystemdService
from tests.provisioning.nspawn import NspawnHost
from tests.provisioning.systemd_units import (
    DATA,
    TOKEN,
    UNIT_DIR,
    agent_ids,
    agent_launch,
    get,
    healthy,
    process_status,
    read_as_agent,
    replace_atomically,
    show,
    wait_until,
)

# The first test's setup may include building the shared rootfs (debootstrap, a minute or more
# on a busy machine); the default per-test timeout is too short for that.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_agent_unit_runs_is_restarted_after_kill_and_is_removed(
    nspawn_host: NspawnHost,
    service: SystemdService,
) -> None:
    launch = agent_launch(nspawn_host, "digest")
    unit = launch.unit_name
    steps: list[str] = []
    service.install(launch, steps.append)

    assert any("daemon-reload" in step for step in steps)
    assert any(f"enable --now {unit}" in step for step in steps)
    unit_file = nspawn_host.path(f"{UNIT_DIR}/{unit}")
    assert service.exists("digest")
    assert stat.S_IMODE(unit_file.stat().st_mode) == 0o644
    text = unit_file.read_text()
    assert "EnvironmentFile" not in text
    assert TOKEN not in text
    verify = nspawn_host.run("systemd-analyze", "verify", f"{UNIT_DIR}/{unit}")
    assert (verify.returncode, verify.stderr) == (0, "")
    assert show(nspawn_host, unit, "UnitFileState") == "enabled"
    assert show(nspawn_host, unit, "ActiveState") == "active"
    assert any(f"handing {launch.home} to {DEFAULT_AGENT_USER}-digest" in step for step in steps)

    # The home is the agent user's now, and still private.
    uid, gid = agent_ids(nspawn_host)
    home = nspawn_host.path(launch.home)
    assert (home.stat().st_uid, home.stat().st_gid) == (uid, gid)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert (home / "api-token").stat().st_uid == uid

    wait_until(lambda: healthy(launch.health_url), "/health on the API port")
    assert get(launch.health_url)[1]["agent"] == "digest"
    status, body = get(f"{launch.bridge_url}/bridge/jobs/{uuid.uuid4()}", TOKEN)
    assert (status, body["code"]) == (404, "unknown_job")

    first_pid = show(nspawn_host, unit, "MainPID")
    assert first_pid != "0"
    assert_unprivileged(nspawn_host, first_pid, uid)

    # Iris rewrites its registry the way it always does; the running agent still cannot read it
    # (a bind over the old file would have been detached by the rename).
    registry = nspawn_host.path(DATA / "agents.json")
    replace_atomically(registry, '{"digest": {"token": "registry-secret"}}')
    assert read_as_agent(nspawn_host, first_pid, DATA / "agents.json").returncode != 0
    own_token = read_as_agent(nspawn_host, first_pid, launch.home / "api-token")
    assert (own_token.returncode, own_token.stdout.strip()) == (0, TOKEN), own_token.stderr

    assert nspawn_host.run("kill", "-9", first_pid).returncode == 0
    wait_until(
        lambda: show(nspawn_host, unit, "MainPID") not in ("0", first_pid),
        "systemd to restart the agent",
    )
    wait_until(lambda: healthy(launch.health_url), "/health after the restart")
    assert int(show(nspawn_host, unit, "NRestarts")) >= 1
    second_pid = show(nspawn_host, unit, "MainPID")
    assert_unprivileged(nspawn_host, second_pid, uid)
    assert read_as_agent(nspawn_host, second_pid, DATA / "agents.json").returncode != 0

    steps.clear()
    assert service.remove("digest", steps.append) is True
    assert any(f"disable --now {unit}" in step for step in steps)
    assert not unit_file.exists()
    assert not service.exists("digest")
    status_run = nspawn_host.run("systemctl", "status", unit)
    assert status_run.returncode == 4
    assert "could not be found" in status_run.stderr
    assert can_bind(launch.bridge_port)
    assert can_bind(launch.api_port)
    assert service.remove("digest", steps.append) is False
    # Kept: the archived home keeps its owner, and the name comes back under the same uid.
    assert agent_ids(nspawn_host) == (uid, gid)


def assert_unprivileged(host: NspawnHost, pid: str, uid: int) -> None:
    """The agent's process runs as the agent user with no capability at all."""
    status = process_status(host, pid)
    assert status["Uid"].split() == [str(uid)] * 4
    for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[capabilities], 16) == 0, f"{capabilities}={status[capabilities]}"
    assert status["NoNewPrivs"] == "1"


def test_a_command_that_dies_at_once_fails_install_with_its_journal_and_leaves_nothing(
    nspawn_host: NspawnHost,
    service: SystemdService,
) -> None:
    launch = agent_launch(
        nspawn_host, "crashy", command=("/bin/sh", "-c", "echo crashy-says-goodbye >&2; exit 1")
    )
    with pytest.raises(ProvisionError) as failure:
        service.install(launch, no_progress)

    message = failure.value.message
    assert "iris-agent-crashy.service failed to start" in message
    assert "journalctl -u iris-agent-crashy.service" in message
    assert "crashy-says-goodbye" in message
    assert not nspawn_host.path(f"{UNIT_DIR}/iris-agent-crashy.service").exists()
    assert not service.exists("crashy")
    assert show(nspawn_host, "iris-agent-crashy.service", "LoadState") == "not-found"
    assert show(nspawn_host, "iris-agent-crashy.service", "ActiveState") == "inactive"


def test_a_command_missing_on_the_target_fails_enable_and_leaves_nothing(
    nspawn_host: NspawnHost,
    service: SystemdService,
    tmp_path: Path,
) -> None:
    # Exists here, so `systemd-analyze verify` on this side passes; the container's /tmp is its
    # own, so systemd cannot exec it there and `systemctl enable --now` itself fails.
    program = tmp_path / "agent-program"
    program.write_text("#!/bin/sh\nexec sleep 60\n")
    program.chmod(0o755)
    launch = agent_launch(nspawn_host, "missing", command=(str(program),))
    with pytest.raises(ProvisionError) as failure:
        service.install(launch, no_progress)

    assert "iris-agent-missing.service did not start" in failure.value.message
    assert "journalctl -u iris-agent-missing.service" in failure.value.message
    assert not service.exists("missing")
    assert show(nspawn_host, "iris-agent-missing.service", "LoadState") == "not-found"


def test_systemd_running_tells_a_booted_systemd_apart(nspawn_host: NspawnHost) -> None:
    probe = "from iris_runtime.provision.systemd import systemd_running; print(systemd_running())"
    inside = nspawn_host.run(sys.executable, "-c", probe)
    assert inside.stdout.strip() == "True", inside.stderr
