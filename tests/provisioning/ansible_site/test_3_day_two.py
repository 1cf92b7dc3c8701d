"""Day two on the converged site: runs again (for real and in check mode) change nothing, an
agent declared absent goes, and a reboot brings OpenBao back unsealed and Iris healthy."""

from __future__ import annotations

import pytest

from tests.provisioning.ansible_site.converged import Site, assert_ok
from tests.provisioning.site_scenario import AGENT, ALLOWED_SECRET
from tests.provisioning.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


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
