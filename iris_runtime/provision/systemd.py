"""Service mode: one systemd unit per sub-agent, ``iris-agent-NAME.service``.

Install renders and verifies the unit before systemd ever sees it, makes sure the agent user
exists and owns the agent's home, moves the unit into place atomically, enables and starts it,
and watches it for a moment so a command that dies at once is reported with its journal lines
instead of as a later health-check timeout. Whatever install created is removed again when a step
fails, except the agent's user, which is kept (``agent_users``).

Each agent runs as an unprivileged user of its own (``iris-agent-<name>`` by default) with no
capabilities: as root, an agent's shell could start an unconfined unit of its own or undo the
mounts that hide Iris's files; as a shared user, one agent could read another's files wherever
a mode bit allowed it. Every agent user needs read and execute access to the interpreter, the
venv and the checkout.

``systemctl``/``journalctl`` may be argv prefixes rather than names, and ``on_target`` prefixes
the other commands that act on the managed machine (``getent``, ``useradd``, ``chown``), so the
same code drives a systemd in another namespace (the tests run ``nsenter -t PID -a --`` into a
booted container, and pass the container's unit directory and root as seen from the host).
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from iris_runtime.errors import ProvisionError
from iris_runtime.provision.agent_users import agent_user_name, ensure_agent_user, unit_user
from iris_runtime.provision.launch import AgentLaunch, Progress
from iris_runtime.provision.public_files import write_public_file
from iris_runtime.provision.unit import render_unit, template_path, unit_file_name, verify_unit

SYSTEMD_RUN_DIR = Path("/run/systemd/system")
DEFAULT_AGENT_USER = "iris-agent"
"""The prefix of the agents' own Unix users unless configured otherwise (``IRIS_AGENT_USER``):
agent ``digest`` runs as ``iris-agent-digest``."""
JOURNAL_LINES = 20
# What a unit directory that takes no new file usually means.
_UNIT_DIR_HINT = " (service mode needs root, or use --service-manager process)"
_COMMAND_TIMEOUT = 90.0  # a stop may take TimeoutStopSec= (30 s) before systemd kills
_NOT_LOADED = ("not loaded", "does not exist", "not found", "No such file")


def systemd_running() -> bool:
    """sd_booted(): systemd is PID 1 here (not in most containers, CI runners, WSL)."""
    return SYSTEMD_RUN_DIR.is_dir()


class SystemdService:
    """An :class:`~iris_runtime.provision.launch.AgentService` backed by systemd units."""

    kind = "systemd"

    def __init__(
        self,
        repo_dir: Path,
        unit_dir: Path = Path("/etc/systemd/system"),
        systemctl: str | Sequence[str] = "systemctl",
        *,
        journalctl: str | Sequence[str] = "journalctl",
        systemd_analyze: str = "systemd-analyze",
        user: str = DEFAULT_AGENT_USER,
        on_target: Sequence[str] = (),
        root: Path = Path("/"),
        settle_seconds: float = 1.5,
        hand_over: Callable[[Path, str], None] | None = None,
    ) -> None:
        self.repo_dir = Path(repo_dir)
        self.unit_dir = Path(unit_dir)
        self.systemctl = _argv(systemctl)
        self.journalctl = _argv(journalctl)
        self.systemd_analyze = systemd_analyze
        self.user = user
        self.on_target = tuple(on_target)
        self.root = Path(root)  # the managed machine's file system as seen from here
        # How long a freshly started unit must stay up before install trusts it. Short: spawn
        # waits for /health afterwards anyway; this only catches commands that die at once.
        self.settle_seconds = settle_seconds
        # How the agent's home becomes its user's: ``chown -R`` on the target by default; the
        # agent-unit helper walks it by descriptor instead (its caller owns the agents dir).
        self.hand_over = hand_over

    def unit_path(self, name: str) -> Path:
        return self.unit_dir / unit_file_name(name)

    def user_for(self, name: str) -> str:
        """The agent's own Unix user (``agent_users``): ``<IRIS_AGENT_USER>-<name>``."""
        return agent_user_name(self.user, name)

    def installed_user(self, name: str) -> str | None:
        """The user the installed unit runs as (None without a unit, or a unit naming none)."""
        try:
            return unit_user(self.unit_path(name).read_text(encoding="utf-8"))
        except OSError:
            return None

    def exists(self, name: str) -> bool:
        return self.unit_path(name).exists()

    def install(self, launch: AgentLaunch, progress: Progress) -> None:
        unit = unit_file_name(launch.name)
        path = self.unit_dir / unit
        if path.exists():
            raise ProvisionError(f"{path} already exists: remove the agent {launch.name!r} first")
        if not self.unit_dir.is_dir():
            raise ProvisionError(
                f"systemd unit directory {self.unit_dir} does not exist (IRIS_SYSTEMD_UNIT_DIR)"
            )
        if self.user in ("root", "0"):
            raise ProvisionError(
                "agents must not run as root (IRIS_AGENT_USER): root could undo its isolation"
            )
        user = self.user_for(launch.name)
        text = self.checked_unit(launch, progress)
        ensure_agent_user(self._target, launch.name, user, progress)
        progress(f"handing {launch.home} to {user}")
        if self.hand_over is not None:
            self.hand_over(launch.home, user)
        else:
            self._target("chown", "-R", "--no-dereference", f"{user}:", str(launch.home))
        try:
            progress(f"writing {path}")
            write_public_file(path, text, hint=_UNIT_DIR_HINT)
            progress("systemctl daemon-reload")
            self._systemctl("daemon-reload")
            self._enable_now(unit, launch.name, progress)
        except BaseException:  # Ctrl-C included: never leave a half-installed unit behind
            self._undo(unit, path)
            raise

    def checked_unit(self, launch: AgentLaunch, progress: Progress) -> str:
        """The unit text for ``launch``, rendered and verified (``systemd-analyze verify``);
        nothing is written or started."""
        unit = unit_file_name(launch.name)
        template = template_path(self.repo_dir)
        progress(f"rendering {unit} from {template}")
        text = render_unit(
            launch,
            template,
            user=self.user_for(launch.name),
            root=self.root,
            readable=(self.repo_dir,),
        )
        progress(f"checking {unit} with systemd-analyze verify")
        with tempfile.TemporaryDirectory(prefix="iris-unit-") as scratch:
            candidate = Path(scratch) / unit
            candidate.write_text(text, encoding="utf-8")
            verify_unit(candidate, systemd_analyze=self.systemd_analyze)
        return text

    def start(self, name: str, progress: Progress) -> None:
        unit = unit_file_name(name)
        if not self.unit_path(name).exists():
            raise ProvisionError(f"{self.unit_path(name)} does not exist: nothing to start")
        # A failed unit's state and restart counter would make the check below fail at once.
        self._systemctl("reset-failed", unit, check=False)
        self._enable_now(unit, name, progress)

    def _enable_now(self, unit: str, name: str, progress: Progress) -> None:
        """``systemctl enable --now`` agent ``name``'s unit, then wait until it stays up."""
        progress(f"systemctl enable --now {unit}")
        started = self._systemctl("enable", "--now", unit, check=False)
        if started.returncode != 0:
            raise ProvisionError(
                f"{unit} did not start: {_without_symlink_notes(started.stderr)}\n"
                f"{self._journal(unit)}{self._access_hint(name)}"
            )
        progress(f"checking that {unit} stays up")
        self._wait_settled(unit, name)
        progress(f"{unit} is running")

    def remove(self, name: str, progress: Progress) -> bool:
        unit = unit_file_name(name)
        path = self.unit_dir / unit
        if not path.exists() and not self._known(unit):
            return False
        problems: list[str] = []
        progress(f"systemctl disable --now {unit}")
        stopped = self._systemctl("disable", "--now", unit, check=False)
        if stopped.returncode != 0 and not _not_loaded(stopped.stderr):
            problems.append(f"systemctl disable --now {unit}: {stopped.stderr.strip()}")
        if path.exists():
            progress(f"deleting {path}")
            try:
                path.unlink()
            except OSError as exc:
                problems.append(f"cannot delete {path}: {exc.strerror}")
        progress("systemctl daemon-reload")
        reloaded = self._systemctl("daemon-reload", check=False)
        if reloaded.returncode != 0:
            problems.append(f"systemctl daemon-reload: {reloaded.stderr.strip()}")
        # Forget a failed state (and its restart counter) so the name can be spawned again.
        self._systemctl("reset-failed", unit, check=False)
        if problems:
            raise ProvisionError(f"removing {unit} failed: " + "; ".join(problems))
        return True

    # -- helpers ---------------------------------------------------------------------------

    def _systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run([*self.systemctl, *args], check, f"systemctl {' '.join(args)}")

    def _target(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on the managed machine."""
        return _run([*self.on_target, *argv], check, " ".join(argv))

    def _access_hint(self, name: str) -> str:
        return (
            f"\n(the agent runs as {self.user_for(name)}: it needs execute access to every "
            "directory above its home that is not hidden, and read and execute access to the "
            f"interpreter, its venv and the checkout {self.repo_dir})"
        )

    def _show(self, unit: str, *props: str) -> dict[str, str]:
        args = ["show", unit]
        for prop in props:
            args += ["-p", prop]
        out = self._systemctl(*args, check=False).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def _known(self, unit: str) -> bool:
        """Loaded in systemd even without a file (deleted by hand while running, or failed)."""
        state = self._show(unit, "LoadState", "ActiveState")
        loaded = state.get("LoadState", "not-found") != "not-found"
        return loaded or state.get("ActiveState", "inactive") != "inactive"

    def _wait_settled(self, unit: str, name: str) -> None:
        deadline = time.monotonic() + self.settle_seconds
        while True:
            state = self._show(unit, "ActiveState", "SubState", "NRestarts", "Result")
            active, sub = state.get("ActiveState", ""), state.get("SubState", "")
            if (
                active in ("failed", "inactive")
                or sub == "auto-restart"
                or (state.get("NRestarts", "0") != "0")
            ):
                raise ProvisionError(
                    f"{unit} failed to start ({active}/{sub}, result {state.get('Result')})\n"
                    f"{self._journal(unit)}{self._access_hint(name)}"
                )
            if time.monotonic() >= deadline:
                return
            time.sleep(0.1)

    def _journal(self, unit: str) -> str:
        # Let journald take in what the dead process wrote before we read (best effort).
        _run([*self.journalctl, "--sync"])
        result = _run([*self.journalctl, "-u", unit, "-n", str(JOURNAL_LINES), "--no-pager"])
        lines = (result.stdout or result.stderr).strip()
        return f"last lines of `journalctl -u {unit}`:\n{lines or '(no journal entries)'}"

    def _undo(self, unit: str, path: Path) -> None:
        """Best effort: stop, disable, delete and forget the unit; errors are not reported
        (the install's own error is the one that matters)."""
        steps = (
            lambda: self._systemctl("disable", "--now", unit, check=False),
            lambda: path.unlink(missing_ok=True),
            lambda: self._systemctl("daemon-reload", check=False),
            lambda: self._systemctl("reset-failed", unit, check=False),
        )
        for step in steps:
            with contextlib.suppress(ProvisionError, OSError):
                step()


def _argv(command: str | Sequence[str]) -> tuple[str, ...]:
    return (command,) if isinstance(command, str) else tuple(command)


def _run(argv: list[str], check: bool = False, what: str = "") -> subprocess.CompletedProcess[str]:
    """Run ``argv``; with ``check``, a failure is a ProvisionError naming ``what`` ran."""
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT, check=False
        )
    except FileNotFoundError:
        raise ProvisionError(f"{argv[0]} not found: service mode needs systemd") from None
    except subprocess.TimeoutExpired:
        command = " ".join(argv)
        raise ProvisionError(f"{command} did not finish in {_COMMAND_TIMEOUT:.0f} s") from None
    if check and result.returncode != 0:
        raise ProvisionError(
            f"{what} failed (exit {result.returncode}): "
            f"{result.stderr.strip() or result.stdout.strip()}"
        )
    return result


def _without_symlink_notes(stderr: str) -> str:
    """systemctl enable reports the links it made on stderr too; they are not the problem."""
    lines = stderr.strip().splitlines()
    return "\n".join(line for line in lines if not line.startswith(("Created symlink", "Removed")))


def _not_loaded(stderr: str) -> bool:
    return any(marker in stderr for marker in _NOT_LOADED)
