"""``iris agents spawn`` on a host where systemd is PID 1 (a booted nspawn container): Iris runs
there as a service, spawn picks systemd by itself, and the new agent's unit answers ``@name``,
reads its skill's secret on first use, and is removed without a trace."""

from __future__ import annotations

import hashlib
import json
import random
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from iris_runtime.agents.ports import can_bind
from tests.provisioning.nspawn import REPO_ROOT, NspawnHost, nspawn_host  # noqa: F401 (fixture)
from tests.provisioning.rootfs import debian_rootfs  # noqa: F401 (fixture)
from tests.provisioning.waiting import wait_for
from tests.sandbox.support import PROBE_COMMAND

# The first test to need the Debian rootfs builds it (debootstrap, about a minute).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DATA = Path("/var/lib/iris")  # inside the container
TEST_DIR = Path("/var/lib/iris-test")
SECRET_VALUE = "digest-" + secrets.token_hex(16)
SKILL_MD = """---
name: digest-feeds
description: Summarise the feeds.
secrets: [DIGEST_KEY]
---
Use `get-secret DIGEST_KEY`.
"""
# Appended to the probe's report: whether the command may make a user namespace of its own.
USERNS_CHECK = "\nif unshare -U true 2>/dev/null; then echo userns=yes; else echo userns=no; fi\n"
RULES = [
    {
        "when": "read your secret",
        "turns": [
            [
                {
                    "tool": "bash",
                    "args": {
                        "command": "get-secret --no-newline DIGEST_KEY | sha256sum | "
                        "cut -d' ' -f1 > secret.sha; get-secret OTHER_KEY >/dev/null 2>&1; "
                        "echo $? > other.rc"
                    },
                }
            ],
            [{"text": "done reading"}],
        ],
    },
    {
        "when": "show your box",
        "turns": [
            [{"tool": "bash", "args": {"command": f"DATA={DATA}\n{PROBE_COMMAND}{USERNS_CHECK}"}}],
            [{"text": "boxed"}],
        ],
    },
]


class ContainerIris:
    """Iris running as a transient systemd service inside the container."""

    def __init__(self, host: NspawnHost) -> None:
        self.host = host
        first = random.randrange(31000, 39000, 100)
        self.port = next(p for p in range(first, first + 100) if can_bind(p))
        self.token = secrets.token_urlsafe(24)
        self.env = {
            "IRIS_DATA_DIR": str(DATA),
            "IRIS_API_PORT": str(self.port),
            "IRIS_API_TOKEN_FILE": str(TEST_DIR / "iris-token"),
            "IRIS_REPO_DIR": str(REPO_ROOT),
            "IRIS_PROVIDER": "scripted",
            "IRIS_SCRIPT_FILE": str(TEST_DIR / "script.json"),
            "IRIS_AGENT_PORTS": f"{first + 200}-{first + 249}"
            if first + 349 < 65535
            else "4000-4049",
            "TELEGRAM_BOT_TOKEN": "123456:parent-telegram-" + secrets.token_hex(6),
        }

    def start(self) -> None:
        test_dir = self.host.path(TEST_DIR)
        test_dir.mkdir(parents=True, exist_ok=True)
        (test_dir / "iris-token").write_text(self.token + "\n")
        (test_dir / "iris-token").chmod(0o600)
        (test_dir / "script.json").write_text(json.dumps({"rules": RULES}))
        skill = self.host.path(DATA / "skills" / "digest-feeds")
        skill.mkdir(parents=True, exist_ok=True)
        (skill / "SKILL.md").write_text(SKILL_MD)
        properties = [f"--setenv={k}={v}" for k, v in self.env.items() if k != "TELEGRAM_BOT_TOKEN"]
        # The platform token goes in through a file-less path: systemd-run copies the caller's
        # environment variable, so it never appears in an argv.
        done = self.host.run(
            "systemd-run",
            "--unit=iris-main",
            "--collect",
            *properties,
            "--setenv=TELEGRAM_BOT_TOKEN",
            sys.executable,
            "-m",
            "iris_runtime",
            "serve",
            env={"TELEGRAM_BOT_TOKEN": self.env["TELEGRAM_BOT_TOKEN"]},
        )
        assert done.returncode == 0, done.stderr
        wait_for(self.healthy, "Iris inside the container", timeout=60)

    def healthy(self) -> bool:
        try:
            return requests.get(f"{self.url}/health", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cli(self, *args: str, stdin: str | None = None) -> Any:
        return self.host.run(
            sys.executable, "-m", "iris_runtime", *args, env=self.env, input=stdin, timeout=180
        )

    def message(self, session: str, text: str) -> dict[str, Any]:
        reply = requests.post(
            f"{self.url}/sessions/{session}/message",
            json={"text": text},
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=120,
        )
        assert reply.status_code == 200, reply.text
        body: dict[str, Any] = reply.json()
        return body

    def stop(self) -> None:
        self.host.run("systemctl", "stop", "iris-main")


@pytest.fixture
def iris(nspawn_host: NspawnHost) -> Iterator[ContainerIris]:  # noqa: F811
    server = ContainerIris(nspawn_host)
    server.start()
    yield server
    for unit in nspawn_host.path("/etc/systemd/system").glob("iris-agent-*.service"):
        name = unit.name.removeprefix("iris-agent-").removesuffix(".service")
        server.cli("agents", "remove", name, "--purge")
    server.stop()


def test_spawn_under_systemd_answers_reads_its_secret_and_is_removed(
    iris: ContainerIris,
    nspawn_host: NspawnHost,  # noqa: F811
) -> None:
    for name, value in (("DIGEST_KEY", SECRET_VALUE), ("OTHER_KEY", "other")):
        assert iris.cli("secrets", "set", name, stdin=value).returncode == 0

    done = iris.cli(
        "agents", "spawn", "digest", "--skill", "digest-feeds", "--skill", "get-secret", "--json"
    )
    assert done.returncode == 0, done.stderr
    agent = json.loads(done.stdout)
    assert agent["manager"] == "systemd"  # chosen by itself: systemd is PID 1 here
    assert agent["secrets"] == ["DIGEST_KEY"]

    unit = "iris-agent-digest.service"
    text = nspawn_host.path(f"/etc/systemd/system/{unit}").read_text()
    assert "EnvironmentFile" not in text
    assert "Environment=TELEGRAM_BOT_TOKEN=" in text or 'Environment="TELEGRAM_BOT_TOKEN="' in text
    home = nspawn_host.path(agent["home"])
    token = (home / "api-token").read_text().strip()
    for value in (token, iris.token, iris.env["TELEGRAM_BOT_TOKEN"], SECRET_VALUE):
        assert value not in text
    state = nspawn_host.run("systemctl", "is-active", unit).stdout.strip()
    assert state == "active"
    # It runs as the unprivileged agent user, with no capabilities.
    pid = nspawn_host.run("systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip()
    status = nspawn_host.run("cat", f"/proc/{pid}/status").stdout
    uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
    user = nspawn_host.run("id", "-u", "iris-agent-digest").stdout.strip()  # its own user
    assert uid == user != "0"
    assert "CapEff:\t0000000000000000" in status

    reply = iris.message("s1", "@digest read your secret")
    assert reply["text"] == "done reading"
    assert (home / "secret.sha").read_text().strip() == hashlib.sha256(
        SECRET_VALUE.encode()
    ).hexdigest()
    assert (home / "other.rc").read_text().strip() == "3"

    done = iris.cli("agents", "remove", "digest")
    assert done.returncode == 0, done.stderr
    assert not nspawn_host.path(f"/etc/systemd/system/{unit}").exists()
    status = nspawn_host.run("systemctl", "status", unit)
    assert status.returncode == 4  # no such unit
    registry = json.loads(nspawn_host.path(DATA / "agents.json").read_text())
    assert "digest" not in registry
    assert can_bind(agent["api_port"]) and can_bind(agent["api_port"] - 100)


def test_a_systemd_agent_runs_its_commands_in_bubblewrap(
    iris: ContainerIris,
    nspawn_host: NspawnHost,  # noqa: F811
) -> None:
    """--sandbox namespace under systemd: the hardened unit lets bubblewrap make its namespaces,
    and the agent's commands see the sandbox, not the agent's host."""
    done = iris.cli("agents", "spawn", "boxed", "--sandbox", "namespace", "--json")
    assert done.returncode == 0, done.stderr
    agent = json.loads(done.stdout)
    assert agent["manager"] == "systemd"
    unit = nspawn_host.path("/etc/systemd/system/iris-agent-boxed.service").read_text()
    assert "RestrictNamespaces=user pid ipc uts net mnt cgroup" in unit
    assert "NoNewPrivileges=yes" in unit and "CapabilityBoundingSet=\n" in unit
    assert 'Environment="IRIS_SANDBOX=namespace"' in unit

    assert iris.message("s2", "@boxed show your box")["text"] == "boxed"
    home = nspawn_host.path(agent["home"])
    lines = (home / "work" / "report.txt").read_text().splitlines()
    report = dict(line.split("=", 1) for line in lines if "=" in line)
    assert report["uid"] == "10000"
    assert report["pwd"] == "/workspace"
    assert report["links"] == "lo,"  # no network: namespace without :net
    assert report["hostname"] == "sandbox"
    assert report["write_usr"] == "refused"
    assert report["read_token"] == "refused"  # Iris's data dir is not even there
    assert report["data_visible"] == "no"
    assert report["read_shadow"] == "refused"
    assert report["userns"] == "no"  # the unit allows namespaces for bwrap, not the command
    assert iris.cli("agents", "remove", "boxed").returncode == 0


@pytest.mark.parametrize("level", ["gvisor", "firecracker:net", "docker:box"])
def test_a_systemd_agent_refuses_levels_that_need_root(
    iris: ContainerIris,
    nspawn_host: NspawnHost,  # noqa: F811
    level: str,
) -> None:
    done = iris.cli("agents", "spawn", "rooted", "--sandbox", level)
    assert done.returncode != 0
    assert f"--sandbox {level}: " in done.stderr
    assert "a systemd agent" in done.stderr
    assert not nspawn_host.path("/etc/systemd/system/iris-agent-rooted.service").exists()
    registry = nspawn_host.path(DATA / "agents.json")
    assert not registry.exists() or "rooted" not in json.loads(registry.read_text())
    # The declaration the Ansible role sends is refused alike, check mode included.
    check = iris.cli("agents", "ensure", "rooted", "--sandbox", level, "--check")
    assert check.returncode != 0 and f"--sandbox {level}: " in check.stderr


def _uid_of(host: NspawnHost, unit: str) -> str:
    pid = host.run("systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip()
    status = host.run("cat", f"/proc/{pid}/status").stdout
    return next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))


def test_each_systemd_agent_has_a_user_of_its_own(
    iris: ContainerIris,
    nspawn_host: NspawnHost,  # noqa: F811
) -> None:
    homes = {}
    for name in ("alpha", "beta"):
        done = iris.cli("agents", "spawn", name, "--json")
        assert done.returncode == 0, done.stderr
        homes[name] = json.loads(done.stdout)["home"]
    uids = {name: _uid_of(nspawn_host, f"iris-agent-{name}.service") for name in homes}
    assert uids["alpha"] != uids["beta"] and "0" not in uids.values()
    for name, uid in uids.items():
        assert nspawn_host.run("id", "-u", f"iris-agent-{name}").stdout.strip() == uid
        owner = nspawn_host.run("stat", "-c", "%u", homes[name]).stdout.strip()
        assert owner == uid
        comment = nspawn_host.run("getent", "passwd", f"iris-agent-{name}").stdout.split(":")[4]
        assert comment == f"Iris sub-agent {name}"
    # Even where a mode bit is wrong, alpha's uid cannot read beta's files.
    nspawn_host.run("chmod", "0644", f"{homes['beta']}/api-token")
    gid = nspawn_host.run("id", "-g", "iris-agent-alpha").stdout.strip()
    read = nspawn_host.run(
        "setpriv",
        f"--reuid={uids['alpha']}",
        f"--regid={gid}",
        "--clear-groups",
        "cat",
        f"{homes['beta']}/api-token",
    )
    assert read.returncode != 0 and "Permission denied" in read.stderr
    for name in homes:
        assert iris.cli("agents", "remove", name).returncode == 0


def test_a_user_that_is_not_the_agents_is_never_taken_over(
    iris: ContainerIris,
    nspawn_host: NspawnHost,  # noqa: F811
) -> None:
    made = nspawn_host.run("useradd", "--system", "--comment", "an operator", "iris-agent-taken")
    assert made.returncode == 0, made.stderr
    try:
        done = iris.cli("agents", "spawn", "taken")
        assert done.returncode != 0
        assert "the user 'iris-agent-taken' exists but is not agent 'taken''s" in done.stderr
        assert not nspawn_host.path("/etc/systemd/system/iris-agent-taken.service").exists()
    finally:
        nspawn_host.run("userdel", "iris-agent-taken")


def test_an_agent_of_the_shared_user_moves_to_its_own_in_place(
    iris: ContainerIris,
    nspawn_host: NspawnHost,  # noqa: F811
) -> None:
    """Agents made by earlier versions ran as one shared ``iris-agent``: ``ensure`` (the
    Ansible role's command) moves each to its own user, keeping its home and memory."""
    done = iris.cli("agents", "spawn", "legacy", "--json")
    assert done.returncode == 0, done.stderr
    home = json.loads(done.stdout)["home"]
    unit = nspawn_host.path("/etc/systemd/system/iris-agent-legacy.service")
    nspawn_host.run("useradd", "--system", "--user-group", "iris-agent")
    unit.write_text(unit.read_text().replace("User=iris-agent-legacy", "User=iris-agent"))
    nspawn_host.run("chown", "-R", "iris-agent:", home)
    nspawn_host.path(home).joinpath("MEMORY.md").write_text("the tide turns at six\n")
    nspawn_host.run("systemctl", "daemon-reload")
    nspawn_host.run("systemctl", "restart", "iris-agent-legacy.service")
    assert _uid_of(nspawn_host, "iris-agent-legacy.service") == (
        nspawn_host.run("id", "-u", "iris-agent").stdout.strip()
    )

    check = iris.cli("agents", "ensure", "legacy", "--check", "--json")
    plan = json.loads(check.stdout)
    assert plan["action"] == "updated", check.stdout + check.stderr
    assert "user: iris-agent -> iris-agent-legacy" in plan["differences"]
    applied = iris.cli("agents", "ensure", "legacy", "--json")
    assert applied.returncode == 0, applied.stderr
    own = nspawn_host.run("id", "-u", "iris-agent-legacy").stdout.strip()
    assert _uid_of(nspawn_host, "iris-agent-legacy.service") == own
    assert nspawn_host.run("stat", "-c", "%u", f"{home}/MEMORY.md").stdout.strip() == own
    assert "the tide turns at six" in nspawn_host.path(home).joinpath("MEMORY.md").read_text()
    again = iris.cli("agents", "ensure", "legacy", "--json")
    assert json.loads(again.stdout)["action"] == "unchanged"
    assert iris.cli("agents", "remove", "legacy").returncode == 0
