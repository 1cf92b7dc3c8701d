"""``iris channels list|set|unset`` through the real CLI: strict, atomic edits of channels.json,
and ``iris doctor`` reporting a bad file."""

from __future__ import annotations

import json
from pathlib import Path

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.testing.server import clean_environment, run_iris


def channels(data: Path, *args: str) -> tuple[int, str, str]:
    done = run_iris("channels", *args, env=clean_environment(IRIS_DATA_DIR=str(data)))
    return done.returncode, done.stdout, done.stderr


def test_set_list_and_unset(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    AgentRegistry(data / "agents.json").register("helper", "http://127.0.0.1:9/")
    assert channels(data, "set", "C0HELP001", "leads")[0] == 0
    assert channels(data, "set", "tg--1001", "admin", "--admin", "42", "--admin", "43")[0] == 0
    assert channels(data, "set", "C0RELAY01", "passthrough", "--agent", "@Helper")[0] == 0
    assert channels(data, "set", "defaults", "thread")[0] == 0
    code, out, _ = channels(data, "list", "--json")
    assert code == 0 and json.loads(out) == {
        "C0HELP001": {"mode": "leads"},
        "C0RELAY01": {"mode": "passthrough", "agent": "helper"},
        "tg--1001": {"mode": "admin", "admins": ["42", "43"]},
        "defaults": {"mode": "thread"},
    }
    assert json.loads((data / "channels.json").read_text()) == json.loads(out)
    assert "C0HELP001: leads" in channels(data, "list")[1]
    assert channels(data, "unset", "C0HELP001")[0] == 0
    code, _, err = channels(data, "unset", "C0HELP001")
    assert code != 0 and "has no mode" in err
    assert [p.name for p in data.iterdir() if p.name.startswith(".channels")] == []


def test_refusals_leave_the_file_alone(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    assert channels(data, "set", "C0HELP001", "dm")[0] == 0
    before = (data / "channels.json").read_bytes()
    for args, problem in [
        (("C0RELAY01", "passthrough", "--agent", "ghost"), "unknown agent(s) ghost"),
        (("C0RELAY01", "passthrough"), 'passthrough needs "agent"'),
        (("C0ADMIN01", "admin"), 'admin mode needs "admins"'),
        (("C0HELP001", "thread", "--admin", "1"), "admin mode only"),
        (("../etc", "dm"), "invalid channel id"),
    ]:
        code, _, err = channels(data, "set", *args)
        assert code != 0 and problem in err, err
    code, _, err = channels(data, "set", "C1", "party")
    assert code != 0 and "party" in err
    assert (data / "channels.json").read_bytes() == before


def test_doctor_reports_a_bad_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    env = clean_environment(IRIS_DATA_DIR=str(data))
    (data / "channels.json").write_text('{"C0HELP001": {"mode": "party"}}')
    done = run_iris("doctor", "--json", env=env)
    [check] = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "channels"]
    assert check["status"] == "fail" and "mode must be one of" in check["detail"]
    assert "keeps its previous configuration" in check["detail"]
    (data / "channels.json").write_text('{"C0HELP001": {"mode": "leads"}}')
    done = run_iris("doctor", "--json", env=env)
    [check] = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "channels"]
    assert check["status"] == "ok" and "1 leads" in check["detail"]
    code, _, err = channels(data, "list")
    (data / "channels.json").write_text("{")
    code, _, err = channels(data, "list")
    assert code != 0 and "not JSON" in err


def test_the_cli_repairs_what_doctor_reports(tmp_path: Path) -> None:
    # A passthrough names an agent that is gone (its manifest broke): doctor warns, the file
    # stays valid, and every other entry can still be edited; only a new entry naming an
    # unknown agent is refused.
    data = tmp_path / "data"
    data.mkdir()
    env = clean_environment(IRIS_DATA_DIR=str(data))
    (data / "channels.json").write_text(
        json.dumps(
            {
                "C0RELAY01": {"mode": "passthrough", "agent": "butler"},
                "C0HELP001": {"mode": "dm"},
            }
        )
    )
    done = run_iris("doctor", "--json", env=env)
    [check] = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "channels"]
    assert check["status"] == "warn" and "butler" in check["detail"], check
    code, out, err = channels(data, "list")
    assert code == 0 and "C0RELAY01: passthrough to butler" in out, err
    code, _, err = channels(data, "unset", "C0HELP001")
    assert code == 0, err
    code, _, err = channels(data, "set", "C0LEADS01", "leads")
    assert code == 0, err
    code, _, err = channels(data, "set", "C0OTHER01", "passthrough", "--agent", "ghost")
    assert code != 0 and "unknown agent(s) ghost" in err
    code, _, err = channels(data, "unset", "C0RELAY01")
    assert code == 0, err
    assert json.loads((data / "channels.json").read_text()) == {"C0LEADS01": {"mode": "leads"}}
