"""The broker on Vault through its real entry points: a served Iris with the ``vault`` backend
or in ``proxy`` mode against a real OpenBao, ``iris agents register --vault-token`` and
``unregister``, and 503 while Vault is sealed or gone, recovering without a restart."""

from __future__ import annotations

import secrets as random
from collections.abc import Callable
from pathlib import Path

import hvac
import hvac.exceptions
import pytest

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.testing.openbao import OpenBaoDev, OpenBaoRaft
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris


def agent(server: IrisServer, name: str, secrets: list[str]) -> dict[str, str]:
    token = f"{name}-" + random.token_urlsafe(24)
    AgentRegistry(server.data_dir / "agents.json").register(
        name, "http://127.0.0.1:4300", secrets, token
    )
    return {"Authorization": f"Bearer {token}"}


def kv_read(client: hvac.Client, path: str) -> str:
    reply = client.secrets.kv.v2.read_secret_version(
        path=path, mount_point="secret", raise_on_deleted_version=True
    )
    value: str = reply["data"]["data"]["value"]
    return value


def test_the_vault_backend_stores_in_vault_and_enforces_allow_lists(
    openbao: OpenBaoDev, vault_env: dict[str, str], start_iris: Callable[..., IrisServer]
) -> None:
    iris = start_iris(**vault_env)
    prefix = vault_env["IRIS_VAULT_PREFIX"]
    assert iris.request("PUT", "/secrets/A_KEY", json_body={"value": "a-value"}).status == 200
    assert iris.request("PUT", "/secrets/B_KEY", json_body={"value": "b-value"}).status == 200
    assert kv_read(openbao.client(), f"{prefix}/A_KEY") == "a-value"
    assert not (iris.data_dir / "secrets" / "store.enc").exists()  # no local copy
    alpha = agent(iris, "alpha", ["A_KEY", "GONE"])
    assert iris.get("/secrets/A_KEY", headers=alpha).json()["value"] == "a-value"
    assert iris.get("/secrets/B_KEY", headers=alpha).status == 403
    assert iris.get("/secrets/GONE", headers=alpha).status == 404
    assert iris.get("/secrets").json()["names"] == ["A_KEY", "B_KEY"]
    assert iris.request("DELETE", "/secrets/B_KEY").status == 204
    assert iris.get("/secrets/B_KEY").status == 404


def test_proxy_mode_reads_live_from_vault_and_keeps_nothing(
    openbao: OpenBaoDev, vault_env: dict[str, str], start_iris: Callable[..., IrisServer]
) -> None:
    path = f"{vault_env['IRIS_VAULT_PREFIX']}-proxied"
    root = openbao.client()
    root.secrets.kv.v2.create_or_update_secret(
        path=f"{path}/SENDGRID_API_KEY", secret={"value": "first"}, mount_point="secret"
    )
    iris = start_iris(**vault_env, IRIS_SECRETS_MODE="proxy", IRIS_VAULT_PROXY_PATH=path)
    digest = agent(iris, "digest", ["SENDGRID_API_KEY"])
    assert iris.get("/secrets/SENDGRID_API_KEY", headers=digest).json()["value"] == "first"
    root.secrets.kv.v2.create_or_update_secret(
        path=f"{path}/SENDGRID_API_KEY", secret={"value": "rotated"}, mount_point="secret"
    )
    assert iris.get("/secrets/SENDGRID_API_KEY", headers=digest).json()["value"] == "rotated"
    refused = iris.request("PUT", "/secrets/SENDGRID_API_KEY", json_body={"value": "x"})
    assert refused.status == 409 and refused.json()["code"] == "secret_store_read_only"
    assert not (iris.data_dir / "secrets").exists() or not any(
        (iris.data_dir / "secrets").glob("store.*")
    )
    assert iris.get("/secrets").json() == {"names": ["SENDGRID_API_KEY"], "mode": "proxy"}


def iris_cli(data_dir: Path, vault_env: dict[str, str]) -> dict[str, str]:
    return clean_environment(IRIS_DATA_DIR=str(data_dir), **vault_env)


def test_a_per_agent_vault_token_lives_and_dies_with_the_registration(
    openbao: OpenBaoDev, vault_env: dict[str, str], tmp_path: Path
) -> None:
    env = iris_cli(tmp_path / "data", vault_env)
    prefix = vault_env["IRIS_VAULT_PREFIX"]
    root = openbao.client()
    for name in ("MINE", "NOT_MINE"):
        root.secrets.kv.v2.create_or_update_secret(
            path=f"{prefix}/{name}", secret={"value": f"{name}-value"}, mount_point="secret"
        )
    done = run_iris(
        "agents", "register", "helper", "http://127.0.0.1:4301", "--secret", "MINE",
        "--vault-token", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    wrapping = done.stdout.strip()
    assert wrapping and "\n" not in wrapping  # stdout is the wrapping token alone
    assert "accessor" in done.stderr and wrapping not in done.stderr

    token = openbao.client(wrapping).sys.unwrap()["auth"]["client_token"]
    with pytest.raises(hvac.exceptions.VaultError):
        openbao.client(wrapping).sys.unwrap()  # single use
    own = openbao.client(token)
    assert kv_read(own, f"{prefix}/MINE") == "MINE-value"
    with pytest.raises(hvac.exceptions.Forbidden):
        kv_read(own, f"{prefix}/NOT_MINE")

    # A new allow-list rewrites the agent's policy, keeping its token.
    updated = run_iris(
        "agents", "register", "helper", "http://127.0.0.1:4301", "--secret", "NOT_MINE", env=env
    )
    assert updated.returncode == 0, updated.stderr
    assert kv_read(own, f"{prefix}/NOT_MINE") == "NOT_MINE-value"

    gone = run_iris("agents", "unregister", "helper", env=env)
    assert gone.returncode == 0 and "revoked" in gone.stdout
    with pytest.raises(hvac.exceptions.VaultError):
        kv_read(own, f"{prefix}/MINE")
    assert "helper" not in AgentRegistry(tmp_path / "data" / "agents.json").names()


def test_vault_token_without_the_vault_backend_is_refused_and_registers_nothing(
    tmp_path: Path,
) -> None:
    env = clean_environment(IRIS_DATA_DIR=str(tmp_path / "data"))
    done = run_iris("agents", "register", "x", "http://127.0.0.1:1", "--vault-token", env=env)
    assert done.returncode == 1 and "needs the vault backend" in done.stderr
    assert AgentRegistry(tmp_path / "data" / "agents.json").names() == []


def test_a_failed_vault_token_rolls_the_registration_back(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    env = iris_cli(tmp_path / "data", {**vault_env, "IRIS_VAULT_TOKEN": "s.not-a-real-token"})
    done = run_iris("agents", "register", "y", "http://127.0.0.1:1", "--vault-token", env=env)
    assert done.returncode == 1, done.stdout
    assert "s.not-a-real-token" not in done.stderr + done.stdout
    assert AgentRegistry(tmp_path / "data" / "agents.json").names() == []


@pytest.mark.slow
def test_a_sealed_or_stopped_vault_is_503_and_the_broker_recovers_by_itself(
    raft: OpenBaoRaft, tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    iris = start_iris(
        IRIS_SECRET_BACKEND="vault",
        IRIS_VAULT_ADDR=raft.addr,
        IRIS_VAULT_TOKEN=raft.root_token,
        IRIS_VAULT_TIMEOUT_SECONDS="2",
    )
    assert iris.request("PUT", "/secrets/KEPT", json_body={"value": "kept"}).status == 200

    raft.seal()
    sealed = iris.get("/secrets/KEPT")
    assert sealed.status == 503 and sealed.json()["code"] == "secret_store_unavailable"
    assert "sealed" in sealed.json()["error"]
    raft.unseal()
    assert iris.get("/secrets/KEPT").json()["value"] == "kept"

    raft.stop()
    down = iris.get("/secrets/KEPT")
    assert down.status == 503 and "unreachable" in down.json()["error"]
    raft.start()
    raft.unseal()
    assert iris.get("/secrets/KEPT").json()["value"] == "kept"
    decisions = [
        line
        for line in (iris.data_dir / "audit" / "secrets.jsonl").read_text().splitlines()
        if '"unavailable"' in line
    ]
    assert len(decisions) == 2
