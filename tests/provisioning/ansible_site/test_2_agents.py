"""The agents: declared ones running and answering (one at the namespace level), one spawned
from chat through the privilege path (which grants nothing else), and the secret broker."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.provisioning.ansible_site.converged import BOXED, Site, ask_iris, assert_ok
from tests.provisioning.site_scenario import AGENT, ALLOWED_SECRET, DATA, OTHER_SECRET

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


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
