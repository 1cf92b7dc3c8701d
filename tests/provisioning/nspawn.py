"""A real systemd as PID 1 for tests: the shared Debian rootfs booted with ``systemd-nspawn``.

The container boots with ``--volatile=overlay`` (a tmpfs over the read-only shared tree, thrown
away at exit) or, given ``overlay_dir``, on a kernel overlay whose upper layer lives in that
directory, so its changes survive :meth:`NspawnHost.restart` (a host that reboots). It shares the
host's network (so a port an agent opens inside is reachable from the test). The ``nspawn_host``
fixture also shows it the checkout under test and the host's Python read-only at their own paths,
so ``<repo>/.venv/bin/python -m iris_runtime`` runs inside unchanged, for any user: the
directories above those binds (``/root`` when Python lives in ``/root/.pyenv``) get ``o+x``
inside, as a real host must give the agent user access to its venv and checkout. Commands run
inside through ``nsenter -t <container init> -a``; the container's files are reachable from the
host under :attr:`NspawnHost.root` (``/proc/<init>/root``).

Fixtures: ``nspawn_host`` (module scope: one boot, a few seconds, per test module). Import it,
and ``debian_rootfs`` from ``tests.provisioning.rootfs``, into the test module or a conftest.
Tests that need a bare server (nothing of the host inside) build an ``NspawnHost`` themselves.
"""

from __future__ import annotations

import os
import secrets
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from iris_runtime.testing.polling import poll
from iris_runtime.testing.scoped import Scoped
from tests.provisioning.rootfs import require_root_and

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BOOT_TIMEOUT = 90.0
STOP_TIMEOUT = 20.0


def checkout_binds() -> list[Path]:
    """What the container needs read-only to run this checkout: the repo (with its .venv), the
    venv if it lives elsewhere, and the real Python installation the venv points at."""
    wanted = [REPO_ROOT, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()]
    binds: list[Path] = []
    for path in sorted(set(wanted), key=lambda p: len(p.parts)):
        if not any(path.is_relative_to(outer) for outer in binds):
            binds.append(path)
    return binds


class NspawnHost(Scoped):
    """One booted container. ``start()``/``stop()``, or use it as a context manager."""

    def __init__(
        self,
        rootfs: Path,
        *,
        binds_ro: Sequence[Path] = (),
        log_file: Path | None = None,
        name: str | None = None,
        overlay_dir: Path | None = None,
        network_namespace: str | None = None,
    ) -> None:
        self.rootfs = rootfs
        # A namespace of tests.provisioning.fleet_network (its own address on a private link);
        # None = the host's network, as the single-host tests use.
        self.network_namespace = network_namespace
        self.binds_ro = tuple(binds_ro)
        # upper/ (the container's changes), work/ (overlayfs's scratch) and merged/ (the tree
        # nspawn boots) live here and outlive the container; None = a throwaway tmpfs overlay.
        self.overlay_dir = overlay_dir
        self.name = name or f"iris-test-{secrets.token_hex(3)}"
        self.log_file = log_file
        self._process: subprocess.Popen[bytes] | None = None
        self._init_pid: int | None = None

    # -- where things are ----------------------------------------------------------------

    @property
    def nspawn_pid(self) -> int:
        """The systemd-nspawn process this object started (what ``stop`` signals)."""
        if self._process is None:
            raise RuntimeError("container not started")
        return self._process.pid

    @property
    def pid(self) -> int:
        """The container's init (systemd, PID 1 inside) as seen from the host."""
        if self._init_pid is None:
            raise RuntimeError("container not started")
        return self._init_pid

    @property
    def root(self) -> Path:
        """The container's file system from the host (writable: the volatile overlay)."""
        return Path(f"/proc/{self.pid}/root")

    def path(self, inside: str | Path) -> Path:
        """Host path of a path inside the container."""
        return self.root / Path(inside).relative_to("/")

    def command(self, *argv: str) -> tuple[str, ...]:
        """An argv that runs ``argv`` inside the container (e.g. for ``SystemdService``)."""
        return ("nsenter", "-t", str(self.pid), "-a", "--", *argv)

    def run(
        self,
        *argv: str,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        check: bool = False,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the container with a clean environment (plus ``env``)."""
        environment = {"PATH": CONTAINER_PATH, "LANG": "C.UTF-8", **(env or {})}
        return subprocess.run(
            self.command(*argv),
            env=environment,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> NspawnHost:
        argv = [
            "systemd-nspawn",
            "--boot",
            "--register=no",  # no machined on the host (systemd is not PID 1 there)
            "--keep-unit",  # nor a transient scope unit
            f"--machine={self.name}",
            "--console=read-only",
            *(f"--bind-ro={path}" for path in self.binds_ro),
        ]
        if self.network_namespace:
            argv.append(f"--network-namespace-path=/run/netns/{self.network_namespace}")
        if self.overlay_dir is None:
            # The shared rootfs stays pristine: changes go to a tmpfs, gone at power-off.
            argv += [f"--directory={self.rootfs}", "--volatile=overlay"]
        else:
            argv = self._persistent_overlay(argv)
        log = open(self.log_file or os.devnull, "wb")  # noqa: SIM115 (lives as long as nspawn)
        with log:
            self._process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            self._init_pid = self._find_init()
            self._wait_booted()
            self._open_paths_to_binds()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM to systemd-nspawn (it powers the container off), SIGKILL if that hangs."""
        process, self._process = self._process, None
        self._init_pid = None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT)

    def restart(self) -> NspawnHost:
        """Power off and boot again (a new init pid); with ``overlay_dir``, like a reboot."""
        self.stop()
        return self.start()

    def _persistent_overlay(self, argv: list[str]) -> list[str]:
        """``argv`` run in a private mount namespace that first mounts the overlay: the mount
        never shows on the host and goes away with systemd-nspawn, however the test ends."""
        assert self.overlay_dir is not None
        upper, work, merged = (self.overlay_dir / part for part in ("upper", "work", "merged"))
        for directory in (upper, work, merged):
            directory.mkdir(parents=True, exist_ok=True)
        # overlayfs splits its options on "," and lowerdir on ":".
        for path in (self.rootfs, upper, work):
            if any(char in str(path) for char in ",:"):
                raise ValueError(f"overlay paths cannot contain ',' or ':': {path}")
        options = f"lowerdir={self.rootfs},upperdir={upper},workdir={work}"
        mount_then_exec = 'mount -t overlay iris-overlay -o "$1" "$2" && shift 2 && exec "$@"'
        return [
            "unshare",
            "--mount",
            "--propagation=private",
            "--",
            "sh",
            "-c",
            mount_then_exec,
            "sh",
            options,
            str(merged),
            *argv,
            f"--directory={merged}",
        ]

    def _bring_up(self) -> None:
        self.start()

    def _take_down(self) -> None:
        self.stop()

    def _find_init(self) -> int:
        """The child of systemd-nspawn once it has exec'd systemd (our process is nspawn itself:
        unshare and sh exec into it)."""
        assert self._process is not None
        nspawn = self._process.pid

        def systemd() -> int | None:
            self._fail_if_exited()
            return next((c for c in _children(nspawn) if _comm(c) == "systemd"), None)

        found = poll(systemd, BOOT_TIMEOUT)
        if found is not None:
            return found
        raise RuntimeError(f"systemd-nspawn started no init within {BOOT_TIMEOUT:.0f} s")

    def _wait_booted(self) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT
        while True:
            self._fail_if_exited()
            remaining = max(deadline - time.monotonic(), 1.0)
            try:
                result = self.run("systemctl", "is-system-running", "--wait", timeout=remaining)
            except subprocess.TimeoutExpired:
                raise RuntimeError(
                    f"container did not finish booting\n{self._log_tail()}"
                ) from None
            state = result.stdout.strip()
            if state in ("running", "degraded"):
                return
            # Right after exec, systemd has not opened its private bus socket yet: systemctl
            # then prints nothing or "offline" (seen on a loaded machine). Ask again.
            if state not in ("", "offline") or time.monotonic() > deadline:
                raise RuntimeError(f"container boot ended {state!r}: {result.stderr.strip()}")
            time.sleep(0.05)

    def _open_paths_to_binds(self) -> None:
        """Let every user reach the bound checkout and Python (agents run unprivileged); only
        the container's overlay changes, the shared rootfs and the host stay as they are."""
        for bind in self.binds_ro:
            for parent in bind.parents:
                inside = self.path(parent)
                mode = inside.stat().st_mode
                if not mode & 0o001:
                    inside.chmod(stat.S_IMODE(mode) | 0o001)

    def _fail_if_exited(self) -> None:
        assert self._process is not None
        if self._process.poll() is not None:
            raise RuntimeError(
                f"systemd-nspawn exited ({self._process.returncode})\n{self._log_tail()}"
            )

    def _log_tail(self) -> str:
        if self.log_file is None:
            return ""
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-30:])
        except OSError:
            return ""


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def checkout_host(rootfs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NspawnHost]:
    """The body of an ``nspawn_host`` fixture, whatever its scope: ``rootfs`` booted with
    systemd as PID 1, this checkout inside it."""
    require_root_and("systemd-nspawn", "nsenter")
    log_file = tmp_path_factory.mktemp("nspawn") / "console.log"
    with NspawnHost(rootfs, binds_ro=checkout_binds(), log_file=log_file) as host:
        yield host


@pytest.fixture(scope="module")
def nspawn_host(
    debian_rootfs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NspawnHost]:
    """The shared rootfs booted with systemd as PID 1; this checkout runs inside it."""
    yield from checkout_host(debian_rootfs, tmp_path_factory)
