"""``env`` mode (values from the environment and the env file), ``iris doctor`` on secrets
files, and hygiene: no secret value in any log, error, argv or audit line of a whole run."""

from __future__ import annotations

import json
import os
import secrets as random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris


def agent(server: IrisServer, name: str, secrets: list[str]) -> dict[str, str]:
    token = f"{name}-" + random.token_urlsafe(24)
    AgentRegistry(server.data_dir / "agents.json").register(
        name, "http://127.0.0.1:4200", secrets, token
    )
    return {"Authorization": f"Bearer {token}"}


def test_env_mode_serves_the_environment_and_the_env_file(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    env_file = tmp_path / "host.env"
    env_file.write_text('# host secrets\nexport FILE_KEY="from-the-file"\nOTHER=unused\n')
    iris = start_iris(
        IRIS_SECRETS_MODE="env", IRIS_ENV_FILE=str(env_file), PROCESS_KEY="from-the-process"
    )
    headers = agent(iris, "legacy", ["FILE_KEY", "PROCESS_KEY"])
    assert iris.get("/secrets/FILE_KEY", headers=headers).json()["value"] == "from-the-file"
    assert iris.get("/secrets/PROCESS_KEY", headers=headers).json()["value"] == "from-the-process"
    assert iris.get("/secrets/OTHER", headers=headers).status == 403  # allow-list still applies
    assert iris.get("/secrets").json() == {"names": ["FILE_KEY", "OTHER"], "mode": "env"}
    refused = iris.request("PUT", "/secrets/FILE_KEY", json_body={"value": "new"})
    assert refused.status == 409 and refused.json()["code"] == "secret_store_read_only"
    env_file.write_text("FILE_KEY=edited\n")  # an edited env file is served without a restart
    assert iris.get("/secrets/FILE_KEY", headers=headers).json()["value"] == "edited"


def test_doctor_fails_a_loose_secrets_file(tmp_path: Path) -> None:
    env = clean_environment(IRIS_DATA_DIR=str(tmp_path / "data"), IRIS_LOAD_PLUGINS="")
    stored = subprocess.run(
        [sys.executable, "-m", "iris_runtime", "secrets", "set", "K"],
        input="v",
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert stored.returncode == 0, stored.stderr
    AgentRegistry(tmp_path / "data" / "agents.json").register("a", "http://127.0.0.1:1", ["K"])
    healthy = json.loads(run_iris("doctor", "--json", env=env).stdout)["checks"]
    by_name = {c["name"]: c for c in healthy}
    assert (
        by_name["secrets"]["status"] == "ok" and "mode store: file" in by_name["secrets"]["detail"]
    )
    assert by_name["secret_store"]["status"] == by_name["agents_json"]["status"] == "ok"
    os.chmod(tmp_path / "data" / "agents.json", 0o644)
    os.chmod(tmp_path / "data" / "secrets" / "store.enc", 0o640)
    loose = {
        c["name"]: c for c in json.loads(run_iris("doctor", "--json", env=env).stdout)["checks"]
    }
    assert (
        loose["agents_json"]["status"] == "fail" and "chmod 600" in loose["agents_json"]["detail"]
    )
    assert loose["secret_store"]["status"] == "fail"


def test_no_secret_value_appears_in_any_log_error_or_argv(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    values = {f"HYGIENE_{i}": f"hygiene-value-{i}-" + random.token_hex(12) for i in range(3)}
    iris = start_iris(IRIS_LOG_LEVEL="debug")
    env = clean_environment(IRIS_DATA_DIR=str(iris.data_dir), IRIS_LOG_LEVEL="debug")
    outputs: list[str] = []
    for name, value in values.items():
        done = subprocess.run(
            [sys.executable, "-m", "iris_runtime", "secrets", "set", name],
            input=value,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        outputs += [done.stdout, done.stderr]
    headers = agent(iris, "reader", ["HYGIENE_0", "MISSING"])
    replies = [
        iris.get("/secrets/HYGIENE_0", headers=headers),
        iris.get("/secrets/HYGIENE_1", headers=headers),
        iris.get("/secrets/MISSING", headers=headers),
        iris.request("PUT", "/secrets/HYGIENE_2", body=b'{"value": "x", "extra": 1}'),
        iris.request("PUT", "/secrets/bad/name", json_body={"value": values["HYGIENE_2"]}),
    ]
    assert [r.status for r in replies] == [200, 403, 404, 400, 400]
    cmdlines = _cmdlines_of(iris)
    for result in (run_iris("doctor", env=env), run_iris("secrets", "audit", env=env)):
        outputs += [result.stdout, result.stderr]
    iris.stop()
    server_log = iris.log_path.read_text() if iris.log_path else ""
    assert "DEBUG" in server_log  # the log really was captured at debug level
    haystacks = {
        "server log": server_log,
        "cli output": "\n".join(outputs),
        "argv": cmdlines,
        "error replies": "\n".join(r.body.decode() for r in replies[1:]),
        "audit": (iris.data_dir / "audit" / "secrets.jsonl").read_text(),
    }
    for where, text in haystacks.items():
        for value in values.values():
            assert value not in text, f"a secret value leaked into the {where}"


def _cmdlines_of(server: IrisServer) -> str:
    """The argv of the server and its workers, as ``ps`` would show them."""
    assert server.process is not None
    pids = [server.process.pid]
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    return "\n".join(
        Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode() for pid in pids
    )
