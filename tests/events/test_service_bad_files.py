"""The event service on a ManualClock given bad input: a file that does not validate, fails in
an unforeseen way, is half written or names a channel nobody owns is rejected with its reason
written next to it (and runs once fixed), never stopping the other files; names that are not
event files are left alone. Real files, a real state.db; only time is simulated."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from iris_runtime.events.files import EventSpec, Folder
from iris_runtime.events.service import EventService
from tests.events.conftest import FakeTransport, Harness, immediate, one_shot, periodic


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "malformed JSON"),
        (b"[1, 2]", "one JSON object"),
        (json.dumps({**immediate(), "priority": "high"}).encode(), "unknown field(s)"),
        (json.dumps({**immediate(), "type": "hourly"}).encode(), "'type' must be one of"),
        (json.dumps(one_shot("2024-07-01T09:00:00")).encode(), "no UTC offset"),
        (json.dumps(periodic("61 * * * *")).encode(), "minute"),
        (json.dumps(periodic("0 9 * * *", "Mars/Olympus")).encode(), "IANA time zone"),
        (json.dumps(immediate(channel="../etc")).encode(), "invalid channel id"),
        (json.dumps(immediate(channel="events")).encode(), "reserved"),
        (b"\xff\xfe garbage", "not UTF-8"),
    ],
)
def test_a_bad_file_is_rejected_with_its_reason_written_next_to_it(
    harness: Harness, body: bytes, reason: str
) -> None:
    service = harness.service()
    path = harness.write("events/bad.json", body)
    harness.step(service)
    error = path.with_name("bad.json.error")
    assert not error.exists(), "rejected before the writer's grace period ended"
    harness.step(service, 1)
    assert reason in error.read_text()
    assert path.exists(), "a rejected file must never be deleted"
    assert harness.transport.accepted == []


def test_a_one_shot_beyond_the_utc_range_is_rejected_and_later_files_still_run(
    harness: Harness,
) -> None:
    service = harness.service()
    poison = harness.write("events/a-poison.json", one_shot("9999-12-31T23:30:00-01:00"))
    for i in range(5):
        harness.write(f"events/z{i}.json", immediate(text=f"n{i}"))
    harness.step(service)
    harness.step(service, 1)
    assert sorted(t.split("] ")[1] for t in harness.transport.texts()) == [
        f"n{i}" for i in range(5)
    ]
    assert "'at' is out of range" in poison.with_name("a-poison.json.error").read_text()
    assert poison.exists()


class ExplodingService(EventService):
    """Fails on one file the way an unforeseen bug would."""

    def on_event(self, rel: str, folder: Folder, spec: EventSpec, file_digest: str) -> str | None:
        if rel.endswith("boom.json"):
            raise OverflowError("date value out of range")
        return super().on_event(rel, folder, spec, file_digest)


def test_an_unexpected_error_on_one_file_rejects_that_file_only(harness: Harness) -> None:
    service = harness.service(ExplodingService)
    boom = harness.write("events/a-boom.json", immediate(text="boom"))
    harness.write("events/b-fine.json", immediate(text="fine"))
    harness.step(service)
    assert [t.split("] ")[1] for t in harness.transport.texts()] == ["fine"]
    reason = boom.with_name("a-boom.json.error").read_text()
    assert "OverflowError: date value out of range" in reason
    assert boom.exists()


def test_a_half_written_file_is_retried_and_runs_once_complete(harness: Harness) -> None:
    service = harness.service()
    whole = json.dumps(immediate(text="patience")).encode()
    path = harness.write("events/slow.json", whole[:20])
    harness.step(service)
    harness.step(service, 0.5)
    assert harness.transport.accepted == []
    path.write_bytes(whole)
    harness.step(service, 0.4)
    assert len(harness.transport.accepted) == 1
    assert not path.with_name("slow.json.error").exists()


def test_a_rejected_file_that_is_fixed_loses_its_error_and_is_scheduled(
    harness: Harness,
) -> None:
    service = harness.service()
    path = harness.write("events/fixme.json", one_shot("2024-06-01 13:00"))
    harness.step(service)
    harness.step(service, 2)
    error = path.with_name("fixme.json.error")
    assert "no UTC offset" in error.read_text()
    harness.write("events/fixme.json", one_shot("2024-06-01T13:00:00+00:00"))
    harness.step(service)
    assert not error.exists()
    assert service.next_time("events/fixme.json") == datetime(2024, 6, 1, 13, tzinfo=UTC)


def test_a_channel_nobody_owns_is_rejected(harness: Harness) -> None:
    claiming_only = FakeTransport("tg", prefix="tg-")
    harness.registry = type(harness.registry)()
    harness.registry.add(claiming_only)
    service = harness.service()
    path = harness.write("events/lost.json", immediate(channel="C1"))
    harness.step(service)
    assert "no transport owns channel 'C1'" in path.with_name("lost.json.error").read_text()
    assert path.exists()


def test_a_transport_folder_takes_only_its_transports_channels(harness: Harness) -> None:
    harness.registry.add(FakeTransport("telegram", prefix="tg-"))
    service = harness.service()
    wrong = harness.write("telegram/events/wrong.json", immediate(channel="C1"))
    right = harness.write("telegram/events/right.json", immediate(channel="tg-42"))
    orphan = harness.write("slack/events/nobody.json", immediate(channel="C1"))
    harness.step(service)
    assert "belongs to the fake transport" in wrong.with_name("wrong.json.error").read_text()
    assert "slack transport is not loaded" in orphan.with_name("nobody.json.error").read_text()
    assert not right.exists()
    assert [e.channel for e in harness.transport.accepted] == []
    telegram = harness.registry.get("telegram")
    assert isinstance(telegram, FakeTransport)
    assert telegram.texts()[0].startswith("[EVENT:telegram/events/right.json:immediate:")


def test_temp_files_dotfiles_and_other_names_are_left_alone(harness: Harness) -> None:
    service = harness.service()
    body = json.dumps(immediate())
    for name in (".hidden.json", "draft.json.tmp", "notes.txt", "x.json~", "y.json.error"):
        harness.write(f"events/{name}", body)
    harness.step(service)
    harness.step(service, 5)
    assert harness.transport.accepted == []
    for name in (".hidden.json", "draft.json.tmp", "notes.txt", "x.json~"):
        assert (harness.data_dir / "events" / name).exists()
    # A reason file whose event file is gone is our own leftover, and is tidied away.
    assert not (harness.data_dir / "events/y.json.error").exists()


def test_a_file_deleted_while_rejected_takes_its_error_with_it(harness: Harness) -> None:
    service = harness.service()
    path = harness.write("events/oops.json", b"{")
    harness.step(service)
    harness.step(service, 2)
    assert path.with_name("oops.json.error").exists()
    path.unlink()
    harness.step(service)
    assert not path.with_name("oops.json.error").exists()
