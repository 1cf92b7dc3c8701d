"""Scheduled events through a running ``iris serve``: a file dropped in ``events/`` makes Iris act
(real clock, real watcher, the Bridge transport on a session channel), restarts settle what a
crash left, and the ``/events`` API and ``iris events`` CLI manage the same files."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from iris_runtime.events.files import digest
from iris_runtime.events.state import Firing, FiringStore
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris
from tests.web.test_openapi import SPEC_PATH, assert_documented

pytestmark = pytest.mark.slow

Start = Callable[..., IrisServer]
WriteScript = Callable[[list[dict[str, Any]]], Path]
AGENT_TOKEN = "helper-agent-token-0123456789abcdef"


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def history(server: IrisServer, session: str) -> list[dict[str, Any]]:
    reply = server.get(f"/sessions/{session}/history")
    assert reply.status == 200, reply.body
    entries: list[dict[str, Any]] = reply.json()["entries"]
    return entries


def scripted(
    start_iris: Start, write_script: WriteScript, data_dir: Path | None = None, **env: str
) -> IrisServer:
    script = write_script([{"when": "[EVENT:", "turns": [[{"text": "on it"}]]}])
    return start_iris(data_dir, IRIS_PROVIDER="scripted", IRIS_SCRIPT_FILE=str(script), **env)


def test_dropping_an_immediate_event_file_makes_iris_act(
    start_iris: Start, write_script: WriteScript
) -> None:
    server = scripted(start_iris, write_script)
    events = server.data_dir / "events"
    assert events.is_dir(), "the events/ folder is created at start-up"
    body = {"type": "immediate", "channelId": "SESSION-e2e", "text": "water the plants"}
    tmp = events / ".ping.json.tmp"
    tmp.write_text(json.dumps(body))
    tmp.rename(events / "ping.json")

    wait_for(lambda: len(history(server, "e2e")) == 2, "the event's run in the session history")
    user, reply = history(server, "e2e")
    assert user["role"] == "user" and user["user"] == "event"
    assert user["text"].startswith("[EVENT:events/ping.json:immediate:")
    assert user["text"].endswith("] water the plants")
    assert reply["role"] == "assistant" and reply["text"] == "on it"
    wait_for(lambda: not (events / "ping.json").exists(), "the file to be removed")
    assert sorted(p.name for p in events.iterdir()) == []


def test_a_bad_file_gets_a_reason_and_stays(start_iris: Start) -> None:
    server = start_iris()
    path = server.data_dir / "events" / "oops.json"
    path.write_text('{"type": "immediate", "channelId": "SESSION-x", "text": "hi", "when": 1}')
    reason = path.with_name("oops.json.error")
    wait_for(reason.exists, "the reason file")
    assert "unknown field(s) for a immediate event: when" in reason.read_text()
    assert path.exists()
    assert "rejected events/oops.json" in server.log_tail(200)


def seed(data_dir: Path, rel: str, body: dict[str, str], state: str, ran: bool) -> str:
    """What a crash leaves: the event file, a firing in ``state`` and, if the run had started,
    its user message in the channel's log."""
    path = data_dir / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(body).encode()
    path.write_bytes(raw)
    prompt = f"[EVENT:{rel}:immediate:2024-06-01T12:00:00+00:00] {body['text']}"
    store = FiringStore(data_dir / "state.db")
    store.open()
    key = f"immediate#{digest(raw)[:16]}"
    firing = Firing(rel, key, "immediate", body["channelId"], prompt, digest(raw))
    store.put([firing.with_state(state)])  # type: ignore[arg-type]
    store.close()
    if ran:
        log = data_dir / body["channelId"] / "log.jsonl"
        log.parent.mkdir(parents=True, exist_ok=True)
        asked = {"type": "message", "role": "user", "text": prompt, "user": "event"}
        answered = {"type": "message", "role": "assistant", "text": "done", "status": "done"}
        entries = [{"ts": 1.0, "runId": "r1", **asked}, {"ts": 2.0, "runId": "r1", **answered}]
        log.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return prompt


def test_after_a_crash_an_accepted_event_that_ran_is_removed_not_rerun(
    start_iris: Start, write_script: WriteScript, tmp_path: Path
) -> None:
    data = tmp_path / "crashed"
    body = {"type": "immediate", "channelId": "SESSION-c1", "text": "once only"}
    prompt = seed(data, "events/once.json", body, "accepted", ran=True)
    server = scripted(start_iris, write_script, data_dir=data)
    wait_for(lambda: not (data / "events/once.json").exists(), "the leftover to be removed")
    time.sleep(1.5)  # several watcher and firing passes: nothing may run it again
    assert [e["text"] for e in history(server, "c1")] == [prompt, "done"]


def test_after_a_crash_an_accepted_event_that_never_ran_runs_once(
    start_iris: Start, write_script: WriteScript, tmp_path: Path
) -> None:
    data = tmp_path / "crashed"
    body = {"type": "immediate", "channelId": "SESSION-c2", "text": "do not lose me"}
    prompt = seed(data, "events/lost.json", body, "accepted", ran=False)
    server = scripted(start_iris, write_script, data_dir=data)
    wait_for(lambda: len(history(server, "c2")) == 2, "the run")
    assert [e["text"] for e in history(server, "c2")] == [prompt, "on it"]
    # Kept until the new delivery was accepted (a crash meanwhile loses nothing), then removed.
    wait_for(lambda: not (data / "events/lost.json").exists(), "the file to be removed")


# -- the API ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))
    return loaded


def test_the_events_api_manages_event_files(
    spec: dict[str, Any], start_iris: Start, write_script: WriteScript
) -> None:
    server = scripted(start_iris, write_script)
    (server.data_dir / "agents.json").write_text(
        json.dumps({"helper": {"bridge_url": "http://127.0.0.1:9", "token": AGENT_TOKEN}})
    )
    (server.data_dir / "agents.json").chmod(0o600)
    digest_body = {
        "name": "digest",
        "type": "periodic",
        "channelId": "SESSION-api",
        "text": "morning digest",
        "schedule": "0 9 * * *",
        "timezone": "Europe/Berlin",
    }
    added = server.post("/events", json_body=digest_body)
    entry = assert_documented(spec, "POST", "/events", added, 201)
    assert entry["id"] == "events/digest.json" and entry["status"] == "scheduled"
    assert entry["next"].endswith(("T07:00:00+00:00", "T08:00:00+00:00"))
    assert json.loads((server.data_dir / "events/digest.json").read_text())["timezone"] == (
        "Europe/Berlin"
    )
    again = server.post("/events", json_body=digest_body)
    assert assert_documented(spec, "POST", "/events", again, 409)["code"] == "event_exists"
    replaced = server.post("/events", json_body={**digest_body, "text": "new", "replace": True})
    assert assert_documented(spec, "POST", "/events", replaced, 201)["text"] == "new"

    listed = assert_documented(spec, "GET", "/events", server.get("/events"), 200)
    assert [e["id"] for e in listed["events"]] == ["events/digest.json"]

    fired = server.post("/events/digest/fire")
    copy = assert_documented(spec, "POST", "/events/{name}/fire", fired, 202)["id"]
    assert copy.startswith("events/digest.fired-")
    wait_for(lambda: len(history(server, "api")) == 2, "the fired copy's run")
    assert history(server, "api")[0]["text"].startswith(f"[EVENT:{copy}:immediate:")
    wait_for(lambda: not (server.data_dir / copy).exists(), "the copy to be consumed")
    assert (server.data_dir / "events/digest.json").exists()

    removed = server.request("DELETE", "/events/digest.json")
    body = assert_documented(spec, "DELETE", "/events/{name}", removed, 200)
    assert body == {"removed": True, "id": "events/digest.json"}
    gone = server.request("DELETE", "/events/digest")
    assert assert_documented(spec, "DELETE", "/events/{name}", gone, 404)["code"] == "unknown_event"

    as_agent = server.get("/events", headers={"Authorization": f"Bearer {AGENT_TOKEN}"})
    assert assert_documented(spec, "GET", "/events", as_agent, 403)["code"] == "forbidden"
    anonymous = server.get("/events", auth=False)
    assert assert_documented(spec, "GET", "/events", anonymous, 401)["code"] == "unauthorized"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"name": "../escape"}, "invalid_event_name"),
        ({"name": "a/b"}, "invalid_event_name"),
        ({"name": ".hidden"}, "invalid_event_name"),
        ({"name": "x", "at": "2030-01-01T09:00:00"}, "invalid_event"),
        ({"name": "x", "at": "9999-12-31T23:30:00-01:00"}, "invalid_event"),
        ({"name": "x", "type": "sometimes"}, "invalid_event"),
        ({"name": "x", "channelId": "a..b"}, "invalid_event"),
        ({"name": "x", "transport": "../.."}, "invalid_transport"),
        ({"name": "x", "transport": "slack"}, "unroutable_event"),
        ({"name": "x", "priority": 1}, "unknown_fields"),
    ],
)
def test_bad_event_requests_are_400_and_write_nothing(
    spec: dict[str, Any], shared_iris_server: IrisServer, body: dict[str, Any], code: str
) -> None:
    base = {"type": "one-shot", "channelId": "C1", "text": "x", "at": "2030-01-01T09:00:00Z"}
    if body.get("type") == "sometimes":
        base.pop("at")
    reply = shared_iris_server.post("/events", json_body={**base, **body})
    assert assert_documented(spec, "POST", "/events", reply, 400)["code"] == code
    assert not list((shared_iris_server.data_dir / "events").iterdir())
    assert not (shared_iris_server.data_dir / "escape.json").exists()


@pytest.mark.parametrize(
    "path", ["/events/..%2F..%2Fagents.json", "/events/..%2Fstate.db/fire", "/events/a%00b"]
)
def test_event_names_in_paths_cannot_escape_the_folder(
    spec: dict[str, Any], shared_iris_server: IrisServer, path: str
) -> None:
    method = "POST" if path.endswith("/fire") else "DELETE"
    reply = shared_iris_server.request(method, path)
    documented = "/events/{name}/fire" if method == "POST" else "/events/{name}"
    assert assert_documented(spec, method, documented, reply, 400)["code"] == "invalid_event_name"
    assert (shared_iris_server.data_dir / "state.db").exists()


def test_an_oversized_event_body_is_413(
    spec: dict[str, Any], shared_iris_server: IrisServer
) -> None:
    body = {"name": "big", "type": "immediate", "channelId": "C1", "text": "x" * 70_000}
    reply = shared_iris_server.post("/events", json_body=body)
    assert assert_documented(spec, "POST", "/events", reply, 413)["code"] == "payload_too_large"
    assert not (shared_iris_server.data_dir / "events" / "big.json").exists()


# -- the CLI ------------------------------------------------------------------------------------


def test_the_cli_adds_lists_fires_and_removes_events_a_running_iris_acts_on(
    start_iris: Start, write_script: WriteScript
) -> None:
    server = scripted(start_iris, write_script)
    env = clean_environment(IRIS_DATA_DIR=str(server.data_dir), IRIS_LOAD_PLUGINS="")

    def iris(*args: str) -> str:
        result = run_iris("events", *args, env=env, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    on = ("--channel", "SESSION-cli")
    iris("add", "reminder", *on, "--text", "stretch", "--at", "2099-01-01T09:00:00+01:00")
    iris("add", "weekly", *on, "--text", "review", "--schedule", "0 9 * * MON", "--timezone", "EST")
    listed = {e["name"]: e for e in json.loads(iris("list", "--json"))}
    assert listed["reminder"]["type"] == "one-shot"
    assert listed["reminder"]["next"] == "2099-01-01T09:00:00+01:00"
    assert listed["weekly"]["schedule"] == "0 9 * * MON"
    text = iris("list")
    assert "events/reminder.json" in text and "one-shot" in text

    iris("fire", "reminder")
    wait_for(lambda: len(history(server, "cli")) == 2, "the fired run")
    assert "] stretch" in history(server, "cli")[0]["text"]
    assert (server.data_dir / "events/reminder.json").exists()

    iris("rm", "reminder")
    assert not (server.data_dir / "events/reminder.json").exists()
    assert [e["name"] for e in json.loads(iris("list", "--json"))] == ["weekly"]

    iris("add", "now", "--channel", "SESSION-cli", "--text", "right away")
    wait_for(lambda: len(history(server, "cli")) == 4, "the immediate run")
    assert history(server, "cli")[2]["text"].startswith("[EVENT:events/now.json:immediate:")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "../../x", "--channel", "C1", "--text", "t"), "invalid event name"),
        (("add", "x", "--channel", "C1", "--text", "t", "--at", "2030-01-01"), "no UTC offset"),
        (("add", "x", "--channel", "C1", "--text", "t", "--schedule", "* *"), "timezone"),
        (("rm", "../agents"), "invalid event name"),
        (("rm", "missing"), "no event 'missing'"),
        (("fire", "..%2Fx"), "invalid event name"),
        (("add", "x", "--channel", "C1", "--text", "t", "--transport", "../.."), "transport"),
    ],
)
def test_cli_mistakes_are_clear_errors(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    env = clean_environment(IRIS_DATA_DIR=str(tmp_path / "data"), IRIS_LOAD_PLUGINS="")
    result = run_iris("events", *args, env=env, timeout=60)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "data" / "x.json").exists()


# -- folders, symlinks and reason files through the API and the CLI ----------------------------


def test_the_api_writes_only_to_watched_folders_and_reads_no_reason_through_a_symlink(
    spec: dict[str, Any], iris_server: IrisServer, tmp_path: Path
) -> None:
    events = iris_server.data_dir / "events"
    body = {"name": "b", "type": "immediate", "channelId": "SESSION-x", "text": "hi"}
    unwatched = iris_server.post("/events", json_body={**body, "transport": "bridge"})
    refused = assert_documented(spec, "POST", "/events", unwatched, 400)
    assert refused["code"] == "invalid_transport"
    assert "slack, telegram" in refused["error"]
    assert not (iris_server.data_dir / "bridge/events").exists()
    for method, path in (("DELETE", "/events/b"), ("POST", "/events/b/fire")):
        reply = iris_server.request(method, f"{path}?transport=bridge")
        assert reply.status == 400 and reply.json()["code"] == "invalid_transport"

    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-VALUE")
    (events / "linked.json").write_text(
        json.dumps({"type": "periodic", "channelId": "SESSION-x", "text": "t"} | CRON)
    )
    (events / "linked.json.error").symlink_to(secret)
    listed = assert_documented(spec, "GET", "/events", iris_server.get("/events"), 200)
    assert "TOP-SECRET-VALUE" not in json.dumps(listed)
    assert [e["id"] for e in listed["events"]] == ["events/linked.json"]


CRON = {"schedule": "0 9 * * *", "timezone": "UTC"}


def test_the_cli_knows_the_folders_iris_watches_and_never_follows_a_symlinked_event(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    env = clean_environment(IRIS_DATA_DIR=str(data), IRIS_LOAD_PLUGINS="")

    def iris(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        result = run_iris("events", *args, env=env, timeout=60)
        assert (result.returncode == 0) == ok, result.stderr
        assert "Traceback" not in result.stderr
        return result

    on = ("--channel", "C1", "--text", "t", "--schedule", "0 9 * * *", "--timezone", "UTC")
    refused = iris("add", "x", *on, "--transport", "bridge", ok=False)
    assert "no events folder is watched for transport 'bridge'" in refused.stderr
    assert not (data / "bridge").exists()

    # A transport from a plugin: a running Iris that loaded it created its folder.
    (data / "discord/events").mkdir(parents=True)
    (data / "discord/events/hello.json").write_text(
        json.dumps({"type": "immediate", "channelId": "dc-1", "text": "hi"})
    )
    iris("add", "weekly", *on, "--transport", "discord")
    listed = {e["id"]: e for e in json.loads(iris("list", "--json").stdout)}
    assert sorted(listed) == ["discord/events/hello.json", "discord/events/weekly.json"]
    assert listed["discord/events/weekly.json"]["transport"] == "discord"

    (data / "events").mkdir()
    target = data / "events/b.json"
    target.write_text(json.dumps({"type": "immediate", "channelId": "C1", "text": "keep me"}))
    (data / "events/a.json").symlink_to("b.json")
    assert "symbolic link" in iris("fire", "a", ok=False).stderr
    iris("rm", "a")
    assert not os.path.lexists(data / "events/a.json") and target.exists()


def test_a_corrupt_state_db_disables_events_but_iris_still_serves(
    spec: dict[str, Any], start_iris: Start, tmp_path: Path
) -> None:
    data = tmp_path / "corrupt"
    (data / "events").mkdir(parents=True, mode=0o700)
    (data / "state.db").write_bytes(b"not a database " * 1000)
    event = data / "events/keep.json"
    event.write_text(json.dumps({"type": "immediate", "channelId": "SESSION-k", "text": "x"}))
    server = start_iris(data)
    assert server.get("/health").status == 200

    listed = assert_documented(spec, "GET", "/events", server.get("/events"), 503)
    assert listed["code"] == "events_unavailable" and "state.db" in listed["error"]
    body = {"name": "n", "type": "immediate", "channelId": "SESSION-k", "text": "x"}
    added = assert_documented(spec, "POST", "/events", server.post("/events", json_body=body), 503)
    assert added["code"] == "events_unavailable"
    fired = server.post("/events/keep/fire")
    assert assert_documented(spec, "POST", "/events/{name}/fire", fired, 503)["code"] == (
        "events_unavailable"
    )
    assert "scheduled events are disabled" in server.log_tail(200)
    assert sorted(p.name for p in (data / "events").iterdir()) == ["keep.json"]

    doctor = run_iris(
        "doctor", env=clean_environment(IRIS_DATA_DIR=str(data), IRIS_LOAD_PLUGINS=""), timeout=60
    )
    [line] = [line for line in doctor.stdout.splitlines() if "] events" in line]
    assert "[fail]" in line and "file is not a database" in line
    assert doctor.returncode == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="Iris refuses planted links when it runs as root")
def test_a_symlinked_state_db_disables_events_without_touching_its_target(
    spec: dict[str, Any], start_iris: Start, tmp_path: Path
) -> None:
    data = tmp_path / "linked"
    (data / "events").mkdir(parents=True, mode=0o700)
    victim = tmp_path / "victim.db"
    victim.write_bytes(b"somebody else's file\n")
    (data / "state.db").symlink_to(victim)
    server = start_iris(data)
    assert server.get("/health").status == 200

    listed = assert_documented(spec, "GET", "/events", server.get("/events"), 503)
    assert listed["code"] == "events_unavailable" and "symbolic link" in listed["error"]
    assert victim.read_bytes() == b"somebody else's file\n"
    assert not any(p.name.startswith("victim.db-") for p in tmp_path.iterdir())

    doctor = run_iris(
        "doctor", env=clean_environment(IRIS_DATA_DIR=str(data), IRIS_LOAD_PLUGINS=""), timeout=60
    )
    [line] = [line for line in doctor.stdout.splitlines() if "] events" in line]
    assert "[fail]" in line and "symbolic link" in line
