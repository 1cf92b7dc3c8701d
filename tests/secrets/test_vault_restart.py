"""Vault sealed, restarted or gone: the backend reports it clearly and recovers by itself.

Uses a raft-storage OpenBao (a dev server cannot restart sealed), so it takes a few seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iris_runtime.config import Settings
from iris_runtime.secrets.backend import SecretStoreUnavailable
from iris_runtime.secrets.vault import VaultBackend
from iris_runtime.testing.openbao import OpenBaoRaft

pytestmark = pytest.mark.slow

VALUE = "restart-survivor-value"


def unavailable(backend: VaultBackend) -> str:
    with pytest.raises(SecretStoreUnavailable) as info:
        backend.get("SURVIVOR")
    assert info.value.__context__ is None and info.value.__cause__ is None
    return info.value.message


def test_sealed_restarted_and_stopped_vault_then_recovery(
    raft: OpenBaoRaft, tmp_path: Path
) -> None:
    settings = Settings.from_env(
        {
            "IRIS_VAULT_ADDR": raft.addr,
            "IRIS_VAULT_TOKEN": raft.root_token,
            "IRIS_VAULT_TIMEOUT_SECONDS": "2",
            "IRIS_DATA_DIR": str(tmp_path / "data"),
        }
    )
    backend = VaultBackend(settings)
    try:
        backend.put("SURVIVOR", VALUE)

        raft.seal()
        assert unavailable(backend) == f"Vault at {raft.addr} is sealed"
        raft.unseal()
        assert backend.get("SURVIVOR") == VALUE

        raft.restart()  # comes back sealed
        assert unavailable(backend) == f"Vault at {raft.addr} is sealed"
        with pytest.raises(SecretStoreUnavailable, match="is sealed"):
            backend.check()
        raft.unseal()
        assert backend.get("SURVIVOR") == VALUE  # the same object, no restart of Iris
        backend.check()

        raft.stop()
        message = unavailable(backend)
        assert message == f"Vault at {raft.addr} is unreachable: connection refused"
        raft.start()
        raft.unseal()
        assert backend.get("SURVIVOR") == VALUE
    finally:
        backend.close()

    # The audit device declared in the config logged our requests, values HMAC'd.
    lines = raft.audit_log.read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    paths = {entry.get("request", {}).get("path") for entry in entries}
    assert "secret/data/iris/SURVIVOR" in paths
    assert VALUE not in raft.audit_log.read_text()
    assert raft.root_token not in raft.audit_log.read_text()
