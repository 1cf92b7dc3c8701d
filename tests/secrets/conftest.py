"""A raft-storage OpenBao, initialised and unsealed, with KV v2 at ``secret/``: for the tests
that seal, restart or stop Vault (a dev server cannot come back sealed)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from iris_runtime.testing.openbao import OpenBaoError, OpenBaoRaft, find_bao


@pytest.fixture
def raft() -> Iterator[OpenBaoRaft]:
    try:
        bao = find_bao()
    except OpenBaoError as exc:
        pytest.fail(str(exc), pytrace=False)
    with OpenBaoRaft(bao) as server:
        server.init()
        server.unseal()
        server.client().sys.enable_secrets_engine("kv", path="secret", options={"version": "2"})
        yield server
