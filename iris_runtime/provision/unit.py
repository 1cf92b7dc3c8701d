"""The systemd unit of a sub-agent, rendered from ``agents/service/iris-agent.service.j2``.

The template is shared with the Ansible role, so it takes plain variables and does the systemd
escaping itself (quotes, backslashes, ``%`` specifiers, ``$`` in ``ExecStart=``). What it cannot
write safely is refused here, before rendering: newlines and other control characters (a newline
in an ``Environment=`` value would start a new directive, e.g. an ``EnvironmentFile=``), paths
with whitespace, quotes or backslashes (``WorkingDirectory=`` has no quoting), and anything that
looks like a secret value, since the unit file is world-readable.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import jinja2

from iris_runtime.config import TOKEN_FILE_NAME
from iris_runtime.errors import ProvisionError
from iris_runtime.provision.launch import PLATFORM_TOKEN_VARS, AgentLaunch
from iris_runtime.tls import TLS_KEY_CREDENTIAL

UNIT_TEMPLATE = PurePosixPath("agents/service/iris-agent.service.j2")
"""Where the unit template lives, relative to the checkout (``IRIS_REPO_DIR``)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}|[0-9]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UNSAFE_IN_PATH = re.compile(r"[\s\"'\\]")
# Variables whose non-empty value is a credential: the agent gets those from its home (its API
# token) or the parent's broker, never from its world-readable unit.
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|SECRET_ID|PASSWORD|API_KEY)$")
_TMP_DIRS = ("/tmp/", "/var/tmp/")  # noqa: S108 (recognising these paths, not using them)


def template_path(repo_dir: Path) -> Path:
    """The unit template in the checkout; a clear error when ``repo_dir`` is not one."""
    path = Path(repo_dir) / UNIT_TEMPLATE
    if not path.is_file():
        raise ProvisionError(
            f"systemd unit template not found at {path}: IRIS_REPO_DIR ({repo_dir}) must point "
            "at the Iris checkout"
        )
    return path


def unit_file_name(name: str) -> str:
    """``iris-agent-NAME.service``, for a name that can safely be part of a unit (and a path)."""
    if not _NAME.fullmatch(name):
        raise ProvisionError(
            f"agent name {name!r} cannot name a systemd unit (letters, digits, '-', '_', '.'; "
            "at most 64)"
        )
    return f"iris-agent-{name}.service"


def unit_variables(
    launch: AgentLaunch,
    *,
    user: str | None = None,
    group: str | None = None,
    root: Path = Path("/"),
    readable: Sequence[Path] = (),
) -> dict[str, Any]:
    """The template's plain variables for ``launch``, after refusing what cannot be written.

    ``root`` is the target machine's file system as seen from here (``/``, or a container's
    ``/proc/PID/root``): a protected path that is a directory there is hidden whole
    (``hidden_dirs``), anything else is hidden as a single path. ``readable`` are paths the agent
    must still read when they lie in a hidden directory (the checkout); the venv of the command's
    interpreter is added here.
    """
    unit_file_name(launch.name)  # refuses a name that cannot be a unit's
    if not launch.command or not launch.command[0].startswith("/"):
        raise ProvisionError(f"the command must start with an absolute path: {launch.command!r}")
    for arg in launch.command:
        _refuse_control(arg, "command argument")
    environment = dict(launch.environment)
    # An agent host's TLS key (a path) stays root's: systemd hands the unit a copy in its
    # credentials directory (LoadCredential=), so the key file needs no group or mode for agents.
    credentials: dict[str, str] = {}
    tls_key = environment.get("IRIS_TLS_KEY", "")
    if tls_key:
        credentials[TLS_KEY_CREDENTIAL] = _plain_path(Path(tls_key), "IRIS_TLS_KEY")
    for key, value in environment.items():
        if not _ENV_NAME.fullmatch(key):
            raise ProvisionError(f"invalid environment variable name {key!r}")
        _refuse_control(value, f"the value of {key}")
        if value and (_SECRET_NAME.search(key) or key in PLATFORM_TOKEN_VARS):
            raise ProvisionError(
                f"{key} has a value: a unit file is world-readable and never holds a credential "
                "(the agent's API token is in its home, everything else comes from the broker)"
            )
    for key in PLATFORM_TOKEN_VARS:
        environment.setdefault(key, "")  # explicitly empty: never Iris's own bot
    for who in (user, group):
        if who is not None and not _USER.fullmatch(who):
            raise ProvisionError(f"invalid user or group name {who!r}")
    home = _plain_path(launch.home, "agent home")
    protected = [_plain_path(p, "protected path") for p in launch.protected_paths]
    hidden_dirs = [p for p in protected if _on(root, p).is_dir()]
    for hidden in hidden_dirs:
        if _below(hidden, home) or hidden == home:
            raise ProvisionError(
                f"protected directory {hidden} is the agent's home {home} or inside it"
            )
    return {
        "name": launch.name,
        "command": list(launch.command),
        "home": home,
        "environment": environment,
        "hidden_dirs": hidden_dirs,
        "protected_paths": [p for p in protected if p not in hidden_dirs],
        "readable_paths": [
            _plain_path(Path(path), "interpreter or checkout path")
            for path in _readable_paths(launch, readable)
            if any(_below(str(path), hidden) for hidden in hidden_dirs)
        ],
        "user": user or "",
        "group": group or "",
        "private_tmp": not _uses_tmp(launch),
        "credentials": credentials,
        "sandbox_namespaces": _sandbox_level(environment) == ("namespace", None),
        "sandbox_networked": _sandbox_level(environment) == ("namespace", "net"),
    }


def _sandbox_level(environment: dict[str, str]) -> tuple[str, str | None]:
    """The level the agent's tools run at and its option: ``("namespace", "net")``."""
    level, sep, option = (environment.get("IRIS_SANDBOX") or "host").partition(":")
    return level, (option if sep else None)


def render_unit(
    launch: AgentLaunch,
    template: Path,
    *,
    user: str | None = None,
    group: str | None = None,
    root: Path = Path("/"),
    readable: Sequence[Path] = (),
) -> str:
    """The unit text for ``launch``, rendered in one pass from ``template`` (arguments as for
    :func:`unit_variables`)."""
    variables = unit_variables(launch, user=user, group=group, root=root, readable=readable)
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template.parent)),
        undefined=jinja2.StrictUndefined,
        # A unit file is not HTML: the template escapes for systemd itself.
        autoescape=False,  # noqa: S701
        trim_blocks=True,  # as Ansible's template module renders it
        keep_trailing_newline=True,
    )
    try:
        text = environment.get_template(template.name).render(variables)
    except jinja2.TemplateError as exc:
        raise ProvisionError(f"cannot render {template}: {exc}") from None
    _refuse_token(text, _on(root, str(launch.home)))
    return text


def verify_unit(path: Path, *, systemd_analyze: str = "systemd-analyze") -> None:
    """Run ``systemd-analyze verify``; anything it prints on stderr (warnings included) is an
    error. The file must be named like the unit (``iris-agent-NAME.service``)."""
    try:
        result = subprocess.run(
            [systemd_analyze, "verify", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except FileNotFoundError:
        raise ProvisionError(f"{systemd_analyze} not found: install systemd") from None
    except subprocess.TimeoutExpired:
        raise ProvisionError(f"systemd-analyze verify {path} did not finish") from None
    problems = result.stderr.strip()
    if problems or result.returncode != 0:
        raise ProvisionError(
            f"systemd-analyze verify {path.name} failed (exit {result.returncode}):\n"
            f"{problems or result.stdout.strip()}"
        )


def _refuse_control(value: str, what: str) -> None:
    if _CONTROL.search(value):
        raise ProvisionError(
            f"{what} contains a newline or control character, which a unit file cannot hold "
            f"safely: {value!r}"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ProvisionError(f"{what} is not valid UTF-8: {value!r}") from None


def _plain_path(path: Path, what: str) -> str:
    text = str(path)
    _refuse_control(text, what)
    if not path.is_absolute() or any(part in (".", "..") for part in text.split("/")):
        raise ProvisionError(f"{what} must be an absolute, normalized path: {text!r}")
    if _UNSAFE_IN_PATH.search(text):
        raise ProvisionError(
            f"{what} {text!r} contains whitespace, a quote or a backslash, which systemd's "
            "WorkingDirectory=/ReadWritePaths= cannot hold safely"
        )
    return text


def _on(root: Path, path: str) -> Path:
    """``path`` on the target machine whose file system is at ``root`` here."""
    return root / path.lstrip("/")


def _below(path: str, directory: str) -> bool:
    return path != directory and (path + "/").startswith(directory.rstrip("/") + "/")


def _readable_paths(launch: AgentLaunch, extra: Sequence[Path]) -> list[Path]:
    """What the agent user must reach besides its home: the venv (or directory) of the command's
    interpreter, as written and resolved, and ``extra`` (the checkout the venv imports from)."""
    found: list[Path] = []
    for program in (Path(launch.command[0]), Path(os.path.realpath(launch.command[0]))):
        directory = program.parent
        found.append(directory.parent if directory.name == "bin" else directory)
    found += extra
    return list(dict.fromkeys(found))


def _uses_tmp(launch: AgentLaunch) -> bool:
    """Whether the agent needs the real /tmp: its home, its interpreter (a checkout or venv
    under /tmp in tests and CI) would vanish behind PrivateTmp=."""
    paths = [str(launch.home), os.path.realpath(launch.command[0])]
    paths += [arg for arg in launch.command if arg.startswith("/")]
    return any((path + "/").startswith(_TMP_DIRS) for path in paths)


def _refuse_token(text: str, home: Path) -> None:
    """Last line of defence: the agent's own API token never ends up in its unit."""
    try:  # as root too: never through a link, never more than a token's worth
        fd = os.open(home / TOKEN_FILE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # not created yet, or not readable by us: nothing we could have copied
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return
        token = handle.read(4096).decode("utf-8", errors="replace").strip()
    if token and token in text:
        raise ProvisionError(f"the unit for {home.name} would contain its API token; refused")
