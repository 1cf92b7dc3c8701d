"""The converge itself, OpenBao and iris.service as it leaves them."""

from __future__ import annotations

import json
import stat

import pytest
import requests

from tests.provisioning.ansible_site.converged import Site, assert_ok
from tests.provisioning.site_scenario import ALLOWED_SECRET

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


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
