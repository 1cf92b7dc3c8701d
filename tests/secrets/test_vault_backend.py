"""The Vault backend against a real OpenBao dev server (shared by the session; each test has
its own path prefix)."""

from __future__ import annotations

import contextlib
import logging
import secrets as random
import socket
import time
import traceback
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import hvac
import hvac.exceptions
import pytest

from iris_runtime.config import Settings
from iris_runtime.errors import InvalidInput
from iris_runtime.secrets.backend import ReadOnlyStore, SecretStoreUnavailable
from iris_runtime.secrets.vault import VaultBackend, vault_backend
from iris_runtime.testing.openbao import OpenBaoDev
from iris_runtime.testing.server import free_port


@pytest.fixture
def backend(vault_settings: Settings) -> Iterator[VaultBackend]:
    store = VaultBackend(vault_settings)
    yield store
    store.close()


def secret_value() -> str:
    return "sv-" + random.token_urlsafe(24)


def kv(openbao: OpenBaoDev) -> hvac.api.secrets_engines.KvV2:
    return openbao.client().secrets.kv.v2


def assert_clean(exc: BaseException, *secrets: str) -> None:
    """No secret in the message or anywhere in the printed traceback, and no hvac chain."""
    assert exc.__cause__ is None and exc.__context__ is None
    text = "".join(traceback.format_exception(exc))
    for secret in secrets:
        assert secret not in text


# -- store mode ------------------------------------------------------------------------------


def test_put_get_names_delete_roundtrip(backend: VaultBackend) -> None:
    value = secret_value()
    assert backend.get("API_KEY") is None
    backend.put("API_KEY", value)
    assert backend.get("API_KEY") == value
    backend.put("API_KEY", value + "2")  # a new version
    assert backend.get("API_KEY") == value + "2"
    backend.put("OTHER", "x")
    assert backend.names() == ["API_KEY", "OTHER"]
    assert backend.delete("API_KEY") is True
    assert backend.get("API_KEY") is None
    assert backend.delete("API_KEY") is False
    assert backend.names() == ["OTHER"]


def test_stored_shape_and_all_versions_removed(
    backend: VaultBackend, vault_settings: Settings, openbao: OpenBaoDev
) -> None:
    path = f"{vault_settings.vault_prefix}/TOKEN"
    backend.put("TOKEN", "one")
    backend.put("TOKEN", "two")
    stored = kv(openbao).read_secret_version(path, raise_on_deleted_version=True)
    assert stored["data"]["data"] == {"value": "two"}
    backend.delete("TOKEN")
    with pytest.raises(hvac.exceptions.InvalidPath):
        kv(openbao).read_secret_metadata(path)  # metadata and every version gone


def test_deleted_latest_version_reads_as_missing(
    backend: VaultBackend, vault_settings: Settings, openbao: OpenBaoDev
) -> None:
    backend.put("SOFT", "v1")
    kv(openbao).delete_latest_version_of_secret(f"{vault_settings.vault_prefix}/SOFT")
    assert backend.get("SOFT") is None
    assert backend.delete("SOFT") is False  # nothing readable was removed...
    with pytest.raises(hvac.exceptions.InvalidPath):  # ...but the leftovers are gone
        kv(openbao).read_secret_metadata(f"{vault_settings.vault_prefix}/SOFT")


def test_names_with_dots_and_dashes(backend: VaultBackend) -> None:
    names = ["ANTHROPIC-API-KEY", "db.password", "_x", "a-b.c_d-9"]
    for name in names:
        backend.put(name, f"value of {name}")
    assert backend.names() == sorted(names)
    for name in names:
        assert backend.get(name) == f"value of {name}"


def test_names_of_an_empty_prefix_and_subfolders(
    backend: VaultBackend, vault_settings: Settings, openbao: OpenBaoDev
) -> None:
    assert backend.names() == []
    kv(openbao).create_or_update_secret(f"{vault_settings.vault_prefix}/dir/INNER", {"value": "x"})
    backend.put("TOP", "y")
    assert backend.names() == ["TOP"]  # "dir/" is a folder, not a secret


def test_invalid_names_are_refused_before_vault(backend: VaultBackend) -> None:
    for bad in ("../x", "a/b", "", "*", "x y"):
        with pytest.raises(InvalidInput):
            backend.get(bad)
        with pytest.raises(InvalidInput):
            backend.put(bad, "v")


def test_describe_and_check(backend: VaultBackend, vault_settings: Settings) -> None:
    assert backend.describe() == (
        f"vault {vault_settings.vault_addr} kv-v2 mount 'secret' path "
        f"'{vault_settings.vault_prefix}' (token auth)"
    )
    backend.check()
    assert vault_settings.vault_token not in repr(backend)


def test_store_factory_is_read_write(vault_settings: Settings) -> None:
    store = vault_backend(vault_settings)
    try:
        assert not store.read_only
        store.put("W", "v")
        assert store.get("W") == "v"
    finally:
        store.close()


def test_many_concurrent_reads_all_succeed(backend: VaultBackend) -> None:
    backend.put("HOT", "hot-value")
    with ThreadPoolExecutor(max_workers=64) as pool:
        results = list(pool.map(lambda _: backend.get("HOT"), range(500)))
    assert results == ["hot-value"] * 500


# -- proxy mode ------------------------------------------------------------------------------


def proxy_settings(vault_env: dict[str, str], tmp_path_str: str, proxy_path: str) -> Settings:
    return Settings.from_env(
        {
            **vault_env,
            "IRIS_DATA_DIR": tmp_path_str,
            "IRIS_SECRETS_MODE": "proxy",
            "IRIS_VAULT_PROXY_PATH": proxy_path,
        }
    )


def test_proxy_reads_what_operators_wrote_and_refuses_writes(
    vault_env: dict[str, str], tmp_path: pytest.TempPathFactory, openbao: OpenBaoDev
) -> None:
    proxy_path = f"team-{uuid.uuid4().hex[:8]}/apps"
    kv(openbao).create_or_update_secret(f"{proxy_path}/SMTP_PASSWORD", {"value": "op-written"})
    kv(openbao).create_or_update_secret(f"{proxy_path}/LEGACY", {"password": "single-field"})
    kv(openbao).create_or_update_secret(f"{proxy_path}/AMBIGUOUS", {"a": "1", "b": "2"})
    store = vault_backend(proxy_settings(vault_env, str(tmp_path), proxy_path))
    try:
        assert store.read_only and store.path == proxy_path
        assert "read-only" in store.describe()
        assert store.get("SMTP_PASSWORD") == "op-written"
        assert store.get("LEGACY") == "single-field"
        with pytest.raises(SecretStoreUnavailable, match="no string 'value' field") as info:
            store.get("AMBIGUOUS")
        assert "'a', 'b'" in info.value.message and "1" not in info.value.message.split(":")[-1]
        assert store.names() == ["AMBIGUOUS", "LEGACY", "SMTP_PASSWORD"]
        with pytest.raises(ReadOnlyStore, match="proxy mode: manage secrets in Vault itself"):
            store.put("SMTP_PASSWORD", "x")
        with pytest.raises(ReadOnlyStore, match="proxy mode"):
            store.delete("SMTP_PASSWORD")
        assert store.get("SMTP_PASSWORD") == "op-written"
    finally:
        store.close()


def test_proxy_path_defaults_to_the_prefix(vault_settings: Settings) -> None:
    store = vault_backend(replace(vault_settings, secrets_mode="proxy"))
    assert store.read_only and store.path == vault_settings.vault_prefix


# -- failures --------------------------------------------------------------------------------


def test_wrong_token_is_unavailable_without_echoing_it(vault_settings: Settings) -> None:
    wrong = "s.wrong-" + random.token_urlsafe(16)
    store = VaultBackend(replace(vault_settings, vault_token=wrong))
    with pytest.raises(SecretStoreUnavailable, match="refused the token login") as info:
        store.get("ANY")
    assert info.value.status == 503
    assert vault_settings.vault_addr in info.value.message
    assert_clean(info.value, wrong)
    with pytest.raises(SecretStoreUnavailable):
        store.check()


def test_no_credentials_is_a_clear_error(vault_settings: Settings) -> None:
    store = VaultBackend(replace(vault_settings, vault_token=""))
    with pytest.raises(SecretStoreUnavailable, match="no credentials configured"):
        store.names()


def test_unreachable_vault(vault_settings: Settings) -> None:
    addr = f"http://127.0.0.1:{free_port()}"
    store = VaultBackend(replace(vault_settings, vault_addr=addr))
    with pytest.raises(SecretStoreUnavailable) as info:
        store.get("ANY")
    assert info.value.message == f"Vault at {addr} is unreachable: connection refused"
    assert_clean(info.value, vault_settings.vault_token)


def test_vault_that_does_not_answer_times_out(vault_settings: Settings) -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        addr = f"http://127.0.0.1:{silent.getsockname()[1]}"
        store = VaultBackend(replace(vault_settings, vault_addr=addr, vault_timeout_seconds=0.3))
        with pytest.raises(SecretStoreUnavailable) as info:
            store.get("ANY")
    assert info.value.message == f"Vault at {addr} is unreachable: timed out after 0.3s"


def test_missing_mount_is_not_mistaken_for_a_missing_secret(vault_settings: Settings) -> None:
    store = VaultBackend(replace(vault_settings, vault_mount="nowhere"))
    with pytest.raises(SecretStoreUnavailable, match="no KV v2 secrets engine mounted at"):
        store.get("ANY")
    with pytest.raises(SecretStoreUnavailable, match="no KV v2"):
        store.check()


def limited_token(openbao: OpenBaoDev, prefix: str, **params: object) -> str:
    """A token that may only read/write/list under ``secret/<prefix>``."""
    policy = f"iris-test-{uuid.uuid4().hex[:8]}"
    openbao.client().sys.create_or_update_policy(
        policy,
        f'path "secret/data/{prefix}/*" {{ capabilities = ["create", "read", "update"] }}\n'
        f'path "secret/metadata/{prefix}/*" {{ capabilities = ["read", "delete", "list"] }}\n'
        f'path "secret/metadata/{prefix}" {{ capabilities = ["list"] }}\n',
    )
    reply = openbao.client().auth.token.create(policies=[policy], **params)
    return str(reply["auth"]["client_token"])


def test_policy_denial_is_reported_as_such(vault_settings: Settings, openbao: OpenBaoDev) -> None:
    token = limited_token(openbao, "elsewhere")
    store = VaultBackend(replace(vault_settings, vault_token=token))
    with pytest.raises(SecretStoreUnavailable, match="denied the read of secret 'X'") as info:
        store.get("X")
    assert_clean(info.value, token)


def test_revoked_token_is_reported_as_such(vault_settings: Settings, openbao: OpenBaoDev) -> None:
    token = limited_token(openbao, vault_settings.vault_prefix)
    store = VaultBackend(replace(vault_settings, vault_token=token))
    store.put("A", "1")
    openbao.client().auth.token.revoke(token)
    with pytest.raises(SecretStoreUnavailable, match="no longer accepts the configured token"):
        store.get("A")


def test_short_lived_token_is_renewed_in_time(
    vault_settings: Settings, openbao: OpenBaoDev
) -> None:
    token = limited_token(openbao, vault_settings.vault_prefix, ttl="3s")
    store = VaultBackend(replace(vault_settings, vault_token=token))
    try:
        store.put("A", "1")
        time.sleep(3.5)  # idle past the TTL: the background timer must have renewed it
        assert store.get("A") == "1"
        ttl = openbao.client().auth.token.lookup(token)["data"]["ttl"]
        assert 0 < ttl <= 3
    finally:
        store.close()


# -- AppRole ---------------------------------------------------------------------------------


def approle(openbao: OpenBaoDev, prefix: str, **role: object) -> tuple[str, str]:
    """A role (own policy on ``prefix``) on the ``approle`` mount; returns role_id, secret_id."""
    admin = openbao.client()
    if "approle/" not in admin.sys.list_auth_methods()["data"]:
        # Another test may have enabled it meanwhile.
        with contextlib.suppress(hvac.exceptions.InvalidRequest):
            admin.sys.enable_auth_method("approle")
    policy = f"iris-approle-{uuid.uuid4().hex[:8]}"
    admin.sys.create_or_update_policy(
        policy,
        f'path "secret/data/{prefix}/*" {{ capabilities = ["create", "read", "update"] }}\n'
        f'path "secret/metadata/{prefix}" {{ capabilities = ["list"] }}\n',
    )
    name = f"iris-{uuid.uuid4().hex[:8]}"
    admin.auth.approle.create_or_update_approle(name, token_policies=[policy], **role)
    role_id = admin.auth.approle.read_role_id(name)["data"]["role_id"]
    secret_id = admin.auth.approle.generate_secret_id(name)["data"]["secret_id"]
    return str(role_id), str(secret_id)


def approle_settings(vault_settings: Settings, role_id: str, secret_id: str) -> Settings:
    return replace(vault_settings, vault_token="", vault_role_id=role_id, vault_secret_id=secret_id)


def test_approle_login_renewal_and_relogin(vault_settings: Settings, openbao: OpenBaoDev) -> None:
    role_id, secret_id = approle(
        openbao, vault_settings.vault_prefix, token_ttl="2s", token_max_ttl="60s"
    )
    store = VaultBackend(approle_settings(vault_settings, role_id, secret_id))
    try:
        assert "(approle auth)" in store.describe()
        store.put("A", "1")
        time.sleep(2.5)  # past the TTL: renewed (timer) or logged in again
        assert store.get("A") == "1"
        # A token revoked behind our back: the 403 leads to one new login and a retry.
        openbao.client().auth.token.revoke(store.connection.client.token)
        revoked = store.connection.client.token
        assert store.get("A") == "1"
        assert store.connection.client.token != revoked
    finally:
        store.close()


def test_approle_token_past_its_max_ttl_logs_in_again(
    vault_settings: Settings, openbao: OpenBaoDev
) -> None:
    role_id, secret_id = approle(
        openbao, vault_settings.vault_prefix, token_ttl="1s", token_max_ttl="2s"
    )
    store = VaultBackend(approle_settings(vault_settings, role_id, secret_id))
    try:
        store.put("A", "1")
        first = store.connection.client.token
        time.sleep(2.5)  # the first token is dead for good
        assert store.get("A") == "1"
        assert store.connection.client.token != first
    finally:
        store.close()


def test_concurrent_requests_after_a_revocation_log_in_once(
    vault_settings: Settings, openbao: OpenBaoDev
) -> None:
    role_id, secret_id = approle(openbao, vault_settings.vault_prefix)
    store = VaultBackend(approle_settings(vault_settings, role_id, secret_id))
    try:
        store.put("HOT", "v")
        openbao.client().auth.token.revoke(store.connection.client.token)
        logins = store.connection.logins
        with ThreadPoolExecutor(max_workers=32) as pool:
            results = list(pool.map(lambda _: store.get("HOT"), range(200)))
        assert results == ["v"] * 200
        # Every thread saw the same 403; one new login served them all.
        assert store.connection.logins == logins + 1
    finally:
        store.close()


def test_approle_bad_secret_id(vault_settings: Settings, openbao: OpenBaoDev) -> None:
    role_id, _ = approle(openbao, vault_settings.vault_prefix)
    wrong = str(uuid.uuid4())
    store = VaultBackend(approle_settings(vault_settings, role_id, wrong))
    with pytest.raises(SecretStoreUnavailable, match="refused the AppRole login") as info:
        store.get("A")
    assert_clean(info.value, wrong, role_id)


# -- nothing leaks ---------------------------------------------------------------------------


def test_no_value_or_token_in_logs_or_errors(
    vault_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("urllib3", "hvac", "iris_runtime", "requests"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    value = secret_value()
    store = VaultBackend(vault_settings)
    store.put("LOGGED", value)
    assert store.get("LOGGED") == value
    store.names()
    store.delete("LOGGED")
    errors: list[BaseException] = []
    for broken in (
        replace(vault_settings, vault_token="s.bad-" + random.token_hex(8)),
        replace(vault_settings, vault_addr=f"http://127.0.0.1:{free_port()}"),
        replace(vault_settings, vault_mount="nowhere"),
    ):
        with pytest.raises(SecretStoreUnavailable) as info:
            VaultBackend(broken).put("LOGGED", value)
        errors.append(info.value)
    assert "/v1/secret/data/" in caplog.text  # urllib3 did log at DEBUG: the check is real
    assert value not in caplog.text
    assert vault_settings.vault_token not in caplog.text
    for error in errors:
        assert_clean(error, value, vault_settings.vault_token)
