"""One store-mode agent, installed once: the install builds the image and the agent answers;
a second apply changes nothing; the container gets only its identity, and its token shows in no
output, argv or agents.tf."""

from __future__ import annotations

import uuid

import pytest

from iris_runtime.provision.docker_cli import inspect_container
from iris_runtime.provision.launch import PLATFORM_TOKEN_VARS
from tests.provisioning.docker_agents.agent_containers import IMAGE, Installed, get, wait_healthy

# The first test pays for the session's debootstrap tree (about a minute, more on a slow mirror)
# and the image build; the default per-test timeout is too short for that setup.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_install_builds_the_image_once_and_the_agent_answers(store_agent: Installed) -> None:
    launch, progress = store_agent.launch, store_agent.progress
    assert any(line.startswith("terraform_data.iris_runtime_image[0]: create") for line in progress)
    assert any("Successfully tagged " + IMAGE in line for line in progress)
    assert any(line.startswith("module.agent_digest.terraform_data.container") for line in progress)

    health = wait_healthy(launch)
    assert health["agent"] == "digest" and health["provider"] == "offline"
    # The bridge port serves the bridge only: an unknown job is a JSON 404 with its code.
    status, body = get(f"{launch.bridge_url}/bridge/jobs/{uuid.uuid4()}", store_agent.token)
    assert (status, body["code"]) == (404, "unknown_job")
    # Its own token is the one the module output gave (the parent registers exactly that).
    assert store_agent.token and len(store_agent.token) == 64
    assert get(f"http://127.0.0.1:{launch.api_port}/events", store_agent.token)[0] == 200
    assert get(f"http://127.0.0.1:{launch.api_port}/events", "wrong")[0] == 401
    assert store_agent.agents.exists("digest")
    assert '# >>> iris-agent digest\nmodule "agent_digest"' in (
        store_agent.agents.agents_file.read_text()
    )


def test_a_second_apply_changes_nothing(store_agent: Installed) -> None:
    agents = store_agent.agents
    assert agents.terraform.plan(var_files=[agents.var_file]) is False


def test_store_mode_container_gets_only_its_identity(store_agent: Installed) -> None:
    info = inspect_container("iris-agent-digest")
    assert info is not None and info["State"]["Running"]
    env = dict(item.split("=", 1) for item in info["Config"]["Env"])
    for name in PLATFORM_TOKEN_VARS:
        assert env[name] == "", f"{name} must be an explicit empty override"
    assert "FROM_ENV_FILE" not in env, "store mode must not get the host env file"
    assert env["IRIS_API_TOKEN"] == store_agent.token
    assert env["AGENT_NAME"] == "digest" and env["IRIS_SECRETS_MODE"] == "store"
    assert env["BRIDGE_PORT"] == str(store_agent.launch.bridge_port)
    assert env["IRIS_API_PORT"] == str(store_agent.launch.api_port)
    assert env["IRIS_SECRET_BROKER_URL"] == "http://127.0.0.1:3000"
    assert info["HostConfig"]["NetworkMode"] == "host"
    assert info["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert info["HostConfig"]["Binds"] == [f"{store_agent.launch.home.resolve()}:/iris/data"]


def test_no_token_in_terraform_output_argv_or_agents_tf(store_agent: Installed) -> None:
    token = store_agent.token
    assert token
    assert not any(token in line for line in store_agent.progress)
    assert not any(token in argv for argv in store_agent.argv)
    assert any("docker run" in argv for argv in store_agent.argv), "the watcher saw the run"
    assert token not in store_agent.agents.agents_file.read_text()
    state = store_agent.agents.terraform.state_file
    assert token in state.read_text(), "the state holds the token..."
    assert state.stat().st_mode & 0o077 == 0, "...so only its owner may read it"
    assert store_agent.agents.var_file.stat().st_mode & 0o077 == 0
