"""A root-run command writing into a data dir owned by Iris's service user must not be turned
against another file by what that user planted there: a symlink, a hard link, a FIFO, a file
of somebody else's (see ``iris_runtime.private_files``)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from iris_runtime.events.state import FiringStore
from iris_runtime.private_files import (
    UnsafeFile,
    file_lock,
    open_private,
    private_dir,
    write_private_file,
)
from iris_runtime.provision.supervised import SupervisedStore
from iris_runtime.secrets.audit import AUDIT_FILE, audit_log_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the attack is on a root-run command")

SERVICE = (65534, 65534)  # nobody:nogroup stands in for the service user


def fingerprint(path: Path) -> tuple[bytes, int, int, int]:
    st = os.lstat(path)
    return path.read_bytes(), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir(mode=0o700)
    os.chown(path, *SERVICE)
    return path


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A root file outside the data dir (think /etc/passwd)."""
    path = tmp_path / "passwd"
    path.write_bytes(b"root:x:0:0::/root:/bin/bash\n")
    path.chmod(0o644)
    return path


def plant_link(link: Path, target: Path) -> None:
    """A symlink made by the service user."""
    link.symlink_to(target)
    os.lchown(link, *SERVICE)


def test_a_symlinked_lock_is_refused(data: Path, victim: Path) -> None:
    before = fingerprint(victim)
    plant_link(data / "agents.json.lock", victim)
    with pytest.raises(UnsafeFile, match="symbolic link"), file_lock(data / "agents.json.lock"):
        pass
    assert fingerprint(victim) == before


def test_a_dangling_symlinked_lock_creates_nothing(data: Path, tmp_path: Path) -> None:
    plant_link(data / "agents.json.lock", tmp_path / "new-root-file")
    with pytest.raises(UnsafeFile), file_lock(data / "agents.json.lock"):
        pass
    assert not (tmp_path / "new-root-file").exists()


def test_a_symlinked_audit_log_is_not_written_through(
    data: Path, victim: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = fingerprint(victim)
    log_path = data / AUDIT_FILE
    private_dir(log_path.parent)
    plant_link(log_path, victim)
    with caplog.at_level(logging.ERROR):
        audit_log_for(data).record("agent", "get", "KEY", "allowed", "req-1")
    assert "symbolic link" in caplog.text
    assert fingerprint(victim) == before
    with pytest.raises(UnsafeFile):
        open_private(log_path, os.O_WRONLY | os.O_APPEND)


def test_a_symlinked_agents_json_is_replaced_not_written_through(data: Path, victim: Path) -> None:
    before = fingerprint(victim)
    plant_link(data / "agents.json", victim)
    write_private_file(data / "agents.json", b"{}\n")
    assert not (data / "agents.json").is_symlink()
    assert (data / "agents.json").read_bytes() == b"{}\n"
    assert stat.S_IMODE(os.lstat(data / "agents.json").st_mode) == 0o600
    assert fingerprint(victim) == before


def test_a_symlinked_private_dir_is_refused(data: Path, tmp_path: Path) -> None:
    target = tmp_path / "etc"
    target.mkdir(mode=0o755)
    plant_link(data / "audit", target)
    with pytest.raises(UnsafeFile, match="symbolic link"):
        private_dir(data / "audit")
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert (target.stat().st_uid, target.stat().st_gid) == (0, 0)


def test_the_operators_own_symlinked_dir_is_followed(data: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    (data / "agents").symlink_to(target)  # root's link: the operator chose it
    private_dir(data / "agents")
    assert stat.S_IMODE(target.stat().st_mode) == 0o700


def test_a_hard_link_to_a_root_file_is_refused(data: Path, victim: Path) -> None:
    before = fingerprint(victim)
    os.link(victim, data / "agents.json.lock")
    with pytest.raises(UnsafeFile, match="hard links"), file_lock(data / "agents.json.lock"):
        pass
    assert fingerprint(victim)[1:] == before[1:]


def test_a_fifo_is_refused_without_hanging(data: Path) -> None:
    log_path = data / AUDIT_FILE
    private_dir(log_path.parent)
    os.mkfifo(log_path)
    with pytest.raises((UnsafeFile, OSError)):
        open_private(log_path, os.O_WRONLY | os.O_APPEND)
    os.unlink(log_path)
    os.mkfifo(log_path)
    with pytest.raises(UnsafeFile, match="not a regular file"):
        open_private(log_path, os.O_RDWR)


def test_a_file_of_a_third_user_is_refused(data: Path) -> None:
    lock = data / "agents.json.lock"
    lock.touch(mode=0o644)
    os.chown(lock, 1234, 1234)
    with pytest.raises(UnsafeFile, match="uid 1234"), file_lock(lock):
        pass
    assert stat.S_IMODE(lock.stat().st_mode) == 0o644
    os.chown(lock, *SERVICE)  # the folder's owner's: fine
    with file_lock(lock):
        pass
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600


@pytest.mark.parametrize("name", ["state.db", "state.db-wal", "state.db-shm"])
def test_a_symlinked_state_db_is_refused_before_sqlite_opens_it(
    data: Path, victim: Path, name: str
) -> None:
    before = fingerprint(victim)
    plant_link(data / name, victim)
    with SupervisedStore(data) as store, pytest.raises(UnsafeFile, match="symbolic link"):
        store.all()
    assert fingerprint(victim) == before


@pytest.mark.parametrize("name", ["state.db", "state.db-wal", "state.db-shm"])
def test_the_event_firings_store_refuses_a_symlinked_state_db(
    data: Path, victim: Path, name: str
) -> None:
    before = fingerprint(victim)
    plant_link(data / name, victim)
    store = FiringStore(data / "state.db", now=lambda: 0.0)
    with pytest.raises(UnsafeFile, match="symbolic link"):
        store.open()
    store.close()
    assert fingerprint(victim) == before


def test_state_db_is_still_made_private_and_given_to_the_service_user(data: Path) -> None:
    with SupervisedStore(data) as store:
        assert store.all() == []
    st = os.lstat(data / "state.db")
    assert stat.S_IMODE(st.st_mode) == 0o600 and (st.st_uid, st.st_gid) == SERVICE


def test_the_firings_store_makes_state_db_private_and_the_service_users_too(data: Path) -> None:
    store = FiringStore(data / "state.db", now=lambda: 0.0)
    store.open()
    try:
        assert store.count() == 0
    finally:
        store.close()
    st = os.lstat(data / "state.db")
    assert stat.S_IMODE(st.st_mode) == 0o600 and (st.st_uid, st.st_gid) == SERVICE
