"""Per-agent Vault tokens against a real OpenBao dev server: least privilege, wrapping,
records holding only accessors, revocation."""

from __future__ import annotations

import json
import stat
import uuid
from collections.abc import Iterator
from dataclasses import replace

import hvac
import hvac.exceptions
import pytest

from iris_runtime.config import Settings
from iris_runtime.errors import InvalidInput
from iris_runtime.secrets.vault import VaultBackend
from iris_runtime.secrets.vault_identity import (
    TOKEN_ROLE,
    AgentVaultIdentity,
    IssuedToken,
    policy_name,
)
from iris_runtime.testing.openbao import OpenBaoDev


@pytest.fixture
def identity(vault_settings: Settings) -> Iterator[AgentVaultIdentity]:
    ids = AgentVaultIdentity(vault_settings)
    yield ids
    ids.close()


@pytest.fixture
def agent() -> str:
    # Policies are global on the shared server: one agent name per test.
    return f"agent-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def stored(vault_settings: Settings) -> Iterator[VaultBackend]:
    store = VaultBackend(vault_settings)
    store.put("ALLOWED", "allowed-value")
    store.put("OTHER", "other-value")
    yield store
    store.close()


def as_agent(openbao: OpenBaoDev, token: str) -> hvac.Client:
    return hvac.Client(url=openbao.addr, token=token, timeout=10)


def read(client: hvac.Client, settings: Settings, name: str) -> str:
    reply = client.secrets.kv.v2.read_secret_version(
        f"{settings.vault_prefix}/{name}",
        mount_point=settings.vault_mount,
        raise_on_deleted_version=True,
    )
    return str(reply["data"]["data"]["value"])


def test_token_reads_only_its_allow_list(
    identity: AgentVaultIdentity,
    agent: str,
    stored: VaultBackend,
    vault_settings: Settings,
    openbao: OpenBaoDev,
) -> None:
    issued = identity.provision(agent, ["ALLOWED"], wrap_ttl=None)
    assert issued.token and issued.wrapping_token is None and issued.accessor
    client = as_agent(openbao, issued.token)
    assert read(client, vault_settings, "ALLOWED") == "allowed-value"
    with pytest.raises(hvac.exceptions.Forbidden):
        read(client, vault_settings, "OTHER")
    with pytest.raises(hvac.exceptions.Forbidden):
        client.secrets.kv.v2.list_secrets(vault_settings.vault_prefix, mount_point="secret")
    with pytest.raises(hvac.exceptions.Forbidden):  # no write either
        client.secrets.kv.v2.create_or_update_secret(
            f"{vault_settings.vault_prefix}/ALLOWED", {"value": "x"}
        )
    with pytest.raises(hvac.exceptions.Forbidden):  # nothing from the default policy
        client.write_data("cubbyhole/x", data={"a": "b"})


def test_token_is_an_orphan_periodic_token_with_one_policy(
    identity: AgentVaultIdentity, agent: str, openbao: OpenBaoDev
) -> None:
    issued = identity.provision(agent, ["ALLOWED"], wrap_ttl=None)
    assert issued.token is not None
    info = as_agent(openbao, issued.token).auth.token.lookup_self()["data"]
    assert info["orphan"] is True
    assert info["period"] == 24 * 3600
    assert info["policies"] == [policy_name(agent)]  # no "default"
    assert info["role"] == TOKEN_ROLE
    assert info["accessor"] == issued.accessor
    assert issued.ttl == 24 * 3600
    renewed = as_agent(openbao, issued.token).auth.token.renew_self()  # the agent can renew
    assert renewed["auth"]["lease_duration"] == 24 * 3600


def test_policy_grants_read_on_exact_paths(
    identity: AgentVaultIdentity, agent: str, vault_settings: Settings, openbao: OpenBaoDev
) -> None:
    identity.provision(agent, ["A.b-c", "D"], wrap_ttl=None)
    rules = openbao.client().sys.read_policy(policy_name(agent))["data"]["rules"]
    prefix = vault_settings.vault_prefix
    assert f'path "secret/data/{prefix}/A.b-c"' in rules
    assert f'path "secret/data/{prefix}/D"' in rules
    assert "*" not in rules and '"list"' not in rules


def test_wrapped_token_unwraps_exactly_once(
    identity: AgentVaultIdentity,
    agent: str,
    stored: VaultBackend,
    vault_settings: Settings,
    openbao: OpenBaoDev,
) -> None:
    issued = identity.provision(agent, ["ALLOWED"])  # wrapped by default
    assert issued.token is None and issued.wrapping_token
    assert issued.ttl == 24 * 3600
    unwrapped = as_agent(openbao, issued.wrapping_token).sys.unwrap()
    token = unwrapped["auth"]["client_token"]
    assert unwrapped["auth"]["accessor"] == issued.accessor == identity.accessor(agent)
    assert read(as_agent(openbao, token), vault_settings, "ALLOWED") == "allowed-value"
    with pytest.raises((hvac.exceptions.Forbidden, hvac.exceptions.InvalidRequest)):
        as_agent(openbao, issued.wrapping_token).sys.unwrap()


def test_records_hold_only_the_accessor_with_tight_modes(
    identity: AgentVaultIdentity, agent: str, vault_settings: Settings
) -> None:
    unwrapped = identity.provision(agent, ["ALLOWED"], wrap_ttl=None)
    other = f"{agent}-w"
    wrapped = identity.provision(other, ["ALLOWED"])
    path = vault_settings.data_dir / "secrets" / "vault-agents.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    text = path.read_text()
    assert unwrapped.token is not None and unwrapped.token not in text
    assert wrapped.wrapping_token is not None and wrapped.wrapping_token not in text
    records = json.loads(text)
    assert records[agent]["accessor"] == unwrapped.accessor
    assert records[other]["accessor"] == wrapped.accessor
    assert set(records[agent]) == {"accessor", "policy", "issued_at"}
    assert identity.agents() == sorted([agent, other])
    assert not list(path.parent.glob("*.tmp"))


def test_revoke_kills_the_token_and_the_policy(
    identity: AgentVaultIdentity, agent: str, openbao: OpenBaoDev
) -> None:
    issued = identity.provision(agent, ["ALLOWED"], wrap_ttl=None)
    assert issued.token is not None
    assert identity.revoke(agent) is True
    with pytest.raises(hvac.exceptions.Forbidden):
        as_agent(openbao, issued.token).auth.token.lookup_self()
    with pytest.raises(hvac.exceptions.InvalidPath):
        openbao.client().sys.read_policy(policy_name(agent))
    assert identity.accessor(agent) is None
    assert identity.revoke(agent) is False  # idempotent


def test_revoke_of_an_already_dead_token_is_not_an_error(
    identity: AgentVaultIdentity, agent: str, openbao: OpenBaoDev
) -> None:
    issued = identity.provision(agent, ["ALLOWED"], wrap_ttl=None)
    openbao.client().auth.token.revoke_accessor(issued.accessor)  # revoked behind our back
    assert identity.revoke(agent) is True
    assert identity.accessor(agent) is None


def test_provision_again_revokes_the_old_token(
    identity: AgentVaultIdentity, agent: str, openbao: OpenBaoDev
) -> None:
    first = identity.provision(agent, ["ALLOWED"], wrap_ttl=None)
    second = identity.provision(agent, ["ALLOWED", "OTHER"], wrap_ttl=None)
    assert first.token is not None and second.token is not None
    with pytest.raises(hvac.exceptions.Forbidden):
        as_agent(openbao, first.token).auth.token.lookup_self()
    as_agent(openbao, second.token).auth.token.lookup_self()
    assert identity.accessor(agent) == second.accessor


def test_repr_masks_tokens(identity: AgentVaultIdentity, agent: str) -> None:
    issued = identity.provision(agent, ["ALLOWED"], wrap_ttl=None)
    assert issued.token is not None and issued.token not in repr(issued)
    wrapped = IssuedToken(agent, "acc", None, "hvs.wrapping-secret", 10)
    assert "wrapping-secret" not in repr(wrapped) and "acc" in repr(wrapped)


def test_bad_names_are_refused(identity: AgentVaultIdentity) -> None:
    with pytest.raises(InvalidInput):
        identity.provision("Bad Name", ["A"])
    with pytest.raises(InvalidInput):
        identity.provision("ok", ["secret/*"])
    with pytest.raises(InvalidInput):
        identity.provision("ok", ['A" { capabilities = ["sudo"] } path "x'])


def test_proxy_mode_policies_cover_the_proxy_path(
    vault_settings: Settings, agent: str, openbao: OpenBaoDev
) -> None:
    settings = replace(vault_settings, secrets_mode="proxy", vault_proxy_path="ops/apps")
    ids = AgentVaultIdentity(settings)
    try:
        ids.provision(agent, ["SMTP"], wrap_ttl=None)
        rules = openbao.client().sys.read_policy(policy_name(agent))["data"]["rules"]
        assert 'path "secret/data/ops/apps/SMTP"' in rules
    finally:
        ids.revoke(agent)
        ids.close()


def test_client_factory_is_used(vault_settings: Settings, agent: str, openbao: OpenBaoDev) -> None:
    ids = AgentVaultIdentity(vault_settings, client_factory=openbao.client)
    try:
        assert ids.provision(agent, ["ALLOWED"], wrap_ttl=None).token
        assert ids.revoke(agent)
    finally:
        ids.close()


def test_removing_an_agent_without_a_token_needs_no_policy_rights(
    vault_settings: Settings, agent: str, openbao: OpenBaoDev
) -> None:
    # The Ansible role's least-privilege broker may only touch its KV path: it never issued an
    # agent token, so removing an agent must not stop at the policy it cannot delete.
    root = openbao.client()
    kv_only = f"kv-only-{agent}"
    root.sys.create_or_update_policy(kv_only, 'path "secret/*" { capabilities = ["read"] }')
    token = root.auth.token.create(policies=[kv_only], ttl="10m")["auth"]["client_token"]
    ids = AgentVaultIdentity(replace(vault_settings, vault_token=token))
    try:
        assert ids.revoke(agent) is False
    finally:
        ids.close()
