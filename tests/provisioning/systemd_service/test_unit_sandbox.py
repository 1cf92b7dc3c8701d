"""What the unit's process gets and reaches: hostile argv and environment values exactly as
given, and nothing of Iris's data dir or its siblings but its own home, even after Iris
rewrites its files."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from iris_runtime.provision.launch import AgentLaunch, no_progress
from iris_runtime.provision.systemd import SystemdService
from tests.provisioning.nspawn import NspawnHost
from tests.provisioning.systemd_units import (
    AGENTS_DIR,
    DATA,
    ENV_FILE,
    SECRETS,
    agent_ids,
    agent_launch,
    replace_atomically,
    show,
    wait_until,
)

# The first test's setup may include building the shared rootfs (debootstrap, a minute or more
# on a busy machine); the default per-test timeout is too short for that.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


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
    nspawn_host: NspawnHost,
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
    nspawn_host: NspawnHost,
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
