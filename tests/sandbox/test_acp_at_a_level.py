"""Custom ACP agents run on the host in the data dir, with every permission approved: at an
isolating level Iris refuses to start them (the chat says why) unless IRIS_ACP_UNSANDBOXED=1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iris_runtime.testing.server import clean_environment, run_iris
from tests.custom_agents.acp_setup import acp_agent
from tests.custom_agents.conftest import Setup, setup  # noqa: F401 (a fixture, used by name)
from tests.sandbox.support import require_tools


def _require_gvisor() -> None:
    if os.geteuid() != 0:
        pytest.skip("runsc runs as root")
    require_tools("runsc")


def test_an_acp_agent_is_refused_at_an_isolating_level(setup: Setup) -> None:  # noqa: F811
    _require_gvisor()
    acp_agent(setup)
    setup.serve(IRIS_SANDBOX="gvisor:ptrace")
    reply = setup.ask("s1", "@coder echo good morning")
    text = reply.json()["text"]
    assert "You said" not in text
    assert "IRIS_ACP_UNSANDBOXED=1" in text and "gvisor:ptrace" in text, text


def test_the_opt_out_starts_it_on_the_host(setup: Setup) -> None:  # noqa: F811
    _require_gvisor()
    acp_agent(setup)
    setup.serve(IRIS_SANDBOX="gvisor:ptrace", IRIS_ACP_UNSANDBOXED="1")
    assert setup.ask("s1", "@coder echo hi").json()["text"] == "You said: hi"


def test_doctor_warns_when_acp_agents_run_unsandboxed(tmp_path: Path) -> None:
    env = clean_environment(IRIS_DATA_DIR=str(tmp_path / "data"), IRIS_LOAD_PLUGINS="")
    env |= {"IRIS_SANDBOX": "docker:nosuch", "IRIS_ACP_UNSANDBOXED": "1"}
    rows = run_iris("doctor", env=env, timeout=60).stdout
    assert "[warn] acp_agents" in rows and "unsandboxed" in rows, rows
