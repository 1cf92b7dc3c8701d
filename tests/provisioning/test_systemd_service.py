"""Service mode under a real systemd (PID 1 in a booted nspawn container): the real `iris serve`
sub-agent installed as a unit answers /health and the bridge, is restarted by systemd after
`kill -9`, and is removed without a trace; a command that dies at once fails install with its
journal; hostile values reach the process exactly as given; the hardening hides the parent's
secrets."""

from __future__ import annotations

import json
import random
import stat
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.agents.ports import can_bind
from iris_runtime.errors import ProvisionError
from iris_runtime.provision.launch import AgentLaunch, no_progress
from iris_runtime.provision.systemd import SystemdService
from tests.provisioning.nspawn import NspawnHost, nspawn_host  # noqa: F401 (fixture)
from tests.provisioning.rootfs import debian_rootfs  # noqa: F401 (fixture)

# The first test's setup may include building the shared rootfs (debootstrap, a minute or more
# on a busy machine); the default per-test timeout is too short for that.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
UNIT_DIR = "/etc/systemd/system"
AGENTS_DIR = Path("/var/lib/iris/agents")  # inside the container
SECRETS = Path("/var/lib/iris/secrets")  # the parent's secret store, hidden from agents
TOKEN = "tok-5b0e8d1f6a2c4e7f9d3b1a0c8e6f4d2b"


@pytest.fixture
def service(nspawn_host: NspawnHost) -> Iterator[SystemdService]:  # noqa: F811
    """SystemdService driving the container's systemd; removes what a test left installed."""
    systemd = SystemdService(
        REPO,
        nspawn_host.path(UNIT_DIR),
        nspawn_host.command("systemctl"),
        journalctl=nspawn_host.command("journalctl"),
    )
    yield systemd
    for unit in nspawn_host.path(UNIT_DIR).glob("iris-agent-*.service"):
        systemd.remove(unit.name.removeprefix("iris-agent-").removesuffix(".service"), no_progress)


def free_ports() -> tuple[int, int]:
    """A bridge port and its API port (+100), both free on the shared network."""
    for _ in range(200):
        bridge = random.randrange(30000, 39000)
        if can_bind(bridge) and can_bind(bridge + 100):
            return bridge, bridge + 100
    raise RuntimeError("no free port pair")


def make_home(host: NspawnHost, name: str) -> Path:
    """An agent home inside the container, with its API token file."""
    home = AGENTS_DIR / name
    on_host = host.path(home)
    on_host.mkdir(parents=True, mode=0o700, exist_ok=True)
    token = on_host / "api-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return home


def agent_launch(host: NspawnHost, name: str, **changes: Any) -> AgentLaunch:
    bridge, api = free_ports()
    home = make_home(host, name)
    values: dict[str, Any] = {
        "name": name,
        "home": home,
        "bridge_port": bridge,
        "api_port": api,
        "command": (sys.executable, "-m", "iris_runtime", "serve"),
        "environment": {
            "AGENT_NAME": name,
            "BRIDGE_PORT": str(bridge),
            "IRIS_API_PORT": str(api),
            "IRIS_API_HOST": "127.0.0.1",
            "IRIS_DATA_DIR": str(home),
            "IRIS_SECRETS_MODE": "store",
            "IRIS_SECRET_BROKER_URL": "http://127.0.0.1:9",
            "IRIS_PROVIDER": "offline",
            "IRIS_SLACK_APP_TOKEN": "",
            "IRIS_SLACK_BOT_TOKEN": "",
            "TELEGRAM_BOT_TOKEN": "",
        },
        "protected_paths": (SECRETS, Path("/var/lib/iris/agents.json")),
    }
    values.update(changes)
    return AgentLaunch(**values)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.1)


def get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def healthy(url: str) -> bool:
    try:
        return get(url)[0] == 200
    except (OSError, ValueError):
        return False


def show(host: NspawnHost, unit: str, prop: str) -> str:
    return host.run("systemctl", "show", "-p", prop, "--value", unit).stdout.strip()


def test_agent_unit_runs_is_restarted_after_kill_and_is_removed(
    nspawn_host: NspawnHost,  # noqa: F811
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

    wait_until(lambda: healthy(launch.health_url), "/health on the API port")
    assert get(launch.health_url)[1]["agent"] == "digest"
    status, body = get(f"{launch.bridge_url}/bridge/jobs/{uuid.uuid4()}")
    assert (status, body["code"]) == (404, "unknown_job")

    first_pid = show(nspawn_host, unit, "MainPID")
    assert first_pid != "0"
    assert nspawn_host.run("kill", "-9", first_pid).returncode == 0
    wait_until(
        lambda: show(nspawn_host, unit, "MainPID") not in ("0", first_pid),
        "systemd to restart the agent",
    )
    wait_until(lambda: healthy(launch.health_url), "/health after the restart")
    assert int(show(nspawn_host, unit, "NRestarts")) >= 1

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


def test_a_command_that_dies_at_once_fails_install_with_its_journal_and_leaves_nothing(
    nspawn_host: NspawnHost,  # noqa: F811
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


# Runs as the unit's process: reports what it received and what it can reach, then stays up.
PROBE = """
import json, os, sys, time
def can(action):
    try:
        action()
        return True
    except (OSError, ValueError):
        return False
report = {
    "argv": sys.argv[1:],
    "env": {k: os.environ.get(k) for k in ("NOTE", "SPACES", "TELEGRAM_BOT_TOKEN")},
    "cwd": os.getcwd(),
    "umask": os.umask(0o077),
    "read_secret": can(lambda: open("/var/lib/iris/secrets/store.json").read()),
    "secrets_listed": can(lambda: os.listdir("/var/lib/iris/secrets").index("store.json")),
    "write_home": can(lambda: open("written", "w").close()),
    "write_etc": can(lambda: open("/etc/iris-probe", "w").close()),
}
with open("probe.tmp", "w") as out:
    json.dump(report, out)
os.replace("probe.tmp", "probe.json")
time.sleep(3600)
"""

HOSTILE_ARGS = (
    "$HOME",
    "${HOME}",
    "100%",
    "%n",
    'a "quoted" word',
    "back\\slash",
    "it's",
    ";",
    "  spaced  ",
)


def test_hostile_values_reach_the_process_unchanged_and_the_parents_secrets_stay_hidden(
    nspawn_host: NspawnHost,  # noqa: F811
    service: SystemdService,
) -> None:
    secrets_dir = nspawn_host.path(SECRETS)
    secrets_dir.mkdir(parents=True, exist_ok=True)
    (secrets_dir / "store.json").write_text('{"ANTHROPIC-API-KEY": "sk-parent"}')
    home = AGENTS_DIR / "probe"
    launch = agent_launch(
        nspawn_host,
        "probe",
        command=(sys.executable, str(home / "probe.py"), *HOSTILE_ARGS),
        environment={
            "NOTE": 'say "hi" to $HOME, 50% off, ${X} \\o/',
            "SPACES": "  two  spaces  ",
            "TELEGRAM_BOT_TOKEN": "",
        },
    )
    nspawn_host.path(home / "probe.py").write_text(PROBE)
    service.install(launch, no_progress)
    report_file = nspawn_host.path(launch.home / "probe.json")
    wait_until(report_file.exists, "the probe's report")
    report = json.loads(report_file.read_text())

    assert report["argv"] == list(HOSTILE_ARGS)
    assert report["env"] == {
        "NOTE": 'say "hi" to $HOME, 50% off, ${X} \\o/',
        "SPACES": "  two  spaces  ",
        "TELEGRAM_BOT_TOKEN": "",
    }
    assert report["cwd"] == str(launch.home)
    assert report["umask"] == 0o077
    assert report["write_home"] is True
    assert report["write_etc"] is False
    assert report["read_secret"] is False
    assert report["secrets_listed"] is False  # empty or unreadable, even for root
    assert service.remove("probe", no_progress) is True


def test_a_command_missing_on_the_target_fails_enable_and_leaves_nothing(
    nspawn_host: NspawnHost,  # noqa: F811
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


def test_systemd_running_tells_a_booted_systemd_apart(nspawn_host: NspawnHost) -> None:  # noqa: F811
    probe = "from iris_runtime.provision.systemd import systemd_running; print(systemd_running())"
    inside = nspawn_host.run(sys.executable, "-c", probe)
    assert inside.stdout.strip() == "True", inside.stderr
