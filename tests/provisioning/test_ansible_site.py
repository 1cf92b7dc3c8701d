"""playbooks/site.yml converged on a bare Debian bookworm server (systemd as PID 1 in an nspawn
container, reached with the nsenter connection, changes kept on an overlay across reboots).

One converge per module; the tests then look at the result in order: OpenBao initialised,
unsealed and serving; iris.service healthy; a declared sub-agent running, registered, answering
through the bridge, reading the secret its skill declares through the broker and refused another;
a second run and a check-mode run change nothing; ``state: absent`` removes the agent; a reboot
brings OpenBao back unsealed (auto_unseal, as the test inventory sets it) and Iris healthy.

Everything the roles install comes from the session wheelhouse (no package index) and the
controller's checkout; the LLM is the ``scripted`` provider. Ports are picked free on loopback:
the container shares the host's network.
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from iris_runtime.agents.ports import can_bind
from iris_runtime.testing.leaks import (
    Allowance,
    CommandLineSampler,
    Leak,
    find_canaries,
    private_file,
    scan_files,
    under,
)
from tests.provisioning.ansible_host import (  # noqa: F401 (fixture)
    AnsibleHost,
    AnsibleRun,
    ansible_nspawn_host,
    snapshot_checkout,
)
from tests.provisioning.rootfs import debian_rootfs  # noqa: F401 (fixture)
from tests.provisioning.wheelhouse import iris_wheelhouse  # noqa: F401 (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

AGENT = "weather"
BOXED = "boxed"  # an agent whose tools run at the namespace level (bubblewrap)
SKILL = "weather-report"
ALLOWED_SECRET = "WEATHER_API_KEY"
OTHER_SECRET = "BILLING_API_KEY"
DATA = Path("/iris/data")  # the role's default data dir, inside the container
SCRIPT = Path("/etc/iris-test/script.json")  # readable by Iris and by the agent user
SKILL_MD = f"""---
name: {SKILL}
description: Report the weather from the weather service.
secrets: [{ALLOWED_SECRET}]
---
Use `get-secret {ALLOWED_SECRET}` for the weather service's key.
"""
# The agent's scripted model runs get-secret for its own secret and for one it was not given.
RULES = [
    {
        "when": "read your secrets",
        "turns": [
            [
                {
                    "tool": "bash",
                    "args": {
                        "command": f"get-secret --no-newline {ALLOWED_SECRET} | sha256sum | "
                        f"cut -d' ' -f1 > secret.sha; get-secret {OTHER_SECRET} >/dev/null 2>&1; "
                        "echo $? > other.rc"
                    },
                }
            ],
            [{"text": "done reading"}],
        ],
    },
    # Iris's own model, told to spawn or remove an agent, does what the spawn-agent skill says.
    {
        "when": "spawn chatty",
        "turns": [
            [
                {
                    "tool": "bash",
                    "args": {
                        "command": 'cd "${IRIS_REPO_DIR:-/iris/repo}" && iris agents spawn chatty '
                        "--json > $OLDPWD/spawn.json 2> $OLDPWD/spawn.err; "
                        "echo $? > $OLDPWD/spawn.rc",
                        "timeout": 240,
                    },
                }
            ],
            [{"text": "spawned chatty"}],
        ],
    },
    {
        "when": "remove chatty",
        "turns": [
            [
                {
                    "tool": "bash",
                    "args": {
                        "command": "iris agents remove chatty > remove.out 2>&1; "
                        "echo $? > remove.rc"
                    },
                }
            ],
            [{"text": "removed chatty"}],
        ],
    },
    {
        "when": "where are you",
        "turns": [
            [{"tool": "bash", "args": {"command": "id -u > uid.txt; hostname > host.txt"}}],
            [{"text": "in my box"}],
        ],
    },
]


def wait_for(check: Callable[[], Any], what: str, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def free_ports() -> dict[str, Any]:
    """OpenBao's two ports, Iris's API port and ten agent bridge ports (+100 for their APIs),
    all free on loopback now."""
    for _ in range(200):
        base = random.randrange(20000, 30000, 200)
        agent_ports = list(range(base + 10, base + 20))
        wanted = [base, base + 1, base + 2, *agent_ports, *(p + 100 for p in agent_ports)]
        if all(can_bind(port) for port in wanted):
            return {
                "bao": base,
                "bao_cluster": base + 1,
                "api": base + 2,
                "agents": f"{agent_ports[0]}-{agent_ports[-1]}",
            }
    raise RuntimeError("no free block of ports on loopback")


@dataclass
class Site:
    server: AnsibleHost
    first: AnsibleRun
    ports: dict[str, Any]
    values: dict[str, str]
    init_file: Path
    commands: CommandLineSampler  # every process's command line while the module runs

    @property
    def name(self) -> str:
        return self.server.name

    def run(self, *argv: str, timeout: float = 60.0) -> str:
        done = self.server.host.run(*argv, timeout=timeout)
        assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
        return done.stdout

    def path(self, inside: str | Path) -> Path:
        return self.server.host.path(inside)

    @property
    def iris_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['api']}"

    @property
    def bao_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['bao']}"

    def api_token(self) -> str:
        return self.path("/iris/secrets/api-token").read_text().strip()

    def healthy(self) -> bool:
        try:
            return requests.get(f"{self.iris_url}/health", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def seal_status(self) -> dict[str, Any] | None:
        try:
            reply = requests.get(f"{self.bao_url}/v1/sys/seal-status", timeout=2)
        except requests.RequestException:
            return None
        status: dict[str, Any] = reply.json()
        return status

    def unit_state(self, unit: str) -> str:
        done = self.server.host.run("systemctl", "is-active", unit)
        return done.stdout.strip()

    def registry(self) -> dict[str, Any]:
        registry: dict[str, Any] = json.loads(self.path(DATA / "agents.json").read_text())
        return registry

    def audit(self) -> list[dict[str, Any]]:
        path = self.path(DATA / "audit" / "secrets.jsonl")
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def seed_host(server: AnsibleHost) -> None:
    """What the operator brings besides the inventory: a workspace skill that declares one
    secret (Iris's own skills live in its data dir), and the scripted model's rules."""
    host = server.host
    skill = host.path(DATA / "skills" / SKILL)
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL_MD)
    script = host.path(SCRIPT)
    script.parent.mkdir(parents=True)
    script.write_text(json.dumps({"rules": RULES}))
    script.chmod(0o644)


@pytest.fixture(scope="module")
def site(
    ansible_nspawn_host: AnsibleHost,  # noqa: F811
    iris_wheelhouse: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Site]:
    server = ansible_nspawn_host
    controller = tmp_path_factory.mktemp("controller")
    controller.chmod(0o700)
    init_file = controller / "openbao-init.json"
    ports = free_ports()
    values = {
        ALLOWED_SECRET: "weather-" + secrets.token_hex(12),
        OTHER_SECRET: "billing-" + secrets.token_hex(12),
        # A platform token Iris gets in its env file; sub-agents must not inherit it.
        "TELEGRAM_BOT_TOKEN": "123456:parent-" + secrets.token_hex(8),
    }
    server.set_vars(
        iris_secrets_init_file=str(init_file),
        iris_secrets_wheelhouse=str(iris_wheelhouse),
        iris_secrets_port=ports["bao"],
        iris_secrets_cluster_port=ports["bao_cluster"],
        iris_secrets_auto_unseal=True,
        iris_secrets_values=values,
        iris_runtime_wheelhouse=str(iris_wheelhouse),
        iris_runtime_source_dir=str(snapshot_checkout(controller / "checkout")),
        # No transports: nothing may try to reach Telegram or Slack from here.
        iris_runtime_plugins=["iris-skill-get-secret", "iris-skill-spawn-agent"],
        iris_runtime_api_port=ports["api"],
        iris_runtime_agent_ports=ports["agents"],
        iris_runtime_provider="scripted",
        iris_runtime_env={"IRIS_SCRIPT_FILE": str(SCRIPT)},
        iris_runtime_env_secrets=["TELEGRAM_BOT_TOKEN"],
        iris_agent_agents=[
            {"name": AGENT, "skills": [SKILL, "get-secret"]},
            {"name": BOXED, "sandbox": "namespace"},
        ],
    )
    seed_host(server)
    with CommandLineSampler() as commands:
        first = server.playbook("playbooks/site.yml", label="converge")
        yield Site(server, first, ports, values, init_file, commands)


def ask_iris(site: Site, session: str, text: str) -> str:
    reply = requests.post(
        f"{site.iris_url}/sessions/{session}/message",
        json={"text": text},
        headers={"Authorization": f"Bearer {site.api_token()}"},
        timeout=300,
    )
    assert reply.status_code == 200, reply.text
    answer: str = reply.json()["text"]
    return answer


def assert_ok(run: AnsibleRun, site: Site) -> None:
    recap = run.recap.get(site.name)
    assert run.returncode == 0 and recap is not None and recap.failed == 0, run.describe()


def test_site_converges(site: Site) -> None:
    assert_ok(site.first, site)
    assert site.first.recap[site.name].changed > 0
    print(f"\nfirst converge: {site.first.seconds:.1f} s")


def test_openbao_is_initialised_unsealed_and_serving(site: Site) -> None:
    assert_ok(site.first, site)
    status = site.seal_status()
    assert status is not None
    assert status["initialized"] is True and status["sealed"] is False, status
    assert site.unit_state("openbao.service") == "active"
    # The init output went to the controller, private.
    assert stat.S_IMODE(site.init_file.stat().st_mode) == 0o600
    init = json.loads(site.init_file.read_text())
    token = init["root_token"]
    # The seeded secrets are in KV v2 where Iris's vault backend reads them.
    reply = requests.get(
        f"{site.bao_url}/v1/secret/data/iris/{ALLOWED_SECRET}",
        headers={"X-Vault-Token": token},
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["data"]["data"] == {"value": site.values[ALLOWED_SECRET]}


def test_iris_service_is_active_and_healthy(site: Site) -> None:
    assert_ok(site.first, site)
    assert site.unit_state("iris.service") == "active"
    # /health inside the container, and from here (the container shares the host's network).
    inside = site.run(
        "python3",
        "-c",
        "import sys, urllib.request; "
        f"print(urllib.request.urlopen('{site.iris_url}/health', timeout=5).status)",
    )
    assert inside.strip() == "200"
    assert site.healthy()
    env_file = site.path("/iris/.env")
    mode = env_file.stat()
    assert stat.S_IMODE(mode.st_mode) == 0o600
    assert site.run("stat", "-c", "%U", "/iris/.env").strip() == "iris"
    main_pid = site.run("systemctl", "show", "-p", "MainPID", "--value", "iris.service").strip()
    assert site.run("ps", "-o", "user=", "-p", main_pid).strip() == "iris"


def test_declared_agent_runs_is_registered_and_answers(site: Site) -> None:
    assert_ok(site.first, site)
    unit = f"iris-agent-{AGENT}.service"
    assert site.unit_state(unit) == "active"
    entry = site.registry()[AGENT]
    assert entry["secrets"] == [ALLOWED_SECRET]
    text = site.path(f"/etc/systemd/system/{unit}").read_text()
    assert "EnvironmentFile" not in text
    # Platform tokens are blanked, never inherited; no secret value or token is in the unit.
    assert "TELEGRAM_BOT_TOKEN=" in text
    for value in (*site.values.values(), site.api_token()):
        assert value not in text
    assert ask_iris(site, "site-test", f"@{AGENT} read your secrets") == "done reading"


def test_an_agent_declared_at_the_namespace_level_runs_its_commands_there(site: Site) -> None:
    assert_ok(site.first, site)
    unit = f"iris-agent-{BOXED}.service"
    assert site.unit_state(unit) == "active"
    text = site.path(f"/etc/systemd/system/{unit}").read_text()
    assert 'Environment="IRIS_SANDBOX=namespace"' in text
    assert "RestrictNamespaces=user pid ipc uts net mnt cgroup" in text
    assert ask_iris(site, "site-box", f"@{BOXED} where are you") == "in my box"
    work = site.path(site.registry()[BOXED].get("home") or f"/iris/agents/{BOXED}") / "work"
    assert (work / "uid.txt").read_text().strip() == "10000"
    assert (work / "host.txt").read_text().strip() == "sandbox"


def as_iris(site: Site, *argv: str) -> Any:
    """``argv`` as iris.service's user, the way its bash tool runs it."""
    return site.server.host.run("setpriv", "--reuid=iris", "--regid=iris", "--init-groups", *argv)


def test_an_agent_spawned_from_chat_becomes_a_systemd_unit_and_goes_again(site: Site) -> None:
    """iris.service is unprivileged: the spawn-agent skill's `iris agents spawn` reaches the
    root-owned agent-unit helper through polkit, and the agent runs as its own hardened unit."""
    assert_ok(site.first, site)
    assert ask_iris(site, "chat-spawn", "spawn chatty") == "spawned chatty"
    data = site.path(DATA)
    rc = (data / "spawn.rc").read_text().strip()
    assert rc == "0", (data / "spawn.err").read_text()
    assert "asking the agent-unit helper" in (data / "spawn.err").read_text()
    agent = json.loads((data / "spawn.json").read_text())
    assert agent["manager"] == "systemd"
    assert site.unit_state("iris-agent-chatty.service") == "active"
    pid = site.run("systemctl", "show", "-p", "MainPID", "--value", "iris-agent-chatty.service")
    assert site.run("ps", "-o", "user=", "-p", pid.strip()).strip() == "iris-agent-chatty"
    assert ask_iris(site, "chat-box", "@chatty where are you") == "in my box"
    journal = site.run("journalctl", "-u", "iris-agent-install@chatty.service", "--no-pager")
    assert "iris-agent-unit install chatty: done" in journal  # audited, out of Iris's reach
    # Stopped, it is started again by Iris's user the way `ensure` does: through the helper.
    site.run("systemctl", "stop", "iris-agent-chatty.service")
    started = as_iris(site, "/iris/venv/bin/iris", "--env-file", "/iris/.env", "agents", "ensure",
                      "chatty", "--json")  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["action"] == "started"
    assert "iris-agent-start@chatty.service" in started.stderr
    assert site.unit_state("iris-agent-chatty.service") == "active"

    assert ask_iris(site, "chat-spawn", "remove chatty") == "removed chatty"
    assert (data / "remove.rc").read_text().strip() == "0", (data / "remove.out").read_text()
    assert not site.path("/etc/systemd/system/iris-agent-chatty.service").exists()
    assert "chatty" not in site.registry()
    assert any(p.name.startswith("chatty-") for p in site.path("/iris/agents/.removed").iterdir())


def test_the_privilege_path_grants_nothing_else(site: Site) -> None:
    assert_ok(site.first, site)
    # Other units, and other verbs on the agents' units, are refused by polkit.
    for argv in (
        ("systemctl", "stop", "openbao.service"),
        ("systemctl", "restart", "iris.service"),
        ("systemctl", "mask", f"iris-agent-{AGENT}.service"),
        ("systemctl", "stop", f"iris-agent-{AGENT}.service"),  # only through the helper
        ("systemctl", "start", "iris-agent-install@x.service", "openbao.service"),
        ("systemd-run", "--unit=iris-agent-pwn", "-p", "User=root", "/bin/true"),
    ):
        done = as_iris(site, *argv)
        assert done.returncode != 0, argv
    assert site.unit_state("openbao.service") == "active"
    assert site.unit_state(f"iris-agent-{AGENT}.service") == "active"
    assert not site.path("/run/systemd/transient/iris-agent-pwn.service").exists()
    # A record and a home Iris's user controls cannot point root anywhere: a home that is a
    # link to /etc is refused, and nothing is written or handed over.
    agents = site.path("/iris/agents")
    record = json.loads((agents / ".records" / f"{AGENT}.json").read_text())
    record["name"] = "evil"
    as_iris(site, "ln", "-s", "/etc", "/iris/agents/evil")
    as_iris(site, "sh", "-c", f"echo '{json.dumps(record)}' > /iris/agents/.records/evil.json")
    try:
        done = as_iris(site, "systemctl", "start", "iris-agent-install@evil.service")
        assert done.returncode != 0
        outcome = json.loads(site.path("/run/iris-agent-units/install-evil.json").read_text())
        assert outcome["ok"] is False
        assert "is not a folder of the agents dir" in outcome["message"]
        assert not site.path("/etc/systemd/system/iris-agent-evil.service").exists()
        assert site.run("stat", "-c", "%U", "/etc").strip() == "root"
    finally:
        site.run("rm", "-f", "/iris/agents/evil", "/iris/agents/.records/evil.json")


def test_agent_reads_its_secret_through_the_broker_and_is_denied_another(site: Site) -> None:
    assert_ok(site.first, site)
    home = site.path(site.registry()[AGENT].get("home") or f"/iris/agents/{AGENT}")
    # (the previous test made the agent run get-secret twice)
    digest = hashlib.sha256(site.values[ALLOWED_SECRET].encode()).hexdigest()
    assert (home / "secret.sha").read_text().strip() == digest
    assert (home / "other.rc").read_text().strip() == "3"  # refused
    decisions = {(r["name"], r["decision"]) for r in site.audit() if r["caller"] == AGENT}
    assert (ALLOWED_SECRET, "allowed") in decisions
    assert (OTHER_SECRET, "denied") in decisions
    assert (OTHER_SECRET, "allowed") not in decisions


def test_second_run_changes_nothing(site: Site) -> None:
    assert_ok(site.first, site)
    again = site.server.playbook("playbooks/site.yml", label="idempotence")
    assert_ok(again, site)
    assert again.recap[site.name].changed == 0, again.describe()
    print(f"\nsecond converge: {again.seconds:.1f} s")


def test_check_mode_changes_nothing(site: Site) -> None:
    assert_ok(site.first, site)
    check = site.server.playbook("playbooks/site.yml", check=True, label="check")
    assert_ok(check, site)
    assert check.recap[site.name].changed == 0, check.describe()


def test_absent_agent_is_removed(site: Site) -> None:
    assert_ok(site.first, site)
    unit = f"iris-agent-{AGENT}.service"
    removed = site.server.playbook(
        "playbooks/agents.yml",
        extra_vars={"iris_agent_agents": [{"name": AGENT, "state": "absent"}]},
        label="absent",
    )
    assert_ok(removed, site)
    assert removed.recap[site.name].changed > 0, removed.describe()
    assert not site.path(f"/etc/systemd/system/{unit}").exists()
    assert AGENT not in site.registry()
    assert site.server.host.run("systemctl", "status", unit).returncode == 4  # no such unit
    again = site.server.playbook(
        "playbooks/agents.yml",
        extra_vars={"iris_agent_agents": [{"name": AGENT, "state": "absent"}]},
        label="absent-again",
    )
    assert_ok(again, site)
    assert again.recap[site.name].changed == 0, again.describe()


def test_reboot_brings_openbao_back_unsealed_and_iris_healthy(site: Site) -> None:
    assert_ok(site.first, site)
    site.server.host.restart()
    status = wait_for(
        lambda: (s := site.seal_status()) and not s.get("sealed", True) and s,
        "OpenBao unsealed after the reboot",
    )
    assert status["initialized"] is True
    wait_for(site.healthy, "Iris healthy after the reboot")
    assert site.unit_state("iris.service") == "active"
    # Iris logs in to OpenBao again: a secret read through its store works.
    done = site.server.host.run(
        "/iris/venv/bin/iris", "--env-file", "/iris/.env", "secrets", "ls", timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert ALLOWED_SECRET in done.stdout


# Where the roles and the services write on the host. /usr is the distribution's (but for
# /usr/local, where the roles install programs), and the store's own data (OpenBao's raft folder)
# is where the secrets belong.
WRITTEN = ("/iris", "/etc", "/var", "/run", "/tmp", "/root", "/home", "/srv", "/opt", "/usr/local")


def host_token_files(canaries: dict[str, str]) -> list[Allowance]:
    """The files that exist to hold a credential, readable by their owner only, each allowed
    the credentials it is for: an API token file its runtime's token (Iris's, or an agent's in
    the agent's home), Iris's env file its platform token, the registry the agents' tokens,
    OpenBao's unseal file (auto_unseal) its keys."""
    agents = [label for label in canaries if label.startswith("agent ")]
    unseal = [label for label in canaries if label.startswith("OpenBao unseal key")]
    return [
        private_file(["api-token"], ["Iris's API token", *agents]),
        private_file([".env"], ["the stored secret TELEGRAM_BOT_TOKEN"]),
        private_file(["agents.json"], agents),
        private_file(["unseal-keys.json"], unseal),
    ]


def planted_canaries(site: Site) -> dict[str, str]:
    init = json.loads(site.init_file.read_text())
    canaries = {f"the stored secret {name}": value for name, value in site.values.items()}
    canaries["Iris's API token"] = site.api_token()
    canaries["OpenBao's root token"] = init["root_token"]
    for number, key in enumerate(init["keys"] + init["keys_base64"]):
        canaries[f"OpenBao unseal key {number}"] = key
    for name, entry in site.registry().items():
        if entry.get("token"):
            canaries[f"agent {name}'s token"] = entry["token"]
    return canaries


def host_leaks(site: Site, canaries: dict[str, str]) -> list[Leak]:
    allowed = [*host_token_files(canaries), under(site.path("/var/lib/openbao"))]
    found = []
    for folder in WRITTEN:
        found += scan_files(site.path(folder), canaries, allowed)
    # Every field, not only the message: _CMDLINE records the command line of each process
    # that logged, however short-lived.
    journal = site.run("journalctl", "--no-pager", "-o", "json", timeout=120)
    found += [
        Leak(label, "the host's journal") for label in find_canaries(journal.encode(), canaries)
    ]
    return found


def test_no_planted_secret_leaks_on_the_host_or_the_controller(site: Site) -> None:
    """After everything above (converges, agent turns, secret reads, a chat spawn, a reboot):
    no secret value, token or unseal key in any file the roles or services wrote but the store
    and the 0600 token files, in the journal, in a playbook's output, or in any command line."""
    assert_ok(site.first, site)
    canaries = planted_canaries(site)
    leaks = host_leaks(site, canaries)
    leaks += scan_files(site.server.workdir / "logs", canaries)  # every playbook's output
    leaks += site.commands.leaks(canaries)
    assert site.commands.rounds > 100, "the command-line sampler never ran"
    # The scan sees what it looks for: the API token is in its own (allowed) file.
    token = {"Iris's API token": canaries["Iris's API token"]}
    assert scan_files(site.path("/iris/secrets"), token), "the scan found no API token at all"
    assert len(canaries) >= 6, sorted(canaries)
    assert not leaks, "\n".join(map(str, leaks))
