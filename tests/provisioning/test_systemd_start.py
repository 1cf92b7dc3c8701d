"""``SystemdService.start`` (what ``iris agents ensure`` uses for a stopped agent) under a real
systemd: a stopped unit, and one also disabled, is started (and enabled) again and stays up; a
missing unit is an error, not a new install."""

from __future__ import annotations

import pytest

from iris_runtime.errors import ProvisionError
from iris_runtime.provision.launch import no_progress
from iris_runtime.provision.systemd import SystemdService
from tests.provisioning.nspawn import NspawnHost, nspawn_host  # noqa: F401 (fixture)
from tests.provisioning.rootfs import debian_rootfs  # noqa: F401 (fixture)
from tests.provisioning.systemd_units import (
    agent_launch,
    healthy,
    service,  # noqa: F401 (fixture)
    show,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_a_stopped_unit_is_started_and_enabled_again(
    nspawn_host: NspawnHost,  # noqa: F811
    service: SystemdService,  # noqa: F811
) -> None:
    launch = agent_launch(nspawn_host, "sleepy")
    unit = launch.unit_name
    service.install(launch, no_progress)
    wait_until(lambda: healthy(launch.health_url), "/health after install")

    nspawn_host.run("systemctl", "stop", unit, check=True)
    assert show(nspawn_host, unit, "ActiveState") == "inactive"
    steps: list[str] = []
    service.start("sleepy", steps.append)
    assert any(f"enable --now {unit}" in step for step in steps)
    assert show(nspawn_host, unit, "ActiveState") == "active"
    wait_until(lambda: healthy(launch.health_url), "/health after start")

    # Stopped and disabled by hand: started and enabled again.
    nspawn_host.run("systemctl", "disable", "--now", unit, check=True)
    assert show(nspawn_host, unit, "UnitFileState") == "disabled"
    service.start("sleepy", no_progress)
    assert show(nspawn_host, unit, "ActiveState") == "active"
    assert show(nspawn_host, unit, "UnitFileState") == "enabled"

    with pytest.raises(ProvisionError, match="nothing to start"):
        service.start("never-installed", no_progress)
