"""The one converge this package's modules share (they run in their names' order: see
__init__.py). The server and the converge live until the package's last test, the leak scan."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris_runtime.testing.leaks import CommandLineSampler
from tests.provisioning.ansible_host import (  # noqa: F401 (fixture)
    AnsibleHost,
    ansible_nspawn_host,
    snapshot_checkout,
)
from tests.provisioning.ansible_site.converged import BOXED, Site, free_ports
from tests.provisioning.rootfs import debian_rootfs  # noqa: F401 (fixture)
from tests.provisioning.site_scenario import (
    AGENT,
    ALLOWED_SECRET,
    OTHER_SECRET,
    SCRIPT,
    SKILL,
    seed_host,
)
from tests.provisioning.wheelhouse import iris_wheelhouse  # noqa: F401 (fixture)


@pytest.fixture(scope="package")
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
    seed_host(server.host)
    with CommandLineSampler() as commands:
        first = server.playbook("playbooks/site.yml", label="converge")
        yield Site(server, first, ports, values, init_file, commands)
