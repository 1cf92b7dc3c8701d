"""The Terraform side of Docker mode without a Docker daemon: the module's own `terraform test`
(secrets_mode validation, the store/proxy precondition), the root validates with and without an
agent block written by spawn, and the driver's behaviour (errors, state file mode, Ctrl-C).

Needs only the `terraform` binary (nothing is downloaded: the configuration uses built-in
resources); skipped with the reason when it is absent.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from iris_runtime.agents.registry import NAME_RE
from iris_runtime.errors import InvalidInput, ProvisionError
from iris_runtime.private_files import file_lock
from iris_runtime.provision.agents_tf import (
    AGENT_NAME,
    check_agent_name,
    render_block,
    with_block,
    without_block,
)
from iris_runtime.provision.docker import DockerAgents
from iris_runtime.provision.launch import AgentLaunch
from iris_runtime.provision.terraform import Terraform, describe

REPO = Path(__file__).resolve().parents[2]
TERRAFORM = shutil.which("terraform")
needs_terraform = pytest.mark.skipif(
    TERRAFORM is None, reason="needs the terraform binary (docs/docker.md says how to get it)"
)


def terraform_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_")}
    return {**env, "TF_DATA_DIR": str(data_dir), "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1"}


def copy_root(tmp_path: Path) -> Path:
    root = tmp_path / "terraform"
    shutil.copytree(REPO / "terraform", root, ignore=shutil.ignore_patterns(".terraform"))
    return root


def block(name: str = "digest", **overrides: object) -> str:
    args: dict[str, object] = {
        "name": name,
        "bridge_port": 4001,
        "api_port": 4101,
        "data_dir": Path("/iris/data/agents") / name,
        "user": "0:0",
        "secrets_mode": "store",
        "unique_token": True,
        "broker_url": "http://127.0.0.1:3000",
        "extra_env": {"IRIS_PROVIDER": "offline", "IRIS_MODEL": 'odd "quoted" ${not.a.ref}'},
    }
    args.update(overrides)
    return render_block(**args)  # type: ignore[arg-type]


@needs_terraform
def test_module_terraform_test_covers_validation_and_precondition(tmp_path: Path) -> None:
    module = REPO / "terraform" / "modules" / "agent"
    env = terraform_env(tmp_path / "tf-data")
    init = subprocess.run(
        ["terraform", "init", "-input=false", "-no-color"],
        cwd=module,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert init.returncode == 0, init.stdout + init.stderr
    result = subprocess.run(
        ["terraform", "test", "-no-color"],
        cwd=module,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    for run in (
        "an_unknown_secrets_mode_is_rejected",
        "store_mode_requires_unique_api_token",
        "proxy_mode_requires_unique_api_token",
        "store_mode_with_its_own_token_passes_only_the_identity",
        "every_registry_name_is_accepted",
        "a_name_the_registry_refuses_is_rejected",
    ):
        assert f'run "{run}"... pass' in out
    assert "0 failed" in out


@needs_terraform
def test_root_validates_empty_and_with_a_rendered_agent_block(tmp_path: Path) -> None:
    root = copy_root(tmp_path)
    tf = Terraform(root, state_dir=tmp_path / "state")
    tf.init()
    assert not [d for d in tf.validate() if d.severity == "error"]

    agents = root / "agents.tf"
    original = agents.read_text()
    text = with_block(original, "digest", block())
    text = with_block(text, "env-agent", block("env-agent", secrets_mode="env", unique_token=False))
    text = with_block(text, "9_lives", block("9_lives"))  # any registry name is an HCL name
    agents.write_text(text)
    tf.init()  # new module calls need init (no network: local modules only)
    tf.validate()
    fmt = subprocess.run(
        ["terraform", "fmt", "-check", "-diff", str(agents)],
        capture_output=True,
        text=True,
        timeout=60,
        env=terraform_env(tmp_path / "state" / ".terraform"),
    )
    assert fmt.returncode == 0, f"spawn writes agents.tf in terraform fmt style:\n{fmt.stdout}"

    # Removing both blocks gives back the file as it was, byte for byte.
    text, found = without_block(agents.read_text(), "digest")
    assert found
    text, found = without_block(text, "env-agent")
    assert found
    text, found = without_block(text, "9_lives")
    assert found and text == original


def test_docker_agent_names_are_the_registry_names() -> None:
    assert f"^{AGENT_NAME.pattern}$" == NAME_RE.pattern
    for name in ("my_agent", "9lives", "a" * 63, "x-_-y"):
        check_agent_name(name)
    for name in ("", "My", "-x", "_x", "a.b", "a" * 64):
        with pytest.raises(InvalidInput, match="cannot be used for a container"):
            check_agent_name(name)


def fake_docker_agents(tmp_path: Path) -> DockerAgents:
    """DockerAgents over a copy of the root; nothing here reaches Docker or Terraform."""
    root = copy_root(tmp_path / "repo")
    return DockerAgents(
        root.parent, tmp_path / "data", "img:test", "base", Terraform(root), None, ""
    )


def test_a_failed_rollback_is_part_of_the_error_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents = fake_docker_agents(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    launch = AgentLaunch("digest", home, 4001, 4101, ("iris", "serve"), {})

    def fail(message: str) -> object:
        def raiser(*args: object, **kwargs: object) -> None:
            raise ProvisionError(message)

        return raiser

    monkeypatch.setattr(agents, "preflight", lambda name: None)
    monkeypatch.setattr(agents, "_prepare", lambda progress: None)
    monkeypatch.setattr(agents.terraform, "apply", fail("terraform apply failed: boom"))
    monkeypatch.setattr(agents, "_take_out", fail("terraform apply failed: daemon gone"))
    monkeypatch.setattr(agents, "_remove_leftover", lambda name, progress: False)
    monkeypatch.setattr(agents, "_settle", lambda progress: None)
    with pytest.raises(ProvisionError) as caught:
        agents.install(launch, secrets_mode="env", unique_token=False, progress=print)
    assert caught.value.message == (
        "terraform apply failed: boom (rollback failed too: terraform apply failed: daemon gone)"
    )
    assert str(caught.value) == caught.value.message


def test_a_waiting_spawn_or_remove_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nobody-listens.sock")
    agents = fake_docker_agents(tmp_path)
    lines: list[str] = []
    agents.remove("nobody", lines.append)  # the lock is free: nothing said about it
    assert not lines
    waiting = threading.Event()

    def progress(line: str) -> None:
        lines.append(line)
        waiting.set()

    with file_lock(agents.lock_file):  # another spawn holds it
        remover = threading.Thread(target=agents.remove, args=("nobody", progress))
        remover.start()
        assert waiting.wait(10)
        assert remover.is_alive(), "it waits for the lock"
    remover.join(10)
    assert not remover.is_alive()
    assert lines == [
        f"waiting for another spawn/remove to finish (lock {agents.state_dir / 'agents.lock'})"
    ]


def test_agent_blocks_are_replaced_not_duplicated() -> None:
    text = with_block("# header\n", "digest", block())
    again = with_block(text, "digest", block(bridge_port=4002, api_port=4102))
    assert again.count("# >>> iris-agent digest") == 1
    assert "bridge_port      = 4002" in again and "4001" not in again
    # Template sequences in values are escaped: no interpolation of what an env value holds.
    assert again.count("${not.a.ref}") == again.count("$${not.a.ref}") == 1
    with pytest.raises(ProvisionError, match="no matching"):
        without_block("# >>> iris-agent digest\nmodule {}\n", "digest")
    with pytest.raises(ProvisionError, match="not an environment variable name"):
        block(extra_env={"BAD NAME": "x"})


@needs_terraform
def test_invalid_configuration_is_a_clear_error(tmp_path: Path) -> None:
    root = copy_root(tmp_path)
    (root / "broken.tf").write_text('resource "terraform_data" "x" {\n  input = var.missing\n}\n')
    tf = Terraform(root, state_dir=tmp_path / "state")
    tf.init()
    with pytest.raises(ProvisionError, match="Reference to undeclared input variable"):
        tf.validate()
    with pytest.raises(ProvisionError, match="undeclared input variable"):
        tf.apply()


def test_missing_terraform_says_how_to_get_it(tmp_path: Path) -> None:
    tf = Terraform(tmp_path, state_dir=tmp_path / "state", binary="/nonexistent/terraform")
    with pytest.raises(ProvisionError, match=r"terraform not found .*install Terraform"):
        tf.init()


@needs_terraform
def test_state_is_private_outside_the_checkout_and_variables_stay_off_argv(
    tmp_path: Path,
) -> None:
    root = tmp_path / "config"
    root.mkdir()
    (root / "main.tf").write_text(
        textwrap.dedent(
            """\
            terraform {
              backend "local" {}
            }
            variable "token" {
              type      = string
              sensitive = true
            }
            resource "terraform_data" "holder" {
              input = var.token
            }
            """
        )
    )
    secret = "s3cret-" + os.urandom(8).hex()
    tf = Terraform(root, state_dir=tmp_path / "state")
    lines: list[str] = []
    old_umask = os.umask(0o022)  # a permissive caller: Terraform still writes 0600
    try:
        tf.init(lines.append)
        tf.apply(lines.append, variables={"token": secret})
        tf.apply(lines.append, variables={"token": secret + "-2"})  # writes a backup too
    finally:
        os.umask(old_umask)
    assert not (root / "terraform.tfstate").exists() and not (root / ".terraform").exists()
    state_files = list((tmp_path / "state").glob("terraform.tfstate*"))
    assert len(state_files) == 2
    for path in state_files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert secret in (tmp_path / "state" / "terraform.tfstate").read_text()  # it holds secrets
    assert not any(secret in line for line in lines)
    assert not list((tmp_path / "state").glob("*.tfvars.json")), "the run's var file is gone"
    assert any("Apply complete" in line for line in lines)
    assert tf.plan(variables={"token": secret + "-2"}) is False
    assert tf.plan(variables={"token": "other"}) is True


def test_json_messages_become_short_lines() -> None:
    hook = {"resource": {"addr": "module.agent_x.terraform_data.container"}, "action": "create"}
    assert describe({"type": "apply_start", "hook": hook}) == (
        "module.agent_x.terraform_data.container: create…"
    )
    done = {"type": "apply_complete", "hook": {**hook, "elapsed_seconds": 3}}
    assert describe(done) == "module.agent_x.terraform_data.container: create done (3s)"
    warning = {"type": "diagnostic", "diagnostic": {"severity": "warning", "summary": "careful"}}
    assert describe(warning) == "warning: careful"
    assert describe({"type": "version", "terraform": "1.11.4"}) is None


# The driver takes Ctrl-C as a terminal's foreground process does, whatever the suite inherited
# (a shell that starts it in the background leaves SIGINT ignored, and children keep that).
SLOW_APPLY = """\
import signal
import sys
from pathlib import Path
from iris_runtime.provision.terraform import Terraform
signal.signal(signal.SIGINT, signal.default_int_handler)
tf = Terraform(Path(sys.argv[1]), state_dir=Path(sys.argv[2]))
tf.init()
try:
    tf.apply(lambda line: print(line, flush=True))
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


@needs_terraform
def test_ctrl_c_stops_terraform_and_releases_the_state_lock(tmp_path: Path) -> None:
    root = tmp_path / "config"
    root.mkdir()
    (root / "main.tf").write_text(
        textwrap.dedent(
            """\
            terraform {
              backend "local" {}
            }
            resource "terraform_data" "slow" {
              provisioner "local-exec" {
                command = "echo started; exec sleep 60"
              }
            }
            """
        )
    )
    state = tmp_path / "state"
    driver = subprocess.Popen(
        [sys.executable, "-c", SLOW_APPLY, str(root), str(state)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert driver.stdout is not None
    seen = []
    for line in driver.stdout:  # wait until the provisioner runs (terraform holds the lock)
        seen.append(line)
        if line.rstrip().endswith(": started"):
            break
    driver.send_signal(signal.SIGINT)  # what Ctrl-C does to the foreground process
    out, err = driver.communicate(timeout=90)
    assert driver.returncode == 130, "".join(seen) + out + err
    assert "interrupted" in out
    # The driver returned only after Terraform exited, so the lock is free again: a plan that
    # may not wait for it succeeds.
    assert not (state / ".terraform.tfstate.lock.info").exists()
    Terraform(root, state_dir=state, lock_timeout="0s").plan()
