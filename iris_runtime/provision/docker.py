"""Docker-mode sub-agents: one container per agent, declared in ``terraform/agents.tf``.

Spawn adds a block (:mod:`.agents_tf`) between marker comments and applies that module and the
shared runtime image only (``-target``): the image is built when its sources changed, the new
agent runs it, and the other agents keep their containers until a full apply
(``DockerAgents.apply_all``) rolls them onto the new image. Remove destroys the agent's module
(targeted too) and deletes the block; the module's destroy-time provisioner removes the
container. The docker CLI itself (:mod:`.docker_cli`) checks the daemon first and shows what is
really there.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from iris_runtime import data_layout
from iris_runtime.errors import ProvisionError
from iris_runtime.private_files import FILE_MODE, open_private, private_dir, write_private_file
from iris_runtime.provision.agents_tf import (
    AGENT_NAME,
    IMAGE_RESOURCE,
    SECRETS_MODES,
    begin_marker,
    check_agent_name,
    end_marker,
    render_block,
    with_block,
    without_block,
)
from iris_runtime.provision.docker_cli import (
    AGENT_LABEL,
    CONTAINER_PREFIX,
    DOCKER_BIN,
    check_docker,
    container_name,
    container_state,
    containers_on_other_images,
    inspect_container,
    remove_container,
    start_container,
)
from iris_runtime.provision.launch import IDENTITY_VARS, AgentLaunch, Progress
from iris_runtime.provision.public_files import write_public_file
from iris_runtime.provision.terraform import Terraform

# Names that lived here before the agents.tf blocks and the docker CLI got modules of their own.
__all__ = [
    "AGENT_LABEL",
    "AGENT_NAME",
    "CONTAINER_PREFIX",
    "DOCKER_BIN",
    "IMAGE_RESOURCE",
    "MODULE_OWNED_ENV",
    "SECRETS_MODES",
    "DockerAgents",
    "begin_marker",
    "check_agent_name",
    "check_docker",
    "container_name",
    "container_state",
    "containers_on_other_images",
    "end_marker",
    "inspect_container",
    "remove_container",
    "render_block",
    "start_container",
    "with_block",
    "without_block",
]

# Set by the module from its own variables; the rest of a launch's environment is extra_env.
MODULE_OWNED_ENV = IDENTITY_VARS | {"IRIS_API_TOKEN"}


class DockerAgents:
    """Docker-mode agents through ``<repo_dir>/terraform``. Terraform's data and state (which
    holds the agents' tokens, so it is 0600) live in ``<data_dir>/terraform``."""

    kind = "docker"

    def __init__(
        self,
        repo_dir: Path,
        data_dir: Path,
        image: str,
        base_image: str,
        terraform: Terraform,
        env_file: Path | None,
        broker_url: str,
    ) -> None:
        self.repo_dir = repo_dir
        self.state_dir = data_dir / data_layout.TERRAFORM_DIR
        self.image = image
        self.base_image = base_image
        self.terraform = terraform.with_state_dir(self.state_dir)
        self.env_file = env_file
        self.broker_url = broker_url

    @property
    def agents_file(self) -> Path:
        return self.repo_dir / "terraform" / "agents.tf"

    @property
    def var_file(self) -> Path:
        """The root variables of our applies, kept so a person can run the same apply by hand."""
        return self.state_dir / "iris.tfvars.json"

    def preflight(self, name: str) -> None:
        """What install checks before it changes anything, for callers to run before they
        register the agent or create its home: ``name`` is usable for a container
        (InvalidInput), terraform is installed, the Docker daemon answers and agents.tf is
        there (ProvisionError). Writes nothing."""
        check_agent_name(name)
        self._preflight()
        self._read_agents()

    def install(
        self, launch: AgentLaunch, *, secrets_mode: str, unique_token: bool, progress: Progress
    ) -> str | None:
        """Declare the agent and apply its module and the shared image only (targeted): the
        image is built if its sources changed and the container started; the other agents keep
        their containers (and their image) until ``apply_all``. Returns the agent's own API
        token (None when it uses the shared one). On failure the agent is destroyed and its
        block taken out again before the ProvisionError is raised; a failed rollback is part of
        that error's message."""
        self.preflight(launch.name)
        block = render_block(
            name=launch.name,
            bridge_port=launch.bridge_port,
            api_port=launch.api_port,
            data_dir=launch.home.resolve(),
            user=_owner(launch.home),
            secrets_mode=secrets_mode,
            unique_token=unique_token,
            broker_url=launch.environment.get("IRIS_SECRET_BROKER_URL") or None,
            extra_env={k: v for k, v in launch.environment.items() if k not in MODULE_OWNED_ENV},
        )
        module = f"module.agent_{launch.name}"
        with self._locked(progress):
            self._write_agents(with_block(self._read_agents(), launch.name, block))
            progress(f"declared {launch.name} in {self.agents_file}")
            try:
                self._prepare(progress)
                progress(f"terraform apply -target={module} -target={IMAGE_RESOURCE}")
                self.terraform.apply(
                    _fewer_lines(progress),
                    var_files=[self.var_file],
                    targets=[module, IMAGE_RESOURCE],
                )
                value = self.terraform.output(f"agent_{launch.name}")
            except BaseException as exc:
                progress(f"rolling back {launch.name}")
                try:
                    self._take_out(launch.name, progress)
                except ProvisionError as again:
                    # The caller sees the first failure; this one says what may be left over.
                    # In the message itself: the CLI shows only that.
                    note = f"rollback failed too: {again.message}"
                    progress(note)
                    if isinstance(exc, ProvisionError):
                        exc.message = f"{exc.message} ({note})"
                        exc.args = (exc.message, *exc.args[1:])
                self._remove_leftover(launch.name, progress)
                self._settle(progress)
                raise
            self._note_older_containers(progress)
        token = value.get("api_token") if isinstance(value, dict) else None
        if unique_token and not token:
            raise ProvisionError(f"{launch.name}: the agent module gave no api_token")
        return str(token) if token else None

    def remove(self, name: str, progress: Progress) -> bool:
        """Destroy the agent's module (its destroy provisioner removes the container), take its
        block out and settle the root outputs. A container left without a block is removed
        directly. True when there was anything to remove."""
        with self._locked(progress):
            _, found = without_block(self._read_agents(), name)
            if found:
                self._preflight()
                self._prepare(progress)
                self._take_out(name, progress)
                self._settle(progress)
        return self._remove_leftover(name, progress) or found

    def apply_all(self, progress: Progress) -> None:
        """Apply the whole root (``terraform apply`` without targets): rebuild the image if its
        sources changed and replace every agent container that does not run it yet (those
        agents restart), and drop the outputs of removed agents. Takes the same lock as spawn
        and remove."""
        with self._locked(progress):
            self._preflight()
            self._read_agents()
            self._prepare(progress)
            progress("terraform apply")
            self.terraform.apply(_fewer_lines(progress), var_files=[self.var_file])

    def exists(self, name: str) -> bool:
        _, found = without_block(self._read_agents(), name)
        if found:
            return True
        try:
            return inspect_container(container_name(name)) is not None
        except ProvisionError:
            return False

    # -- steps ----------------------------------------------------------------------------

    def _preflight(self) -> None:
        self.terraform.executable()  # clear error when terraform is missing
        check_docker()

    def _prepare(self, progress: Progress) -> None:
        # init on every run: each new module block has to be installed (local: no network).
        self._write_var_file()
        self.terraform.init(progress)

    def _take_out(self, name: str, progress: Progress) -> None:
        """Destroy module.agent_NAME while its block is still there (Terraform runs destroy
        provisioners only for resources still in the configuration), then delete the block.
        Targeted, so the image and the other agents are left alone."""
        module = f"module.agent_{name}"
        progress(f"terraform destroy {module}")
        try:
            self.terraform.destroy(
                _fewer_lines(progress), var_files=[self.var_file], targets=[module]
            )
        finally:
            text, found = without_block(self._read_agents(), name)
            if found:
                self._write_agents(text)
                progress(f"removed {name} from {self.agents_file}")

    def _remove_leftover(self, name: str, progress: Progress) -> bool:
        """Remove the agent's container if one is still there (made by hand, or left by a run
        Terraform no longer tracks)."""
        try:
            removed = remove_container(container_name(name))
        except ProvisionError:
            return False  # no daemon: nothing we can see is left
        if removed:
            progress(f"removed leftover container {container_name(name)}")
        return removed

    def _note_older_containers(self, progress: Progress) -> None:
        """Say which agents still run an older build of the image (spawn leaves them alone)."""
        try:
            older = containers_on_other_images(self.image)
        except ProvisionError:
            return
        if older:
            progress(
                f"note: {', '.join(older)} still run{'s' if len(older) == 1 else ''} an older "
                f"build of {self.image}; a full apply restarts them on the current one (see "
                "'Updating the agents' image' in docs/docker.md)"
            )

    def _settle(self, progress: Progress) -> None:
        """After a removal the state still holds the agent's root output (a targeted run cannot
        drop it): apply once more when that is all there is to change. Pending resource
        changes (a rebuilt image, other agents) are left for the next spawn, not done as a
        side effect of a removal (the output then stays until the next full apply: Terraform
        1.11 cannot apply a refresh-only plan that only drops outputs). The agent is gone
        already: a failure is only reported."""
        try:
            changed, resources = self.terraform.planned_changes(var_files=[self.var_file])
            if changed and not resources:
                self.terraform.apply(_fewer_lines(progress), var_files=[self.var_file])
        except ProvisionError as exc:
            progress(f"note: the follow-up apply failed ({exc}); the next spawn retries it")

    def _write_var_file(self) -> None:
        variables = {
            "enable_docker_agents": True,
            "image": self.image,
            "base_image": self.base_image,
            "repo_dir": str(self.repo_dir.resolve()),
            "env_file": str(self.env_file.resolve()) if self.env_file else "",
            "broker_url": self.broker_url,
        }
        write_private_file(self.var_file, (json.dumps(variables, indent=2) + "\n").encode())

    @property
    def lock_file(self) -> Path:
        return self.state_dir / "agents.lock"

    @contextlib.contextmanager
    def _locked(self, progress: Progress) -> Iterator[None]:
        """One spawn, remove or full apply at a time edits agents.tf and applies. An exclusive
        flock on ``agents.lock`` (0600, never deleted); says so when it has to wait."""
        private_dir(self.state_dir)
        fd = open_private(self.lock_file)
        try:
            os.fchmod(fd, FILE_MODE)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                progress(f"waiting for another spawn/remove to finish (lock {self.lock_file})")
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read_agents(self) -> str:
        try:
            return self.agents_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ProvisionError(
                f"{self.agents_file} not found: IRIS_REPO_DIR ({self.repo_dir}) must be the Iris "
                "checkout (it holds terraform/)"
            ) from None

    def _write_agents(self, text: str) -> None:
        write_public_file(self.agents_file, text)


# Our destroys of one agent target its module on purpose; Terraform warns about it anyway.
_TARGET_NOTES = (
    "warning: Resource targeting is in effect",
    "warning: Applied changes may be incomplete",
)
_IMAGE_LINE = f"{IMAGE_RESOURCE}[0]: "
_BUILD_LINES_SHOWN = re.compile(
    r"Step \d+/\d+ :|Successfully (built|tagged)|#\d+ \[|ERROR|error|"  # classic and BuildKit
    r"[a-z]+…$|[a-z]+ done \(\d+s\)$|still working|[a-z]+ failed$"  # the driver's own lines
)


def _fewer_lines(progress: Progress) -> Progress:
    """Progress without the image build's chatter (its steps and result stay; a failed build's
    output comes with the error) and without Terraform's notes on suppressed output."""

    def show(line: str) -> None:
        if "output suppressed due to sensitive value" in line or line.startswith(_TARGET_NOTES):
            return
        if line.startswith(_IMAGE_LINE) and not _BUILD_LINES_SHOWN.match(
            line.removeprefix(_IMAGE_LINE)
        ):
            return
        progress(line)

    return show


def _owner(path: Path) -> str:
    """uid:gid owning the agent's home: the container runs as them, so what it writes there
    stays the agent's (and a 0700 home stays readable to it)."""
    info = path.stat()
    return f"{info.st_uid}:{info.st_gid}"
