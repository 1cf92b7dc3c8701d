"""Event files: what validates, what is refused (and why), safe names, atomic writes; and the
watcher's cheap polling tier noticing what a full pass would."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from iris_runtime.errors import InvalidInput
from iris_runtime.events.files import (
    MAX_EVENT_BYTES,
    EventExists,
    EventSpec,
    Folder,
    create_exclusive,
    encode_event,
    event_path,
    folder_of,
    folders_for,
    parse_event_bytes,
    validate_event_name,
    write_atomic,
)
from iris_runtime.events.schedule import ManualClock
from iris_runtime.events.watcher import Watcher


def parse(body: object) -> EventSpec:
    return parse_event_bytes(json.dumps(body).encode())


def test_each_type_parses_and_writes_back_the_same_fields() -> None:
    bodies = [
        {"type": "immediate", "channelId": "C1", "text": "now"},
        {"type": "one-shot", "channelId": "tg-1", "text": "so", "at": "2030-01-31T09:00:00+01:00"},
        {
            "type": "periodic",
            "channelId": "SESSION-a",
            "text": "daily",
            "schedule": "0 9 * * 1-5",
            "timezone": "Europe/Berlin",
        },
    ]
    for body in bodies:
        spec = parse(body)
        assert spec.to_json() == body
        assert parse_event_bytes(encode_event(spec)) == spec
    one_shot = parse(bodies[1])
    assert one_shot.at == datetime(2030, 1, 31, 8, tzinfo=UTC)
    assert parse({**bodies[1], "at": "2030-01-31T08:00:00Z"}).at == one_shot.at


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"type": "immediate", "channelId": "C1"}, "missing field(s) for a immediate event: text"),
        ({"type": "immediate", "channelId": "C1", "text": "  "}, "'text' must be a non-empty"),
        ({"type": "immediate", "channelId": 5, "text": "x"}, "'channelId' must be a non-empty"),
        ({"type": "weekly", "channelId": "C1", "text": "x"}, "'type' must be one of"),
        ({"channelId": "C1", "text": "x"}, "'type' must be one of"),
        (
            {"type": "immediate", "channelId": "C1", "text": "x", "at": "2030-01-01T00:00Z"},
            "unknown field(s) for a immediate event: at",
        ),
        (
            {"type": "one-shot", "channelId": "C1", "text": "x", "at": "tomorrow"},
            "not an ISO-8601 time",
        ),
        (
            {"type": "one-shot", "channelId": "C1", "text": "x", "at": "2030-01-01T09:00:00"},
            "no UTC offset",
        ),
        (
            {"type": "periodic", "channelId": "C1", "text": "x", "schedule": "0 9 * *"},
            "missing field(s) for a periodic event: timezone",
        ),
        (
            {
                "type": "periodic",
                "channelId": "C1",
                "text": "x",
                "schedule": "0 9 * *",
                "timezone": "UTC",
            },
            "expected 5 fields",
        ),
        (
            {
                "type": "periodic",
                "channelId": "C1",
                "text": "x",
                "schedule": "0 0 31 2 *",
                "timezone": "UTC",
            },
            "day-of-month",
        ),
        (
            {
                "type": "periodic",
                "channelId": "C1",
                "text": "x",
                "schedule": "0 9 * * *",
                "timezone": "../../etc/passwd",
            },
            "IANA time zone",
        ),
        (
            {"type": "one-shot", "channelId": "C1", "text": "x", "at": "9999-12-31T23:30:00-01:00"},
            "'at' is out of range",
        ),
        (
            {"type": "one-shot", "channelId": "C1", "text": "x", "at": "0001-01-01T00:30:00+01:00"},
            "'at' is out of range",
        ),
        ({"type": "immediate", "channelId": "a/b", "text": "x"}, "invalid channel id"),
        ({"type": "immediate", "channelId": "agents.json", "text": "x"}, "reserved"),
        ("just a string", "one JSON object"),
    ],
)
def test_bad_events_are_refused_with_a_reason(body: object, reason: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse(body)
    assert reason in refused.value.message
    assert refused.value.code == "invalid_event"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b'{"type": "immediate", "channelId": "C1", "text": "x"', "malformed JSON"),
        (b"\xc3\x28", "not UTF-8"),
        (b" " * (MAX_EVENT_BYTES + 1), "larger than"),
    ],
)
def test_unreadable_bytes_are_refused_with_a_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_event_bytes(raw)
    assert reason in refused.value.message


@pytest.mark.parametrize(
    "name",
    ["../x", "..", "a/b", "a\\b", "/etc/passwd", ".hidden", "", "a\x00b", "x" * 129, "a..b"],
)
def test_event_names_that_could_leave_the_folder_are_refused(name: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as refused:
        event_path(tmp_path, Folder("events"), name)
    assert refused.value.status == 400


def test_names_and_folders(tmp_path: Path) -> None:
    assert validate_event_name("digest") == validate_event_name("digest.json") == "digest"
    assert event_path(tmp_path, Folder("events"), "digest.json") == (
        tmp_path.resolve() / "events" / "digest.json"
    )
    assert folder_of(None) == Folder("events")
    assert folder_of("slack") == Folder("slack/events", "slack")
    with pytest.raises(InvalidInput):
        folder_of("../x")
    assert [f.rel for f in folders_for(["discord", "../bad"])] == [
        "events",
        "discord/events",
        "slack/events",
        "telegram/events",
    ]


def test_writes_are_atomic_and_exclusive_creation_refuses_an_existing_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events" / "a.json"
    create_exclusive(path, b"one")
    with pytest.raises(EventExists) as exists:
        create_exclusive(path, b"two")
    assert exists.value.status == 409
    write_atomic(path, b"three")
    assert path.read_bytes() == b"three"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.json"], "temp files left behind"


# -- the watcher's tiers ----------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.gone: list[str] = []

    def on_event(self, rel: str, folder: Folder, spec: EventSpec, file_digest: str) -> None:
        self.events.append(rel)

    def on_gone(self, rel: str) -> None:
        self.gone.append(rel)


def test_the_cheap_poll_sees_new_and_removed_files_and_the_full_pass_sees_in_place_edits(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "events"
    folder.mkdir()
    sink = Recorder()
    watcher = Watcher(tmp_path, [Folder("events")], sink, ManualClock(datetime.now(UTC)))
    body = {"type": "immediate", "channelId": "C1", "text": "x"}
    (folder / "a.json").write_text(json.dumps(body))
    watcher.scan_once()
    assert sink.events == ["events/a.json"]

    # Age the folder so it is not "racy" (changed within the last moments): the cheap poll then
    # trusts its mtime alone.
    old = (datetime.now(UTC) - timedelta(minutes=5)).timestamp()
    os.utime(folder, (old, old))
    watcher.scan_once()
    watcher.poll_once()
    assert sink.events == ["events/a.json"]

    write_atomic(folder / "b.json", json.dumps(body).encode())  # a rename: the folder changes
    watcher.poll_once()
    assert sink.events == ["events/a.json", "events/b.json"]

    os.utime(folder, (old, old))
    watcher.scan_once()
    (folder / "a.json").write_text(json.dumps({**body, "text": "edited in place"}))
    os.utime(folder, (old, old))  # an in-place edit leaves the folder alone
    watcher.poll_once()
    assert sink.events == ["events/a.json", "events/b.json"]
    watcher.scan_once()
    assert sink.events == ["events/a.json", "events/b.json", "events/a.json"]

    (folder / "b.json").unlink()
    watcher.poll_once()
    assert sink.gone == ["events/b.json"]
