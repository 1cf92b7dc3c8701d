"""Service mode under a real systemd (PID 1 in a booted nspawn container): the real `iris serve`
sub-agent installed as a unit runs as the unprivileged agent user without capabilities, answers
/health and the bridge, is restarted by systemd after `kill -9`, and is removed without a trace
(the shared agent user stays); a command that dies at once fails install with its journal;
hostile values reach the process exactly as given; the agent sees nothing of Iris's data dir or
its siblings but its own home, even after Iris replaces agents.json atomically."""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
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
from iris_runtime.provision.systemd import DEFAULT_AGENT_USER, SystemdService
from tests.provisioning.nspawn import NspawnHost, nspawn_host  # noqa: F401 (fixture)
from tests.provisioning.rootfs import debian_rootfs  # noqa: F401 (fixture)

# The first test's setup may include building the shared rootfs (debootstrap, a minute or more
# on a busy machine); the default per-test timeout is too short for that.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
UNIT_DIR = "/etc/systemd/system"
DATA = Path("/var/lib/iris")  # Iris's data dir inside the container, hidden from agents
AGENTS_DIR = DATA / "agents"
SECRETS = DATA / "secrets"  # the parent's secret store
ENV_FILE = Path("/etc/iris/iris.env")  # a protected file outside the data dir
TOKEN = "tok-5b0e8d1f6a2c4e7f9d3b1a0c8e6f4d2b"


@pytest.fixture
def service(nspawn_host: NspawnHost) -> Iterator[SystemdService]:  # noqa: F811
    """SystemdService driving the container's systemd; removes what a test left installed."""
    systemd = SystemdService(
        REPO,
        nspawn_host.path(UNIT_DIR),
        nspawn_host.command("systemctl"),
        journalctl=nspawn_host.command("journalctl"),
        on_target=nspawn_host.command(),
        root=nspawn_host.root,
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
        # As spawn passes them: Iris's data dir and the agents dir whole, single files outside.
        "protected_paths": (DATA, AGENTS_DIR, ENV_FILE),
    }
    values.update(changes)
    return AgentLaunch(**values)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.1)


def get(url: str, token: str | None = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
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


def agent_ids(host: NspawnHost, name: str = "digest") -> tuple[int, int]:
    """The uid and gid of the agent's own user inside the container."""
    user = f"{DEFAULT_AGENT_USER}-{name}"
    entry = host.run("getent", "passwd", user, check=True).stdout.split(":")
    return int(entry[2]), int(entry[3])


def process_status(host: NspawnHost, pid: str) -> dict[str, str]:
    text = host.run("cat", f"/proc/{pid}/status", check=True).stdout
    return {k: v.strip() for k, v in (line.split(":", 1) for line in text.splitlines())}


def replace_atomically(path: Path, text: str) -> None:
    """How Iris rewrites agents.json: a new file renamed over the old one."""
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(text)
    scratch.chmod(0o644)
    os.replace(scratch, path)


def read_as_agent(host: NspawnHost, pid: str, path: Path) -> subprocess.CompletedProcess[str]:
    """`cat path` as the agent user, in the mount namespace of the agent's process."""
    uid, gid = agent_ids(host)
    return host.run("nsenter", "-t", pid, "-m", "-S", str(uid), "-G", str(gid), "cat", str(path))


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


# Runs as the unit's process: reports what it received and what it can reach, over and over
# (round by round, so a test can change something outside and wait for a later report).
PROBE = """
import json, os, sys, time
def can(action):
    try:
        action()
        return True
    except (OSError, ValueError):
        return False
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return exc.strerror
def status(key):
    with open("/proc/self/status") as lines:
        return next(l.split(":", 1)[1].strip() for l in lines if l.startswith(key + ":"))
readable = json.loads(sys.argv[1])
writable = json.loads(sys.argv[2])
for round in range(1000000):
    report = {
        "round": round,
        "argv": sys.argv[3:],
        "env": {k: os.environ.get(k) for k in ("NOTE", "SPACES", "TELEGRAM_BOT_TOKEN")},
        "cwd": os.getcwd(),
        "umask": os.umask(0o077),
        "uid": os.getuid(),
        "cap_eff": status("CapEff"),
        "read": {path: can(lambda: open(path, "rb").read()) for path in readable},
        "write": {path: can(lambda: open(path, "w").close()) for path in writable},
        "listings": {path: listing(path) for path in ("/var/lib/iris", "/var/lib/iris/agents")},
        "sees_pid_1": os.path.exists("/proc/1"),
        "sees": {p.split("/")[2]: os.path.exists(p.rsplit("/", 1)[0]) for p in readable
                 if p.startswith("/proc/") and p.endswith("/environ")},
        "sees_meminfo": os.path.exists("/proc/meminfo"),
    }
    with open("probe.tmp", "w") as out:
        json.dump(report, out)
    os.replace("probe.tmp", "probe.json")
    time.sleep(0.1)
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


def install_probe(
    host: NspawnHost,
    service: SystemdService,
    name: str,
    readable: list[str],
    writable: list[str],
    args: tuple[str, ...] = (),
    environment: dict[str, str] | None = None,
) -> AgentLaunch:
    home = AGENTS_DIR / name
    launch = agent_launch(
        host,
        name,
        command=(
            sys.executable,
            str(home / "probe.py"),
            json.dumps(readable),
            json.dumps(writable),
            *args,
        ),
        environment=environment or {},
    )
    host.path(home / "probe.py").write_text(PROBE)  # root's file: install hands it over
    service.install(launch, no_progress)
    return launch


def probe_report(host: NspawnHost, launch: AgentLaunch, after: int = -1) -> dict[str, Any]:
    """The probe's first report from a round later than ``after``."""
    report_file = host.path(launch.home / "probe.json")
    reports: list[dict[str, Any]] = []

    def newer() -> bool:
        try:
            reports.append(json.loads(report_file.read_text()))
        except (OSError, ValueError):
            return False
        return int(reports[-1]["round"]) > after

    wait_until(newer, f"a probe report after round {after}")
    return reports[-1]


def test_hostile_values_reach_the_process_unchanged(
    nspawn_host: NspawnHost,  # noqa: F811
    service: SystemdService,
) -> None:
    environment = {
        "NOTE": 'say "hi" to $HOME, 50% off, ${X} \\o/',
        "SPACES": "  two  spaces  ",
        "TELEGRAM_BOT_TOKEN": "",
    }
    launch = install_probe(
        nspawn_host, service, "probe", [], [], args=HOSTILE_ARGS, environment=environment
    )
    report = probe_report(nspawn_host, launch)

    assert report["argv"] == list(HOSTILE_ARGS)
    assert report["env"] == environment
    assert report["cwd"] == str(launch.home)
    assert report["umask"] == 0o077
    assert service.remove("probe", no_progress) is True


def test_the_agent_sees_only_its_own_home_even_after_iris_rewrites_its_files(
    nspawn_host: NspawnHost,  # noqa: F811
    service: SystemdService,
) -> None:
    # Iris's files, world-readable on purpose: only the unit's isolation keeps them out of reach.
    parent_files = {
        SECRETS / "store.json": '{"ANTHROPIC-API-KEY": "sk-parent"}',
        DATA / "agents.json": '{"sibling": {}}',
        DATA / "state.db": "rows",
        DATA / "api-token": "iris-token",
        DATA / "terraform" / "terraform.tfstate": '{"docker-agent-token": "t"}',
        DATA / "conversations" / "s1.jsonl": "what the user said",
        AGENTS_DIR / "stopped" / "api-token": "stopped-agent-token",
        ENV_FILE: "TELEGRAM_BOT_TOKEN=123:parent",
    }
    for path, text in parent_files.items():
        on_host = nspawn_host.path(path)
        on_host.parent.mkdir(parents=True, exist_ok=True)
        on_host.write_text(text)
        on_host.chmod(0o644)
    # A running sibling, under a Unix user of its own: neither its process nor, through
    # /proc/PID/root, its home is reachable.
    sibling = install_probe(nspawn_host, service, "sibling", [], [])
    sibling_pid = show(nspawn_host, sibling.unit_name, "MainPID")
    through_sibling = [
        f"/proc/{sibling_pid}/root{sibling.home}/api-token",
        f"/proc/{sibling_pid}/environ",
        f"{sibling.home}/api-token",
    ]
    home = AGENTS_DIR / "probe"
    readable = [str(path) for path in parent_files] + through_sibling
    readable += [f"{home}/api-token", sys.executable]
    writable = [f"{home}/written", "/etc/iris-probe", f"{DATA}/planted", f"{AGENTS_DIR}/planted"]
    launch = install_probe(nspawn_host, service, "probe", readable, writable)
    uid, _ = agent_ids(nspawn_host, "probe")
    assert uid != agent_ids(nspawn_host, "sibling")[0]

    report = probe_report(nspawn_host, launch)
    assert report["uid"] == uid
    assert int(report["cap_eff"], 16) == 0
    assert report["read"] == {
        **{str(path): False for path in parent_files},
        **{path: False for path in through_sibling},
        f"{home}/api-token": True,
        sys.executable: True,
    }
    assert report["write"] == {path: path == f"{home}/written" for path in writable}
    # Nothing of Iris's data dir but the way to the agent's own home.
    assert report["listings"] == {str(DATA): ["agents"], str(AGENTS_DIR): ["probe"]}
    assert report["sees_pid_1"] is False  # root's processes (Iris's) are invisible
    assert report["sees"] == {sibling_pid: False}  # and so are its siblings'
    assert report["sees_meminfo"] is False

    # Iris replaces its registry and adds files while the agent runs: still out of reach.
    replace_atomically(nspawn_host.path(DATA / "agents.json"), '{"probe": {}, "sibling": {}}')
    nspawn_host.path(DATA / "secrets" / "later.json").write_text("{}")
    later = probe_report(nspawn_host, launch, after=report["round"])
    assert not any(later["read"][str(path)] for path in parent_files)
    assert later["listings"] == report["listings"]
    assert service.remove("probe", no_progress) is True
    assert service.remove("sibling", no_progress) is True


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
