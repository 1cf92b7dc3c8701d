"""Docker-mode agents end to end against a real dockerd and the real terraform binary.

`DockerAgents.install` writes the agent's block into `terraform/agents.tf` (in a copy of the
checkout), applies: the root's shared resource builds the runtime image from the Dockerfile on a
base imported from the debootstrap tree, the module starts the container; the agent then answers
`/health` on its API port and the bridge's job endpoint on its bridge port. A second apply changes
nothing, `remove` takes the container away. A spawn after the image's sources changed builds the
new image for the new agent only: the others keep their containers until a full apply. `preflight`
refuses what install would refuse, before anything is written. Secrets: the platform tokens reach
the container set empty whatever the env file says, a store-mode container gets no env file at
all, and no token shows in Terraform's output or in any process's argv.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from iris_runtime.errors import InvalidInput, ProvisionError
from iris_runtime.provision.docker import DockerAgents
from iris_runtime.provision.docker_cli import (
    check_docker,
    container_name,
    container_state,
    inspect_container,
)
from iris_runtime.provision.launch import PLATFORM_TOKEN_VARS, AgentLaunch
from iris_runtime.provision.terraform import Terraform
from tests.provisioning.dockerd import (  # noqa: F401  (fixtures)
    REPO,
    Dockerd,
    docker_base_image,
    docker_repo,
    dockerd,
)
from tests.provisioning.rootfs import debian_rootfs, require_root_and  # noqa: F401

IMAGE = "iris-runtime:test"
ROLL_IMAGE = "iris-runtime:roll-test"
LONGEST_NAME = "9_lives-" + "x" * 55  # 63 characters: the registry's longest name
PARENT_SECRETS = {
    "TELEGRAM_BOT_TOKEN": "parent-telegram-" + uuid.uuid4().hex,
    "IRIS_SLACK_BOT_TOKEN": "xoxb-parent-" + uuid.uuid4().hex,
    "IRIS_SLACK_APP_TOKEN": "xapp-parent-" + uuid.uuid4().hex,
    "IRIS_API_TOKEN": "shared-" + uuid.uuid4().hex,
}
START_TIMEOUT = 90.0
# The first test pays for the session's debootstrap tree (about a minute, more on a slow mirror)
# and the image build; the default per-test timeout is too short for that setup.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    require_root_and("dockerd", "docker", "debootstrap", "terraform")


def free_bridge_port() -> int:
    """A bridge port whose API port (+100) is free too; containers share the host network."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port + 100 > 65535:
            continue
        with socket.socket() as first, socket.socket() as second:
            try:
                first.bind(("127.0.0.1", port))
                second.bind(("127.0.0.1", port + 100))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair")


def get(url: str, token: str | None = None) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def wait_healthy(launch: AgentLaunch) -> dict[str, object]:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            status, body = get(launch.health_url)
            if status == 200:
                return body
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            state = container_state(f"iris-agent-{launch.name}")
            raise AssertionError(f"{launch.name} never became healthy (container: {state})")
        time.sleep(0.3)


def make_launch(home_root: Path, name: str, mode: str, broker: str) -> AgentLaunch:
    home = home_root / name
    home.mkdir(parents=True, mode=0o700)
    bridge = free_bridge_port()
    environment = {
        "AGENT_NAME": name,
        "BRIDGE_PORT": str(bridge),
        "IRIS_API_PORT": str(bridge + 100),
        "IRIS_API_HOST": "127.0.0.1",
        "IRIS_DATA_DIR": str(home),
        "IRIS_SECRETS_MODE": mode,
        "IRIS_SECRET_BROKER_URL": broker,
        "IRIS_PROVIDER": "offline",
        "IRIS_LOG_LEVEL": "warning",
        **dict.fromkeys(PLATFORM_TOKEN_VARS, ""),
    }
    return AgentLaunch(
        name=name,
        home=home,
        bridge_port=bridge,
        api_port=bridge + 100,
        command=("iris", "serve"),
        environment=environment,
    )


class ArgvWatcher:
    """Samples every process's argv (what `ps` shows) while a block runs."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                with contextlib.suppress(OSError):
                    self.seen.add(
                        cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    )
            time.sleep(0.05)

    def __enter__(self) -> ArgvWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Installed:
    agents: DockerAgents
    launch: AgentLaunch
    token: str | None
    progress: list[str]
    argv: set[str]
    env_file: Path


@pytest.fixture(scope="module")
def docker_agents(
    dockerd: Dockerd,  # noqa: F811
    docker_base_image: str,  # noqa: F811
    docker_repo: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> DockerAgents:
    data = tmp_path_factory.mktemp("docker-parent")
    env_file = data / ".env"
    env_file.write_text(
        "".join(f"{k}={v}\n" for k, v in PARENT_SECRETS.items()) + "FROM_ENV_FILE=yes\n"
    )
    env_file.chmod(0o600)
    return DockerAgents(
        repo_dir=docker_repo,
        data_dir=data,
        image=IMAGE,
        base_image=docker_base_image,
        terraform=Terraform(docker_repo / "terraform"),
        env_file=env_file,
        broker_url="http://127.0.0.1:3000",
    )


@pytest.fixture(scope="module")
def store_agent(
    docker_agents: DockerAgents, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    """One store-mode agent with its own token: installing it builds the image too."""
    launch = make_launch(
        tmp_path_factory.mktemp("homes"), "digest", "store", "http://127.0.0.1:3000"
    )
    progress: list[str] = []
    with ArgvWatcher() as watcher:
        token = docker_agents.install(
            launch, secrets_mode="store", unique_token=True, progress=progress.append
        )
    assert docker_agents.env_file is not None
    yield Installed(docker_agents, launch, token, progress, watcher.seen, docker_agents.env_file)
    docker_agents.remove(launch.name, progress.append)


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


def test_env_mode_gets_the_env_file_but_never_the_parent_chat_tokens(
    docker_agents: DockerAgents, tmp_path_factory: pytest.TempPathFactory
) -> None:
    launch = make_launch(tmp_path_factory.mktemp("homes"), "envy", "env", "")
    token = docker_agents.install(launch, secrets_mode="env", unique_token=False, progress=print)
    try:
        assert token is None  # the shared token from the env file
        wait_healthy(launch)
        info = inspect_container("iris-agent-envy")
        assert info is not None
        env = dict(item.split("=", 1) for item in info["Config"]["Env"])
        assert env["FROM_ENV_FILE"] == "yes"
        for name in PLATFORM_TOKEN_VARS:
            assert env[name] == "", f"{name} from the env file must be overridden empty"
        assert env["IRIS_API_TOKEN"] == PARENT_SECRETS["IRIS_API_TOKEN"]
    finally:
        assert docker_agents.remove("envy", print)
    assert inspect_container("iris-agent-envy") is None
    assert not docker_agents.exists("envy")
    assert not docker_agents.remove("envy", print)


def test_remove_takes_the_container_away(
    docker_agents: DockerAgents, tmp_path_factory: pytest.TempPathFactory
) -> None:
    launch = make_launch(
        tmp_path_factory.mktemp("homes"), "brief", "store", "http://127.0.0.1:3000"
    )
    docker_agents.install(launch, secrets_mode="store", unique_token=True, progress=print)
    assert container_state("iris-agent-brief") in {"running", "restarting"}
    lines: list[str] = []
    assert docker_agents.remove("brief", lines.append)
    print("\n".join(lines))
    assert any("module.agent_brief.terraform_data.container: delete" in line for line in lines)
    assert not any("leftover" in line for line in lines), "the module's destroy removed it"
    assert inspect_container("iris-agent-brief") is None
    assert "iris-agent brief" not in docker_agents.agents_file.read_text()
    assert not docker_agents.exists("brief")
    # The follow-up apply dropped its output too: nothing is left to change.
    assert docker_agents.terraform.plan(var_files=[docker_agents.var_file]) is False


def test_a_failed_apply_rolls_back(
    docker_agents: DockerAgents, tmp_path_factory: pytest.TempPathFactory
) -> None:
    launch = make_launch(tmp_path_factory.mktemp("homes"), "broken", "store", "")
    before = docker_agents.agents_file.read_text()
    # A home that is not a directory: docker run fails to mount it.
    bad = AgentLaunch(
        name=launch.name,
        home=launch.home / "not-a-dir",
        bridge_port=launch.bridge_port,
        api_port=launch.api_port,
        command=launch.command,
        environment=launch.environment,
    )
    bad.home.write_text("")
    with pytest.raises(ProvisionError, match="terraform apply failed"):
        docker_agents.install(bad, secrets_mode="store", unique_token=True, progress=print)
    assert docker_agents.agents_file.read_text() == before
    assert inspect_container("iris-agent-broken") is None
    assert not docker_agents.exists("broken")
    assert docker_agents.terraform.planned_changes(var_files=[docker_agents.var_file]) == (
        False,
        [],
    )


def test_preflight_refuses_a_name_docker_cannot_use_and_writes_nothing(
    docker_agents: DockerAgents,
) -> None:
    before = docker_agents.agents_file.read_text()
    docker_agents.preflight("my_agent")  # any registry name works in Docker mode
    docker_agents.preflight(LONGEST_NAME)
    for bad in ("My.Agent", "-x", "a" * 64):
        with pytest.raises(InvalidInput, match="cannot be used for a container"):
            docker_agents.preflight(bad)
    assert docker_agents.agents_file.read_text() == before


def image_id(dockerd: Dockerd, image: str) -> str:  # noqa: F811
    result = dockerd.docker("image", "inspect", "--format", "{{.Id}}", image)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_new_image_reaches_the_new_agent_only_until_a_full_apply(
    dockerd: Dockerd,  # noqa: F811
    docker_base_image: str,  # noqa: F811
    docker_repo: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    # A checkout of its own (hard links: instant), with an agents.tf of its own: a full apply
    # applies every block of agents.tf, and this test's state must not meet the other tests'.
    repo = tmp_path / "repo"
    shutil.copytree(docker_repo, repo, copy_function=os.link)
    (repo / "terraform" / "agents.tf").unlink()
    shutil.copy(REPO / "terraform" / "agents.tf", repo / "terraform" / "agents.tf")
    agents = DockerAgents(
        repo_dir=repo,
        data_dir=tmp_path / "parent",
        image=ROLL_IMAGE,
        base_image=docker_base_image,
        terraform=Terraform(repo / "terraform"),
        env_file=None,
        broker_url="http://127.0.0.1:3000",
    )
    homes = tmp_path / "homes"
    first = [make_launch(homes, name, "store", "") for name in ("my_agent", "9lives")]
    newest = make_launch(homes, LONGEST_NAME, "store", "")
    # A new file in the image's sources: part of its hash (iris_runtime/**) and build context.
    marker = repo / "iris_runtime" / "roll-test-marker.txt"
    try:
        for launch in first:
            agents.install(launch, secrets_mode="store", unique_token=True, progress=print)
        old_image = image_id(dockerd, ROLL_IMAGE)
        before = {launch.name: inspect_container(container_name(launch.name)) for launch in first}

        marker.write_text(uuid.uuid4().hex)
        lines: list[str] = []
        agents.install(newest, secrets_mode="store", unique_token=True, progress=lines.append)
        print("\n".join(lines))
        assert any(ln.startswith("terraform_data.iris_runtime_image[0]: create") for ln in lines)
        new_image = image_id(dockerd, ROLL_IMAGE)
        assert new_image != old_image
        info = inspect_container(container_name(LONGEST_NAME))
        assert info is not None and info["Image"] == new_image
        # The others were not touched: same containers, still running the image they had.
        assert not any(
            ln.startswith(("module.agent_my_agent", "module.agent_9lives")) for ln in lines
        )
        for name, was in before.items():
            now = inspect_container(container_name(name))
            assert was is not None and now is not None
            assert (now["Id"], now["Image"]) == (was["Id"], old_image), name
            assert now["State"]["StartedAt"] == was["State"]["StartedAt"], f"{name} restarted"
        assert any(
            ln.startswith(f"note: 9lives, my_agent still run an older build of {ROLL_IMAGE}")
            for ln in lines
        )
        wait_healthy(newest)

        # The documented roll: a full apply replaces exactly the containers on the old image.
        lines.clear()
        agents.apply_all(lines.append)
        print("\n".join(lines))
        for name, was in before.items():
            now = inspect_container(container_name(name))
            assert was is not None and now is not None
            assert now["Id"] != was["Id"] and now["Image"] == new_image, name
        assert sorted(ln for ln in lines if ln.startswith("plan: ")) == [
            "plan: replace module.agent_9lives.terraform_data.container",
            "plan: replace module.agent_my_agent.terraform_data.container",
        ]
        assert agents.terraform.plan(var_files=[agents.var_file]) is False
    finally:
        for launch in [*first, newest]:
            agents.remove(launch.name, print)
    for launch in [*first, newest]:
        assert inspect_container(container_name(launch.name)) is None


def test_docker_unavailable_is_a_clear_error(
    tmp_path: Path,
    docker_repo: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nobody-listens.sock")
    with pytest.raises(ProvisionError, match="Docker daemon not reachable at unix://"):
        check_docker()
    agents = DockerAgents(
        docker_repo, tmp_path, IMAGE, "base", Terraform(docker_repo / "terraform"), None, ""
    )
    before = agents.agents_file.read_text()
    # What spawn asks before it registers the agent: nothing is written, not even the state dir.
    with pytest.raises(ProvisionError, match="Docker daemon not reachable"):
        agents.preflight("nodocker")
    assert not agents.state_dir.exists()
    with pytest.raises(InvalidInput):  # the name is checked first
        agents.preflight("No_Docker")
    launch = make_launch(tmp_path / "homes", "nodocker", "store", "")
    with pytest.raises(ProvisionError, match="Docker daemon not reachable"):
        agents.install(launch, secrets_mode="store", unique_token=True, progress=print)
    assert agents.agents_file.read_text() == before


def test_missing_terraform_is_a_clear_error(tmp_path: Path, docker_repo: Path) -> None:  # noqa: F811
    terraform = Terraform(docker_repo / "terraform", binary="/nonexistent/terraform")
    agents = DockerAgents(docker_repo, tmp_path, IMAGE, "base", terraform, None, "")
    before = agents.agents_file.read_text()
    with pytest.raises(ProvisionError, match=r"terraform not found.*install Terraform"):
        agents.preflight("noterraform")
    assert not agents.state_dir.exists()
    launch = make_launch(tmp_path / "homes", "noterraform", "store", "")
    with pytest.raises(ProvisionError, match=r"terraform not found.*install Terraform"):
        agents.install(launch, secrets_mode="store", unique_token=True, progress=print)
    assert agents.agents_file.read_text() == before
    assert os.environ.get("DOCKER_HOST")  # the session's daemon is untouched
