"""The sub-agent unit rendered from agents/service/iris-agent.service.j2: literal environment, no
EnvironmentFile=, no token values, systemd escaping, refusals, and `systemd-analyze verify` with
nothing on stderr (on this host, where systemd need not be PID 1)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from iris_runtime.errors import ProvisionError
from iris_runtime.provision.launch import PLATFORM_TOKEN_VARS, AgentLaunch
from iris_runtime.provision.unit import render_unit, template_path, verify_unit

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = template_path(REPO)
TOKEN = "tok-3f9a1c77e2b84d0c9e51a6b2d4c8f013"

needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="needs systemd-analyze (systemd package)"
)


def agent_home(tmp_path: Path, name: str = "digest") -> Path:
    home = tmp_path / "agents" / name
    home.mkdir(parents=True)
    token = home / "api-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return home


def make_launch(home_dir: Path, **changes: object) -> AgentLaunch:
    home = home_dir
    values: dict[str, object] = {
        "name": home.name,
        "home": home,
        "bridge_port": 4001,
        "api_port": 4101,
        "command": (sys.executable, "-m", "iris_runtime", "serve"),
        "environment": {
            "AGENT_NAME": home.name,
            "BRIDGE_PORT": "4001",
            "IRIS_API_PORT": "4101",
            "IRIS_API_HOST": "127.0.0.1",
            "IRIS_DATA_DIR": str(home),
            "IRIS_SECRETS_MODE": "store",
            "IRIS_SECRET_BROKER_URL": "http://127.0.0.1:3000",
            "IRIS_PROVIDER": "anthropic",
            "IRIS_MODEL": "claude-sonnet-4-5",
            "IRIS_SLACK_APP_TOKEN": "",
            "IRIS_SLACK_BOT_TOKEN": "",
            "TELEGRAM_BOT_TOKEN": "",
        },
        "protected_paths": (Path("/var/lib/iris/secrets"), Path("/var/lib/iris/agents.json")),
    }
    values.update(changes)
    return AgentLaunch(**values)  # type: ignore[arg-type]


HARDENING = (
    "NoNewPrivileges=yes",
    "PrivateDevices=yes",
    "PrivateIPC=yes",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectControlGroups=yes",
    "RestrictSUIDSGID=yes",
    "RestrictRealtime=yes",
    "LockPersonality=yes",
    "SystemCallArchitectures=native",
    "CapabilityBoundingSet=",
    "AmbientCapabilities=",
    "ProtectSystem=strict",
    "PrivateUsers=yes",
    "ProtectProc=invisible",
    "ProcSubset=pid",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
    "RestrictNamespaces=yes",
    "ProtectClock=yes",
    "ProtectHostname=yes",
    "ProtectKernelLogs=yes",
    "SystemCallFilter=@system-service",
    "UMask=0077",
)


def directives(unit: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith(f"{key}=")]


def verified(unit: str, tmp_path: Path, name: str = "digest") -> None:
    path = tmp_path / "verify" / f"iris-agent-{name}.service"
    path.parent.mkdir(exist_ok=True)
    path.write_text(unit)
    verify_unit(path)  # raises with systemd-analyze's stderr when it prints anything


@needs_systemd_analyze
def test_unit_has_literal_environment_no_env_file_no_token_and_verifies(tmp_path: Path) -> None:
    home = agent_home(tmp_path)
    launch = make_launch(home)
    unit = render_unit(launch, TEMPLATE)

    assert "EnvironmentFile" not in unit
    assert TOKEN not in unit
    environment = directives(unit, "Environment")
    for var in PLATFORM_TOKEN_VARS:
        assert f'"{var}="' in environment
    assert '"AGENT_NAME=digest"' in environment
    assert '"IRIS_SECRET_BROKER_URL=http://127.0.0.1:3000"' in environment
    assert directives(unit, "ExecStart") == [f'"{sys.executable}" "-m" "iris_runtime" "serve"']
    assert directives(unit, "WorkingDirectory") == [str(home)]
    assert directives(unit, "ReadWritePaths") == [str(home)]
    assert directives(unit, "InaccessiblePaths") == [
        "-/var/lib/iris/secrets",
        "-/var/lib/iris/agents.json",
    ]
    for hardening in HARDENING:
        assert hardening in unit.splitlines()
    assert directives(unit, "MemoryDenyWriteExecute") == []  # Python needs W+X (ctypes)
    assert directives(unit, "Restart") == ["always"]
    verified(unit, tmp_path)


@pytest.mark.parametrize(
    ("level", "namespaces", "families"),
    [
        ("namespace", "user pid ipc uts net mnt cgroup", "AF_UNIX AF_INET AF_INET6 AF_NETLINK"),
        ("namespace:net", "user pid ipc uts mnt cgroup", "AF_UNIX AF_INET AF_INET6"),
    ],
)
def test_the_namespace_level_relaxes_only_what_bubblewrap_needs(
    tmp_path: Path, level: str, namespaces: str, families: str
) -> None:
    launch = make_launch(agent_home(tmp_path))
    launch = make_launch(launch.home, environment={**launch.environment, "IRIS_SANDBOX": level})
    unit = render_unit(launch, TEMPLATE)
    lines = unit.splitlines()
    relaxed = {
        "ProcSubset=pid": None,
        "ProtectHostname=yes": None,
        "ProtectKernelTunables=yes": None,
        "RestrictNamespaces=yes": f"RestrictNamespaces={namespaces}",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6": f"RestrictAddressFamilies={families}",
        "SystemCallFilter=@system-service": "SystemCallFilter=@system-service @mount sethostname",
    }
    for hardening in HARDENING:
        if hardening in relaxed:
            assert hardening not in lines or hardening == relaxed[hardening]
            if relaxed[hardening] is not None:
                assert relaxed[hardening] in lines
        else:
            assert hardening in lines  # everything else stays as for any agent
    verified(unit, tmp_path)


@pytest.mark.parametrize("level", ["host", "gvisor", "docker:box"])
def test_other_levels_keep_the_whole_hardening(tmp_path: Path, level: str) -> None:
    launch = make_launch(agent_home(tmp_path))
    launch = make_launch(launch.home, environment={**launch.environment, "IRIS_SANDBOX": level})
    lines = render_unit(launch, TEMPLATE).splitlines()
    for hardening in HARDENING:
        assert hardening in lines


def test_platform_tokens_are_added_empty_when_the_launch_leaves_them_out(tmp_path: Path) -> None:
    launch = make_launch(agent_home(tmp_path), environment={"AGENT_NAME": "digest"})
    environment = directives(render_unit(launch, TEMPLATE), "Environment")
    assert environment == ['"AGENT_NAME=digest"'] + [f'"{var}="' for var in PLATFORM_TOKEN_VARS]


@needs_systemd_analyze
def test_hostile_characters_are_escaped_for_systemd(tmp_path: Path) -> None:
    home = agent_home(tmp_path)
    launch = make_launch(
        home,
        command=(sys.executable, "-c", 'print("100% $HOME")', "back\\slash", "it's"),
        environment={"NOTE": 'say "hi" 50% off, $5 \\o/'},
    )
    unit = render_unit(launch, TEMPLATE)

    # "%" doubled everywhere (specifiers); "$" doubled only in ExecStart=, which expands $VAR.
    assert directives(unit, "ExecStart") == [
        f'"{sys.executable}" "-c" "print(\\"100%% $$HOME\\")" "back\\\\slash" "it\'s"'
    ]
    assert '"NOTE=say \\"hi\\" 50%% off, $5 \\\\o/"' in directives(unit, "Environment")
    verified(unit, tmp_path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"environment": {"NOTE": "one\nEnvironmentFile=/iris/.env"}}, "newline"),
        ({"environment": {"NOTE": "bell\x07"}}, "control character"),
        ({"command": ("/bin/echo", "two\nlines")}, "newline"),
        ({"command": ("echo", "relative")}, "absolute path"),
        ({"command": ()}, "absolute path"),
        ({"environment": {"BAD-NAME": "x"}}, "invalid environment variable name"),
        ({"environment": {"TELEGRAM_BOT_TOKEN": "123:abc"}}, "credential"),
        ({"environment": {"IRIS_API_TOKEN": "t"}}, "credential"),
        ({"environment": {"ANTHROPIC_API_KEY": "sk"}}, "credential"),
        ({"home": Path("/var/lib/iris/agents/with space")}, "whitespace"),
        ({"home": Path("/var/lib/iris/agents/quote'd")}, "quote"),
        ({"home": Path("relative/home")}, "absolute"),
        ({"home": Path("/var/lib/iris/../etc")}, "normalized"),
        ({"protected_paths": (Path("/secrets\\dir"),)}, "backslash"),
        ({"name": "../../etc/evil"}, "cannot name a systemd unit"),
        ({"name": "a b"}, "cannot name a systemd unit"),
    ],
)
def test_values_that_cannot_be_written_safely_are_refused(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    launch = make_launch(agent_home(tmp_path), **changes)
    with pytest.raises(ProvisionError, match=message):
        render_unit(launch, TEMPLATE)


def test_the_agents_own_token_never_lands_in_its_unit(tmp_path: Path) -> None:
    home = agent_home(tmp_path)
    launch = make_launch(home, environment={"NOTE": f"copied {TOKEN} by mistake"})
    with pytest.raises(ProvisionError, match="API token"):
        render_unit(launch, TEMPLATE)


def test_an_invalid_user_is_refused_and_a_valid_one_is_written(tmp_path: Path) -> None:
    launch = make_launch(agent_home(tmp_path))
    with pytest.raises(ProvisionError, match="invalid user"):
        render_unit(launch, TEMPLATE, user="root\nUser=x")
    with pytest.raises(ProvisionError, match="invalid user or group"):
        render_unit(launch, TEMPLATE, user="iris", group="a b")
    unit = render_unit(launch, TEMPLATE, user="iris-agent")
    assert directives(unit, "User") == ["iris-agent"]
    assert directives(unit, "Group") == []  # the user's own group
    assert directives(render_unit(launch, TEMPLATE, user="u", group="g"), "Group") == ["g"]
    assert directives(render_unit(launch, TEMPLATE), "User") == []


def iris_layout(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """Iris's data dir, its agents dir, an agent home in it and an env file outside."""
    data = tmp_path / "data"
    agents = data / "agents"
    home = agents / "digest"
    home.mkdir(parents=True)
    env_file = tmp_path / "etc" / "iris.env"
    env_file.parent.mkdir()
    env_file.write_text("TELEGRAM_BOT_TOKEN=123:abc\n")
    return data, agents, home, env_file


@needs_systemd_analyze
def test_directories_are_hidden_whole_and_the_home_is_bound_back(tmp_path: Path) -> None:
    data, agents, home, env_file = iris_layout(tmp_path)
    missing = tmp_path / "not-there-yet"
    launch = make_launch(home, protected_paths=(data, agents, env_file, missing))
    unit = render_unit(launch, TEMPLATE, user="iris-agent")

    # Directories become empty read-only tmpfs (a later atomic replace inside stays hidden);
    # files and paths that do not exist stay single InaccessiblePaths= entries ("-": optional).
    assert directives(unit, "TemporaryFileSystem") == [f"{data}:ro", f"{agents}:ro"]
    assert directives(unit, "InaccessiblePaths") == [f"-{env_file}", f"-{missing}"]
    assert directives(unit, "BindPaths") == [str(home)]
    assert directives(unit, "ReadWritePaths") == [str(home)]
    assert directives(unit, "WorkingDirectory") == [str(home)]
    assert directives(unit, "BindReadOnlyPaths") == []  # the interpreter is not in data
    verified(unit, tmp_path)


@needs_systemd_analyze
def test_a_checkout_or_venv_inside_a_hidden_directory_stays_readable(tmp_path: Path) -> None:
    data, agents, home, _ = iris_layout(tmp_path)
    checkout = data / "repo"
    venv_bin = checkout / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(sys.executable)
    launch = make_launch(
        home,
        command=(str(venv_bin / "python"), "-m", "iris_runtime", "serve"),
        protected_paths=(data, agents),
    )
    unit = render_unit(launch, TEMPLATE, user="iris-agent", readable=(checkout,))
    assert directives(unit, "BindReadOnlyPaths") == [f"-{checkout / '.venv'}", f"-{checkout}"]
    verified(unit, tmp_path)


def test_a_home_outside_the_hidden_directories_needs_no_bind(tmp_path: Path) -> None:
    data, _, _, _ = iris_layout(tmp_path)
    home = agent_home(tmp_path / "elsewhere")
    unit = render_unit(make_launch(home, protected_paths=(data,)), TEMPLATE)
    assert directives(unit, "TemporaryFileSystem") == [f"{data}:ro"]
    assert directives(unit, "BindPaths") == []
    assert directives(unit, "ReadWritePaths") == [str(home)]


def test_directories_are_told_apart_on_the_target_root(tmp_path: Path) -> None:
    # A container's file system as seen from here: /var/lib/iris is a directory there only.
    target = tmp_path / "target"
    (target / "var/lib/iris/agents/digest").mkdir(parents=True)
    launch = make_launch(
        Path("/var/lib/iris/agents/digest"),
        protected_paths=(Path("/var/lib/iris"), Path("/etc/iris.env")),
    )
    unit = render_unit(launch, TEMPLATE, root=target)
    assert directives(unit, "TemporaryFileSystem") == ["/var/lib/iris:ro"]
    assert directives(unit, "InaccessiblePaths") == ["-/etc/iris.env"]
    assert directives(unit, "BindPaths") == ["/var/lib/iris/agents/digest"]


@pytest.mark.parametrize("hidden", ["home", "inside"])
def test_hiding_the_agents_own_home_is_refused(tmp_path: Path, hidden: str) -> None:
    home = agent_home(tmp_path)
    (home / "skills").mkdir()
    path = home if hidden == "home" else home / "skills"
    with pytest.raises(ProvisionError, match="home"):
        render_unit(make_launch(home, protected_paths=(path,)), TEMPLATE)


@pytest.mark.parametrize(
    ("home", "protect_home", "private_tmp"),
    [
        ("/var/lib/iris/agents/digest", ["read-only"], ["yes"]),
        ("/home/iris/agents/digest", [], ["yes"]),
        ("/root/.iris/agents/digest", [], ["yes"]),
        ("/tmp/agents/digest", ["read-only"], []),
    ],
)
def test_protect_home_and_private_tmp_never_hide_the_agents_home(
    home: str, protect_home: list[str], private_tmp: list[str]
) -> None:
    # The command is /bin/sh here so only the home decides (a venv under /tmp also turns off
    # PrivateTmp, see below).
    launch = make_launch(Path(home), command=("/bin/sh", "-c", "exit 0"))
    unit = render_unit(launch, TEMPLATE)
    assert directives(unit, "ProtectHome") == protect_home
    assert directives(unit, "PrivateTmp") == private_tmp


def test_a_command_under_tmp_keeps_the_real_tmp() -> None:
    launch = make_launch(
        Path("/var/lib/iris/agents/digest"),
        command=("/tmp/ci-clone/.venv/bin/python", "-m", "iris_runtime", "serve"),
    )
    assert directives(render_unit(launch, TEMPLATE), "PrivateTmp") == []


@needs_systemd_analyze
def test_verify_reports_what_systemd_analyze_prints(tmp_path: Path) -> None:
    unit = render_unit(make_launch(agent_home(tmp_path)), TEMPLATE)
    broken = unit.replace("[Service]\n", "[Service]\nNoSuchDirective=1\n")
    with pytest.raises(ProvisionError, match="NoSuchDirective"):
        verified(broken, tmp_path)


def test_a_missing_template_names_iris_repo_dir(tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match="IRIS_REPO_DIR"):
        template_path(tmp_path)
