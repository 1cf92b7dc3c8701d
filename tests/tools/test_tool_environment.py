"""Commands the model runs never see Iris's own credentials, only its broker identity."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from iris_runtime.testing.server import IrisServer
from iris_runtime.tools.environment import is_withheld

CREDENTIALS = {
    "ANTHROPIC_API_KEY": "sk-ant-withheld-1",
    "OPENAI_API_KEY": "sk-withheld-2",
    "IRIS_SLACK_BOT_TOKEN": "xoxb-withheld-3",
    "TELEGRAM_BOT_TOKEN": "123:withheld-4",
    "IRIS_VAULT_TOKEN": "s.withheld-5",
    "IRIS_VAULT_SECRET_ID": "withheld-6",
    "DEPLOY_PASSWORD": "withheld-7",
}


def test_a_bash_command_sees_no_credentials_but_its_broker_identity(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    command = {"tool": "bash", "args": {"command": "env > seen-env.txt"}, "id": "env"}
    script = tmp_path / "script.json"
    rule = {"when": "", "turns": [[command], [{"text": "done"}]]}
    script.write_text(json.dumps({"rules": [rule]}))
    iris = start_iris(
        IRIS_LOAD_PLUGINS="scripted",
        IRIS_PROVIDER="scripted",
        IRIS_SCRIPT_FILE=str(script),
        IRIS_SECRET_BROKER_URL="http://127.0.0.1:9",
        **CREDENTIALS,
    )
    assert iris.post("/sessions/env/message", json_body={"text": "go"}).json()["text"] == "done"
    seen = dict(
        line.split("=", 1)
        for line in (iris.data_dir / "seen-env.txt").read_text().splitlines()
        if "=" in line
    )
    for name, value in CREDENTIALS.items():
        assert name not in seen and value not in seen.values(), name
    assert seen["IRIS_API_TOKEN"] == iris.token  # get-secret proves who it is with this
    assert seen["IRIS_SECRET_BROKER_URL"] == "http://127.0.0.1:9"
    assert "PATH" in seen


def test_which_names_are_withheld() -> None:
    for name in (*CREDENTIALS, "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "my_api_key"):
        assert is_withheld(name), name
    kept = ("IRIS_API_TOKEN", "IRIS_SECRET_BROKER_URL", "IRIS_SECRETS_MODE", "PATH", "HOME")
    for name in kept:
        assert not is_withheld(name), name
