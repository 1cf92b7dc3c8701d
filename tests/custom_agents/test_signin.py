"""Sign-in for relay agents that declare ``auth`` and ``setup``: shown as needing sign-in until
the probe passes, and ``iris custom-agents setup`` runs the login command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from iris_runtime.testing.server import clean_environment, run_iris
from tests.custom_agents.conftest import Setup, wait_until


def _login_script(tmp_path: Path, auth_file: Path) -> Path:
    """A stand-in for an agent's own login command: writes its token file for the provider."""
    script = tmp_path / "butler-login"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys\n"
        f"pathlib.Path({str(auth_file)!r}).write_text("
        "json.dumps({'access_token': 'x', 'provider': sys.argv[-1]}))\n"
        "print('signed in with', sys.argv[-1])\n"
    )
    script.chmod(0o755)
    return script


def test_a_signed_out_agent_needs_sign_in_until_setup_runs(setup: Setup, tmp_path: Path) -> None:
    auth_file = tmp_path / "butler-auth.json"
    login = _login_script(tmp_path, auth_file)
    setup.relay(
        "butler",
        auth={"file": str(auth_file), "contains": "access_token"},
        setup={
            "login": [str(login), "login", "--provider", "{provider}"],
            "providers": [
                {"id": "openai", "label": "OpenAI", "note": "Uses your plan."},
                {"id": "api-key", "label": "API key", "note": "Billed per token."},
            ],
        },
    )
    setup.serve()
    agent = setup.custom_agents()["agents"][0]
    assert agent["status"] == "needs_sign_in"
    assert [p["id"] for p in agent["providers"]] == ["openai", "api-key"]
    refused = setup.ask("s", "@butler echo hi")
    assert refused.status == 502
    assert refused.json()["text"] == (
        "(butler failed: it needs sign-in first: iris custom-agents setup butler --provider <id>)"
    )
    env = clean_environment(IRIS_DATA_DIR=str(setup.data_dir))
    doctor = json.loads(run_iris("doctor", "--json", env=env).stdout)
    check = next(c for c in doctor["checks"] if c["name"] == "custom_agents")
    assert check["status"] == "warn" and "butler (needs sign in)" in check["detail"]
    wrong = run_iris("custom-agents", "setup", "butler", "--provider", "github", env=env)
    assert wrong.returncode == 1
    assert "butler has no provider 'github' (it offers: openai, api-key)" in wrong.stderr
    done = run_iris("custom-agents", "setup", "butler", "--provider", "api-key", env=env)
    assert done.returncode == 0, done.stderr
    assert "signed in with api-key" in done.stdout and "butler: signed in" in done.stdout
    assert json.loads(auth_file.read_text())["provider"] == "api-key"
    wait_until(lambda: setup.custom_agents()["agents"][0]["status"] == "ready")
    assert setup.ask("s", "@butler echo hi").json()["text"] == "You said: hi"
