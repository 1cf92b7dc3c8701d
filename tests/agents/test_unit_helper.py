"""The agent-unit helper's checks of what Iris's user controls: its env file never decides what
root writes, and a record or home that is not what a spawn makes is refused. (The whole path,
polkit and systemd included, is tested in tests/provisioning/ansible_site/test_2_agents.py.)"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from iris_runtime.agents.home import AgentRecord, record_path
from iris_runtime.agents.spawn_checks import check_extra_env
from iris_runtime.agents.unit_helper import UnitHelper, helper_settings
from iris_runtime.errors import InvalidInput, ProvisionError
from iris_runtime.provision.home_handover import hand_over

RECORD = AgentRecord(
    name="chatty",
    mode="service",
    manager="systemd",
    bridge_port=4010,
    api_port=4110,
    skills=(),
    provider="offline",
    model="offline",
    created="2026-12-04T00:00:00Z",
)


def _helper(tmp_path: Path, record: AgentRecord = RECORD) -> UnitHelper:
    data = tmp_path / "data"
    agents = data / "agents"
    (agents / record.name).mkdir(parents=True)
    record.write(agents)
    env_file = tmp_path / "iris.env"
    env_file.write_text(
        "IRIS_SYSTEMD_UNIT_DIR=/tmp/not-root-s\nIRIS_AGENT_TLS_KEY=/etc/shadow\n"
        "IRIS_REPO_DIR=/tmp/evil-template\nIRIS_SCRIPT_FILE=/srv/script.json\n"
        "IRIS_API_TOKEN_FILE=/dev/zero\nIRIS_VAULT_SECRET_ID_FILE=/etc/shadow\n"
        "IRIS_TLS_CACERT=/etc/shadow\nLD_PRELOAD=/tmp/x.so\n"
    )
    environ = {
        "IRIS_DATA_DIR": str(data),
        "IRIS_AGENTS_DIR": str(agents),
        "IRIS_REPO_DIR": str(Path(__file__).resolve().parents[2]),
        "IRIS_SYSTEMD_UNIT_DIR": str(tmp_path / "units"),
        "IRIS_AGENT_PORTS": "4000-4049",
        "IRIS_ENV_FILE": str(env_file),
    }
    return UnitHelper(helper_settings(environ))


def test_the_env_file_never_sets_what_root_writes(tmp_path: Path) -> None:
    helper = _helper(tmp_path)
    config = helper.spawner.config
    assert config.unit_dir == tmp_path / "units"
    assert config.repo_dir == Path(__file__).resolve().parents[2]
    assert config.agent_tls is None  # IRIS_AGENT_TLS_KEY from Iris's file is ignored
    # What only reaches the agent's own environment is still taken from it; no path root would
    # open (a token file, a secret id, a CA bundle) nor a loader variable is.
    env = helper.spawner.settings.env
    assert env["IRIS_SCRIPT_FILE"] == "/srv/script.json"
    for name in (
        "IRIS_API_TOKEN_FILE",
        "IRIS_VAULT_SECRET_ID_FILE",
        "IRIS_TLS_CACERT",
        "LD_PRELOAD",
    ):
        assert name not in env


def test_a_record_as_a_spawn_writes_it_is_accepted(tmp_path: Path) -> None:
    helper = _helper(tmp_path)
    assert helper._record("chatty") == RECORD
    assert helper._home("chatty") == helper.agents_dir / "chatty"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"bridge_port": 22, "api_port": 122}, "ports outside IRIS_AGENT_PORTS"),
        ({"api_port": 4999}, "ports outside IRIS_AGENT_PORTS"),
        ({"manager": "process"}, "is not a systemd agent's"),
        ({"sandbox": "gvisor"}, "--sandbox gvisor: runsc must run as root"),
    ],
)
def test_a_record_a_spawn_would_refuse_is_refused(
    tmp_path: Path, change: dict[str, object], reason: str
) -> None:
    helper = _helper(tmp_path, replace(RECORD, **change))  # type: ignore[arg-type]
    with pytest.raises(ProvisionError, match=reason):
        helper._record("chatty")


def test_a_record_that_is_a_link_is_refused(tmp_path: Path) -> None:
    helper = _helper(tmp_path)
    path = record_path(helper.agents_dir, "chatty")
    secret = tmp_path / "root-only.json"
    secret.write_text(json.dumps({"root_token": "s.123"}))
    path.unlink()
    path.symlink_to(secret)
    with pytest.raises(ProvisionError, match="no record of chatty"):
        helper._record("chatty")


def test_a_home_that_is_a_link_is_refused(tmp_path: Path) -> None:
    helper = _helper(tmp_path)
    home = helper.agents_dir / "chatty"
    home.rmdir()
    home.symlink_to("/etc")
    with pytest.raises(ProvisionError, match="is not a folder of the agents dir"):
        helper._home("chatty")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a file to another user")
def test_a_record_of_another_owner_is_refused(tmp_path: Path) -> None:
    helper = _helper(tmp_path)
    os.chown(record_path(helper.agents_dir, "chatty"), 12345, 12345)
    with pytest.raises(ProvisionError, match="is not a record Iris wrote"):
        helper._record("chatty")


def test_a_record_whose_env_names_a_credential_path_is_refused(tmp_path: Path) -> None:
    """The record is Iris's file: its --env settings are checked again, so no IRIS_TLS_KEY of
    the caller's can become a LoadCredential= that root reads."""
    record = replace(RECORD, extra_env=(("IRIS_TLS_KEY", "/etc/shadow"),))
    helper = _helper(tmp_path, record)
    with pytest.raises(InvalidInput, match="set by spawn itself"):
        helper.spawner.launch_for(
            helper._record("chatty"),
            helper._home("chatty"),
            check_extra_env(dict(record.extra_env)),
        )


def test_an_agents_dir_under_a_folder_others_can_change_is_refused(tmp_path: Path) -> None:
    helper = _helper(tmp_path)  # under the temp dir: /tmp is everyone's
    with pytest.raises(ProvisionError, match="is not root's alone"):
        helper.install("chatty")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand files to other users")
def test_the_hand_over_follows_no_link_and_takes_only_the_owners_files(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("root's\n")
    (home / "mine.txt").write_text("x")
    (home / "link").symlink_to(outside)
    (home / "linked-hard").hardlink_to(home / "mine.txt")  # two links: never handed over
    (home / "other.txt").write_text("y")
    os.chown(home / "other.txt", 23456, 23456)
    os.chown(home, 12345, 12345)
    os.chown(home / "mine.txt", 12345, 12345)
    os.lchown(home / "link", 12345, 12345)
    changed = hand_over(home, 12345, 34567, 34567)
    assert changed == 2  # the home and its link (lchown), nothing through either
    assert home.stat().st_uid == 34567
    assert os.lstat(home / "link").st_uid == 34567 and outside.stat().st_uid == 0
    assert (home / "mine.txt").stat().st_uid == 12345  # hard-linked: left as it was
    assert (home / "other.txt").stat().st_uid == 23456  # not the owner's


def test_a_home_of_another_owner_or_a_link_is_not_handed_over(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with pytest.raises(ProvisionError, match=f"belongs to uid {os.geteuid()}, not 4242"):
        hand_over(home, 4242, 1, 1)
    link = tmp_path / "link"
    link.symlink_to(home)
    with pytest.raises(ProvisionError, match="is not a folder to hand over"):
        hand_over(link, os.geteuid(), 1, 1)
