"""A root-run command writing into a data dir owned by Iris's service user leaves what it creates
to that user (see ``iris_runtime.private_files``), and never re-owns what exists."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from iris_runtime.private_files import file_lock, open_private, private_dir, write_private_file
from iris_runtime.testing.server import clean_environment, run_iris
from tests.service_owned import SERVICE, service_owned_data

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="giving files away needs root")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return service_owned_data(tmp_path)


def owner(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid


def test_new_files_and_folders_take_their_folders_owner(data: Path) -> None:
    write_private_file(data / "agents.json", b"{}\n")
    assert owner(data / "agents.json") == SERVICE
    assert (data / "agents.json").stat().st_mode & 0o777 == 0o600

    with file_lock(data / "agents.json.lock"):
        pass
    assert owner(data / "agents.json.lock") == SERVICE

    deep = private_dir(data / "agents" / ".records")
    assert owner(data / "agents") == owner(deep) == SERVICE
    assert deep.stat().st_mode & 0o777 == 0o700

    os.close(open_private(data / "audit.jsonl", os.O_WRONLY | os.O_APPEND))
    assert owner(data / "audit.jsonl") == SERVICE


def test_existing_files_keep_their_owner(data: Path) -> None:
    mine = data / "root-owned.json"
    mine.write_bytes(b"old")  # root's, made by hand: replacing it must not give it away
    write_private_file(mine, b"new")
    assert owner(mine) == (0, 0) and mine.read_bytes() == b"new"

    theirs = data / "theirs.json"
    write_private_file(theirs, b"1")
    os.chown(theirs, 1234, 1234)
    write_private_file(theirs, b"2")
    assert owner(theirs) == (1234, 1234)

    lock = data / "held.lock"
    lock.touch()  # root's
    with file_lock(lock):
        pass
    assert owner(lock) == (0, 0)


def test_a_root_folder_gives_nothing_away(tmp_path: Path) -> None:
    write_private_file(tmp_path / "x", b"x")
    assert owner(tmp_path / "x") == (0, 0)


def test_a_root_run_cli_leaves_the_registry_to_the_service_user(data: Path) -> None:
    env = clean_environment(IRIS_DATA_DIR=str(data))
    done = run_iris("agents", "register", "helper", "http://127.0.0.1:4999", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads((data / "agents.json").read_text())["helper"]
    assert owner(data / "agents.json") == owner(data / "agents.json.lock") == SERVICE
