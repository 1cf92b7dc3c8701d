"""The leak scan, last of the package (its modules run in their names' order): it looks at
everything the others produced on the host and on the controller."""

from __future__ import annotations

import json

import pytest

from iris_runtime.testing.leaks import (
    Allowance,
    Leak,
    find_canaries,
    private_file,
    scan_files,
    under,
)
from tests.provisioning.ansible_site.converged import Site, assert_ok

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


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
