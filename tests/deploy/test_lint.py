"""The Ansible side of the repository, without a host: ansible-lint (production profile) is clean,
every playbook passes --syntax-check with every inventory, the example inventory names only
variables the roles declare, and bad input stops a run at its preflight, before any change.

The preflight runs use ``inventories/local`` (this machine) in check mode with become off: they
must fail in the role's argument validation or preflight tasks, which only read. A missing or
broken preflight would continue in check mode, and the assertion on the failing task names it.
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.provisioning.ansible_host import (
    REPO,
    AnsibleRun,
    ansible_env,
    lint_tool,
    require_ansible,
    run_playbook,
)

pytestmark = pytest.mark.timeout(600)

PLAYBOOKS = sorted(path.name for path in (REPO / "playbooks").glob("*.yml"))
INVENTORIES = sorted(path.name for path in (REPO / "inventories").iterdir() if path.is_dir())
ROLES = sorted(path.name for path in (REPO / "roles").iterdir() if (path / "tasks").is_dir())
# What a failed preflight looks like in the output: the role's argument validation, or one of
# its preflight tasks (they all assert, named "Check ..." or "Refuse ...").
PREFLIGHT_TASK = ("Validating arguments against arg spec", ": Check ", ": Refuse ")


@pytest.fixture(autouse=True)
def _ansible() -> None:
    require_ansible()


def closed_port() -> int:
    """A loopback port nothing listens on (bound and released: good enough for a refusal)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# -- lint and syntax ---------------------------------------------------------------------------


def test_ansible_lint_production_profile_is_clean(tmp_path: Path) -> None:
    done = subprocess.run(
        [lint_tool("ansible-lint"), "--offline", "--nocolor"],
        cwd=REPO,
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Profile 'production' was required, and it passed" in done.stdout + done.stderr


@pytest.mark.parametrize("inventory", INVENTORIES)
@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_syntax(playbook: str, inventory: str, tmp_path: Path) -> None:
    run = run_playbook(
        REPO / "playbooks" / playbook,
        ["-i", str(REPO / "inventories" / inventory), "--syntax-check"],
        log=tmp_path / "syntax.log",
        tmp=tmp_path,
        timeout=120,
    )
    assert run.returncode == 0, run.output


def test_site_runs_secrets_then_runtime_then_agents() -> None:
    plays = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    imported = [play["ansible.builtin.import_playbook"] for play in plays]
    assert imported == ["secrets.yml", "runtime.yml", "agents.yml"]


def test_inventories_have_the_groups(tmp_path: Path) -> None:
    for inventory in INVENTORIES:
        done = subprocess.run(
            [lint_tool("ansible-inventory"), "-i", str(REPO / "inventories" / inventory), "--list"],
            cwd=REPO,
            env=ansible_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        listed = json.loads(done.stdout)
        for group in ("iris_secrets", "iris_runtime", "iris_agents"):
            assert listed.get(group, {}).get("hosts"), f"{inventory}: no host in {group}"
        # Agents run where Iris runs.
        assert set(listed["iris_agents"]["hosts"]) <= set(listed["iris_runtime"]["hosts"])


def declared_variables() -> dict[str, dict[str, Any]]:
    """Every role variable declared in a meta/argument_specs.yml, with its spec."""
    found: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
        for entry in specs["argument_specs"].values():
            found.update(entry.get("options") or {})
    return found


def test_every_role_declares_its_arguments() -> None:
    for role in ROLES:
        assert (REPO / "roles" / role / "meta" / "argument_specs.yml").is_file(), role
        main = yaml.safe_load((REPO / "roles" / role / "tasks" / "main.yml").read_text())
        # The preflight comes first: nothing may change before the cross-variable checks.
        assert main[0].get("ansible.builtin.import_tasks") == "preflight.yml", role


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_inventory_variables_are_declared_by_a_role(inventory: str) -> None:
    """A misspelt variable in an inventory is silently ignored by Ansible: catch it here."""
    declared = declared_variables()
    folder = REPO / "inventories" / inventory
    for path in sorted([*folder.glob("group_vars/**/*.yml"), *folder.glob("host_vars/**/*.yml")]):
        values = yaml.safe_load(path.read_text()) or {}
        for name in values:
            if name.startswith("ansible_"):
                continue
            assert name in declared, f"{path.relative_to(REPO)}: {name} is no role's variable"


def test_example_inventory_sets_every_required_variable() -> None:
    required = {name for name, spec in declared_variables().items() if spec.get("required")}
    group_vars = REPO / "inventories" / "example" / "group_vars"
    shown: set[str] = set()
    for path in group_vars.rglob("*.yml"):
        shown.update(yaml.safe_load(path.read_text()) or {})
    assert required <= shown, f"not in inventories/example: {sorted(required - shown)}"


# -- bad input stops at the preflight --------------------------------------------------------


def preflight_run(
    tmp_path: Path,
    playbook: str,
    extra_vars: dict[str, Any],
    *,
    inventory: Path | None = None,
    without: tuple[str, ...] = (),
) -> AnsibleRun:
    """``playbook`` on inventories/local (or ``inventory``) in check mode, become off."""
    # Nothing may reach a real OpenBao or a real init file on this machine.
    safe = {
        "ansible_become": False,
        "iris_secrets_port": closed_port(),
        "iris_secrets_init_file": str(tmp_path / "no-such-init.json"),
    }
    values = {k: v for k, v in {**safe, **extra_vars}.items() if k not in without}
    extra = tmp_path / "extra-vars.json"
    extra.write_text(json.dumps(values))
    return run_playbook(
        REPO / "playbooks" / playbook,
        ["-i", str(inventory or REPO / "inventories" / "local"), "--check", "-e", f"@{extra}"],
        log=tmp_path / "preflight.log",
        tmp=tmp_path,
        timeout=300,
    )


def assert_stopped_at_preflight(run: AnsibleRun, variable: str) -> None:
    assert run.returncode != 0, run.describe()
    failed = [task for tasks in run.failed_tasks.values() for task in tasks]
    assert failed, run.output
    assert any(marker in failed[0] for marker in PREFLIGHT_TASK), (
        f"the run failed at {failed[0]!r}, not at a preflight check\n{run.output}"
    )
    assert all(recap.changed == 0 for recap in run.recap.values()), run.describe()
    # The failing task's message names the variable.
    after = run.output[run.output.index(f"TASK [{failed[0]}]") :]
    assert variable in after, f"{variable} not named in the failure\n{run.output}"


def test_missing_required_variable_is_named(tmp_path: Path) -> None:
    # The local inventory without its group_vars: no iris_secrets_init_file.
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    shutil.copy(REPO / "inventories" / "local" / "hosts.yml", inventory / "hosts.yml")
    run = preflight_run(
        tmp_path, "secrets.yml", {}, inventory=inventory, without=("iris_secrets_init_file",)
    )
    assert_stopped_at_preflight(run, "iris_secrets_init_file")


def test_init_file_in_a_missing_directory_is_named(tmp_path: Path) -> None:
    run = preflight_run(
        tmp_path, "secrets.yml", {"iris_secrets_init_file": str(tmp_path / "nowhere" / "i.json")}
    )
    assert_stopped_at_preflight(run, "iris_secrets_init_file")


# Bad values of one playbook, each stopped by a preflight check that names the variable:
# (playbook, the values, the variable named), by what is wrong.
NAMED_AT_PREFLIGHT = {
    "threshold_above_shares": (
        "secrets.yml",
        {"iris_secrets_key_shares": 1, "iris_secrets_key_threshold": 3},
        "iris_secrets_key_threshold",
    ),
    "plain_http_off_loopback": (
        "secrets.yml",
        {"iris_secrets_listen_address": "192.0.2.1"},
        "iris_secrets_listen_address",
    ),
    "invalid_secrets_mode": (
        "runtime.yml",
        {"iris_runtime_secrets_mode": "plaintext"},
        "iris_runtime_secrets_mode",
    ),
    # store + vault backend needs a Vault login; nothing reachable gives one.
    "vault_mode_without_credentials": (
        "runtime.yml",
        {"iris_runtime_secrets_mode": "store", "iris_runtime_secret_backend": "vault"},
        "iris_runtime_vault_role_id",
    ),
    "proxy_mode_without_a_vault_address": (
        "runtime.yml",
        {"iris_runtime_secrets_mode": "proxy", "iris_runtime_secrets_host": ""},
        "iris_runtime_vault_addr",
    ),
}


@pytest.mark.parametrize(
    ("playbook", "values", "variable"), NAMED_AT_PREFLIGHT.values(), ids=NAMED_AT_PREFLIGHT
)
def test_a_bad_value_is_named_at_the_preflight(
    tmp_path: Path, playbook: str, values: dict[str, Any], variable: str
) -> None:
    assert_stopped_at_preflight(preflight_run(tmp_path, playbook, values), variable)


def test_plain_http_vault_on_another_host_is_refused(tmp_path: Path) -> None:
    run = preflight_run(
        tmp_path,
        "runtime.yml",
        {"iris_runtime_vault_addr": "https://192.0.2.1:8200,http://192.0.2.2:8200"},
    )
    assert_stopped_at_preflight(run, "iris_runtime_vault_addr")
    assert "IRIS_INSECURE_HTTP" in run.output


def test_credential_in_plain_env_is_refused_without_showing_it(tmp_path: Path) -> None:
    value = "xoxb-" + secrets.token_hex(8)
    run = preflight_run(
        tmp_path,
        "runtime.yml",
        {"iris_runtime_secret_backend": "file", "iris_runtime_env": {"SLACK_TOKEN": value}},
    )
    assert_stopped_at_preflight(run, "iris_runtime_env.SLACK_TOKEN")
    assert value not in run.output


@pytest.mark.parametrize("name", ["Bad_Name", "-lead", "x" * 80, ""])
def test_invalid_agent_name_is_named(tmp_path: Path, name: str) -> None:
    run = preflight_run(
        tmp_path,
        "agents.yml",
        {"iris_agent_agents": [{"name": "fine", "skills": []}, {"name": name, "skills": []}]},
    )
    assert_stopped_at_preflight(run, "iris_agent_agents[1].name")


def test_invalid_agent_state_is_named(tmp_path: Path) -> None:
    run = preflight_run(
        tmp_path, "agents.yml", {"iris_agent_agents": [{"name": "fine", "state": "gone"}]}
    )
    assert_stopped_at_preflight(run, "iris_agent_agents")
    assert "gone" in run.output


def test_the_same_agent_on_two_hosts_is_refused(tmp_path: Path) -> None:
    """Agent hosts register their agents with one Iris by name: two hosts declaring one name
    would flip-flop its registration, so the preflight stops every host before any change."""
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    local = {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}
    (inventory / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "iris_runtime": {
                            "hosts": {"iris": {**local, "iris_agent_agents": [{"name": "own"}]}}
                        },
                        "iris_agent_hosts": {
                            "hosts": {
                                "agents1": {**local, "iris_agent_agents": [{"name": "crawler"}]},
                                "agents2": {**local, "iris_agent_agents": [{"name": "crawler"}]},
                            }
                        },
                    }
                }
            }
        )
    )
    playbook = tmp_path / "agent-hosts.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Agent hosts",
                    "hosts": "iris_agent_hosts",
                    "gather_facts": False,
                    "roles": [{"role": "iris_agent", "iris_agent_register_with": "iris"}],
                }
            ]
        )
    )
    run = run_playbook(
        playbook,
        ["-i", str(inventory), "--check", "-e", "ansible_become=false"],
        log=tmp_path / "preflight.log",
        tmp=tmp_path,
        timeout=300,
    )
    assert_stopped_at_preflight(run, "crawler declared on more than one")
    assert set(run.failed_tasks) == {"agents1", "agents2"}, run.describe()


def test_credential_in_agent_environment_is_refused_without_showing_it(tmp_path: Path) -> None:
    value = "sk-" + secrets.token_hex(8)
    run = preflight_run(
        tmp_path,
        "agents.yml",
        {
            "iris_agent_agents": [{"name": "fine"}],
            "iris_agent_environment": {"OPENAI_API_KEY": value},
        },
    )
    assert_stopped_at_preflight(run, "iris_agent_environment.OPENAI_API_KEY")
    assert value not in run.output
