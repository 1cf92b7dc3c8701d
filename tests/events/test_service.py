"""The event service on a ManualClock: each event type, edits, deletions, downtime, DST, and
delivery that waits instead of dropping. Real files, a real state.db; only time is simulated."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from iris_runtime.events.files import EventSpec, Folder
from iris_runtime.events.service import EventService
from iris_runtime.events.state import FiringStore
from tests.events.conftest import START, FakeTransport, Harness, immediate, one_shot, periodic

# -- immediate -----------------------------------------------------------------------------------


def test_an_immediate_event_runs_once_and_its_file_is_then_removed(harness: Harness) -> None:
    service = harness.service()
    path = harness.write("events/hello.json", immediate(text="say hi"))
    harness.step(service)
    picked = START.isoformat(timespec="seconds")
    assert harness.transport.texts() == [f"[EVENT:events/hello.json:immediate:{picked}] say hi"]
    event = harness.transport.accepted[0]
    assert event.channel == "C1" and event.user == "event"
    assert not path.exists()
    harness.step(service, 60)
    assert len(harness.transport.accepted) == 1
    store = FiringStore(harness.data_dir / "state.db")
    store.open()
    [firing] = store.unsettled()  # done, and verified only once seen in a log by the next start
    assert firing.state == "done" and firing.event == "events/hello.json"
    store.close()


def test_the_same_immediate_file_dropped_again_runs_again(harness: Harness) -> None:
    service = harness.service()
    for _ in range(2):
        harness.write("events/again.json", immediate(text="ping"))
        harness.step(service)
        harness.step(service)
    assert len(harness.transport.accepted) == 2


# -- one-shot ------------------------------------------------------------------------------------


def test_a_one_shot_fires_at_its_instant_in_its_own_offset(harness: Harness) -> None:
    service = harness.service()
    at = "2024-06-01T14:30:00+02:00"  # 12:30 UTC
    path = harness.write("events/call.json", one_shot(at, text="call Bob"))
    harness.step(service, 29 * 60)
    assert harness.transport.accepted == [] and path.exists()
    harness.step(service, 60)
    assert harness.transport.texts() == [f"[EVENT:events/call.json:one-shot:{at}] call Bob"]
    assert not path.exists()


def test_a_one_shot_a_year_ahead_waits_the_whole_year(harness: Harness) -> None:
    service = harness.service()
    path = harness.write("events/anniversary.json", one_shot("2025-06-01T12:00:00Z"))
    harness.step(service)
    assert service.next_time("events/anniversary.json") == datetime(2025, 6, 1, 12, tzinfo=UTC)
    for day in range(364):
        harness.step(service, 86400)
        assert harness.transport.accepted == [], f"fired early, on day {day + 1}"
    harness.clock.set(datetime(2025, 6, 1, 11, 59, 59, tzinfo=UTC))
    harness.step(service)
    assert harness.transport.accepted == [] and path.exists()
    harness.step(service, 1)
    assert len(harness.transport.accepted) == 1 and not path.exists()


def test_a_one_shot_missed_during_downtime_fires_once_at_start_marked_late(
    harness: Harness,
) -> None:
    path = harness.write("events/missed.json", one_shot("2024-06-01T09:00:00Z", text="standup"))
    service = harness.service()  # Iris starts at 12:00, three hours late
    harness.step(service)
    [text] = harness.transport.texts()
    assert text.startswith("[EVENT:events/missed.json:one-shot:2024-06-01T09:00:00+00:00] (late:")
    assert text.endswith("standup")
    assert not path.exists()
    harness.step(service, 3600)
    assert len(harness.transport.accepted) == 1


def test_a_one_shot_deleted_before_it_fires_is_cancelled(harness: Harness) -> None:
    service = harness.service()
    path = harness.write("events/later.json", one_shot("2024-06-01T13:00:00Z"))
    harness.step(service)
    assert service.next_time("events/later.json") is not None
    path.unlink()
    harness.step(service)
    assert service.next_time("events/later.json") is None
    harness.step(service, 7200)
    assert harness.transport.accepted == []


def test_a_one_shot_moved_later_fires_at_the_new_time_only(harness: Harness) -> None:
    service = harness.service()
    harness.write("events/move.json", one_shot("2024-06-01T12:10:00Z"))
    harness.step(service)
    harness.write("events/move.json", one_shot("2024-06-01T12:20:00Z"))
    harness.step(service, 60)
    harness.step(service, 10 * 60)
    assert harness.transport.accepted == []
    harness.step(service, 10 * 60)
    assert len(harness.transport.accepted) == 1


# -- periodic ------------------------------------------------------------------------------------


def test_a_periodic_event_fires_at_each_instant_and_keeps_its_file(harness: Harness) -> None:
    service = harness.service()
    path = harness.write("events/tick.json", periodic("*/15 * * * *", text="check"))
    harness.step(service)
    for _ in range(4):
        harness.step(service, 15 * 60)
    assert harness.transport.texts() == [
        f"[EVENT:events/tick.json:periodic:2024-06-01T{t}:00+00:00] check"
        for t in ("12:15", "12:30", "12:45", "13:00")
    ]
    assert path.exists()


def test_periodic_runs_missed_while_down_are_not_replayed(harness: Harness) -> None:
    harness.write("events/hourly.json", periodic("0 * * * *"))
    service = harness.service()
    harness.step(service)
    service.stop()
    harness.clock.advance(5 * 3600)  # Iris is down from 12:00 to 17:00
    service = harness.service()
    harness.step(service)
    assert harness.transport.accepted == []
    harness.step(service, 3600)
    assert harness.transport.texts() == [
        "[EVENT:events/hourly.json:periodic:2024-06-01T18:00:00+00:00] digest"
    ]


def test_a_periodic_event_follows_its_timezone_across_dst(harness: Harness) -> None:
    harness.clock.set(datetime(2024, 3, 29, 12, 0, tzinfo=UTC))
    service = harness.service()
    harness.write("events/morning.json", periodic("0 9 * * *", "Europe/Berlin", text="coffee"))
    harness.write("events/night.json", periodic("30 2 * * *", "Europe/Berlin", text="backup"))
    harness.step(service)
    for _ in range(8 * 24):  # to 2024-04-02 12:00 UTC; DST starts on 31 March
        harness.step(service, 1800)
    assert harness.transport.texts() == [
        "[EVENT:events/night.json:periodic:2024-03-30T02:30:00+01:00] backup",
        "[EVENT:events/morning.json:periodic:2024-03-30T09:00:00+01:00] coffee",
        # 02:30 does not exist on 31 March in Berlin: that night has no backup.
        "[EVENT:events/morning.json:periodic:2024-03-31T09:00:00+02:00] coffee",
        "[EVENT:events/night.json:periodic:2024-04-01T02:30:00+02:00] backup",
        "[EVENT:events/morning.json:periodic:2024-04-01T09:00:00+02:00] coffee",
        "[EVENT:events/night.json:periodic:2024-04-02T02:30:00+02:00] backup",
        "[EVENT:events/morning.json:periodic:2024-04-02T09:00:00+02:00] coffee",
    ]


def test_a_timezone_changed_at_dst_reschedules_the_event(harness: Harness) -> None:
    # Between the US (10 March) and EU (31 March) switches, New York is 4 h behind Berlin's 5.
    harness.clock.set(datetime(2024, 3, 20, 0, 0, tzinfo=UTC))
    service = harness.service()
    harness.write("events/tz.json", periodic("0 9 * * *", "America/New_York"))
    harness.step(service)
    assert service.next_time("events/tz.json") == datetime(2024, 3, 20, 13, tzinfo=UTC)
    harness.write("events/tz.json", periodic("0 9 * * *", "Europe/Berlin"))
    harness.step(service)
    assert service.next_time("events/tz.json") == datetime(2024, 3, 20, 8, tzinfo=UTC)
    harness.step(service, 8 * 3600)
    assert harness.transport.texts() == [
        "[EVENT:events/tz.json:periodic:2024-03-20T09:00:00+01:00] digest"
    ]


def test_a_periodic_file_edited_while_scheduled_is_rescheduled(harness: Harness) -> None:
    service = harness.service()
    path = harness.write("events/edit.json", periodic("0 13 * * *", text="old"))
    harness.step(service)
    assert service.next_time("events/edit.json") == datetime(2024, 6, 1, 13, tzinfo=UTC)
    harness.write("events/edit.json", periodic("30 12 * * *", text="new"))
    harness.step(service)
    assert service.next_time("events/edit.json") == datetime(2024, 6, 1, 12, 30, tzinfo=UTC)
    harness.step(service, 1800)
    harness.step(service, 1800)  # 13:00, the old time: nothing
    assert harness.transport.texts() == [
        "[EVENT:events/edit.json:periodic:2024-06-01T12:30:00+00:00] new"
    ]
    path.unlink()
    harness.step(service, 86400)
    assert len(harness.transport.accepted) == 1


def test_touching_a_periodic_file_without_changing_it_keeps_its_schedule(
    harness: Harness,
) -> None:
    service = harness.service()
    path = harness.write("events/same.json", periodic("0 * * * *"))
    harness.step(service)
    before = path.read_bytes()
    harness.step(service, 3599)
    path.write_bytes(before)  # same content, new mtime
    harness.step(service, 1)
    assert len(harness.transport.accepted) == 1


# -- waiting instead of dropping -----------------------------------------------------------------


def test_a_full_queue_keeps_the_event_and_retries_until_it_is_accepted(
    harness: Harness,
) -> None:
    service = harness.service()
    harness.transport.refuse = True
    path = harness.write("events/busy.json", immediate(text="when you can"))
    harness.step(service)
    assert harness.transport.offers == 1 and harness.transport.accepted == []
    assert path.exists()
    assert service.waiting() == {"events/busy.json": "C1"}
    harness.step(service, 0.1)
    assert harness.transport.offers == 1, "retried before its backoff"
    for _ in range(20):
        harness.step(service, 5)
        assert path.exists()
    offers = harness.transport.offers
    assert 10 < offers <= 21  # backoff: 0.25 s doubling to at most 5 s
    harness.transport.refuse = False
    harness.step(service, 5)
    assert len(harness.transport.accepted) == 1 and not path.exists()
    assert service.waiting() == {}
    harness.step(service, 60)
    assert len(harness.transport.accepted) == 1


def test_waiting_events_of_a_channel_are_delivered_in_order(harness: Harness) -> None:
    service = harness.service()
    harness.transport.refuse = True
    harness.write("events/a.json", one_shot("2024-06-01T12:01:00Z", text="first"))
    harness.write("events/b.json", one_shot("2024-06-01T12:02:00Z", text="second"))
    harness.write("events/c.json", one_shot("2024-06-01T12:03:00Z", text="third"))
    harness.step(service)
    harness.step(service, 240)
    harness.transport.refuse = False
    harness.step(service, 5)
    assert [t.split("] ")[1] for t in harness.transport.texts()] == ["first", "second", "third"]


def test_a_waiting_event_whose_file_is_deleted_is_cancelled(harness: Harness) -> None:
    service = harness.service()
    harness.transport.refuse = True
    path = harness.write("events/nvm.json", immediate())
    harness.step(service)
    path.unlink()
    harness.step(service)
    harness.transport.refuse = False
    harness.step(service, 10)
    assert harness.transport.accepted == [] and service.waiting() == {}


def test_a_waiting_periodic_event_skips_instants_instead_of_piling_up(harness: Harness) -> None:
    service = harness.service()
    harness.transport.refuse = True
    harness.write("events/often.json", periodic("* * * * *"))
    harness.step(service)
    for _ in range(10):
        harness.step(service, 60)
    harness.transport.refuse = False
    harness.step(service, 5)
    assert harness.transport.texts() == [
        "[EVENT:events/often.json:periodic:2024-06-01T12:01:00+00:00] digest"
    ]


class CountingService(EventService):
    """Counts the files the watcher read and reported."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[str] = []

    def on_event(self, rel: str, folder: Folder, spec: EventSpec, file_digest: str) -> str | None:
        self.seen.append(rel)
        return super().on_event(rel, folder, spec, file_digest)


def test_ten_thousand_every_minute_events_cost_bounded_work(harness: Harness) -> None:
    """A pathological folder: 10,000 files of ``* * * * *`` for one channel whose queue is full.
    Rescans read nothing unchanged, each event waits at most once, and the full channel costs a
    few offers per pass, not one per waiting event."""
    service = harness.service(CountingService)
    assert isinstance(service, CountingService)
    for i in range(10_000):
        harness.write(f"events/e{i:05}.json", periodic("* * * * *"))
    harness.step(service)
    assert harness.transport.accepted == [] and len(service.seen) == 10_000
    service.seen.clear()
    harness.transport.refuse = True
    for _ in range(3):
        harness.step(service, 60)
    assert service.seen == [], "unchanged files were read again"
    assert harness.transport.offers <= 10, harness.transport.offers
    assert len(service.waiting()) == 10_000
    harness.transport.refuse = False
    harness.step(service, 5)
    assert len(harness.transport.accepted) == 10_000
    assert len({e.text.split(":periodic:")[0] for e in harness.transport.accepted}) == 10_000


# -- bad input -----------------------------------------------------------------------------------


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


# -- crashes ---------------------------------------------------------------------------------------


class Crash(BaseException):
    """Stands for the process dying at that exact point."""


def crash_on_remove(path: object) -> None:
    raise Crash(str(path))


def test_a_crash_between_acceptance_and_removal_does_not_run_it_twice(
    harness: Harness,
) -> None:
    first = harness.service(remove_file=crash_on_remove)
    path = harness.write("events/once.json", immediate(text="exactly once"))
    with pytest.raises(Crash):
        harness.step(first)
    assert len(harness.transport.accepted) == 1
    [leftover] = path.parent.iterdir()  # taken aside to be removed when the crash came
    assert leftover.name.startswith(".consuming-") and leftover.name.endswith(".once.json.tmp")
    harness.services.remove(first)  # it "died": no orderly stop

    second = harness.service()  # the run is in the channel's log: it ran
    assert list(path.parent.iterdir()) == [], "the leftover file is removed at start-up"
    harness.step(second, 60)
    assert len(harness.transport.accepted) == 1


def test_an_accepted_run_lost_before_it_started_is_delivered_again(harness: Harness) -> None:
    first = harness.service(remove_file=crash_on_remove)
    path = harness.write("events/lost.json", immediate(text="do not lose me"))
    with pytest.raises(Crash):
        harness.step(first)
    harness.services.remove(first)
    lost = harness.transport.accepted.pop()  # the queue died with the process: it never ran

    second = harness.service()
    assert not path.exists()
    harness.step(second)
    assert harness.transport.texts() == [lost.text]
    harness.step(second, 60)
    assert len(harness.transport.accepted) == 1


def test_a_crash_while_waiting_for_a_full_queue_loses_nothing(harness: Harness) -> None:
    first = harness.service()
    harness.transport.refuse = True
    path = harness.write("events/patient.json", one_shot("2024-06-01T12:00:30Z"))
    harness.step(first, 60)
    harness.services.remove(first)  # dies while the event waits
    harness.transport.refuse = False
    second = harness.service()
    harness.step(second)
    assert len(harness.transport.accepted) == 1 and not path.exists()
    [text] = harness.transport.texts()
    assert text.startswith("[EVENT:events/patient.json:one-shot:2024-06-01T12:00:30+00:00]")


def test_an_event_rewritten_while_iris_was_down_runs_as_rewritten(harness: Harness) -> None:
    first = harness.service()
    harness.transport.refuse = True
    harness.write("events/draft.json", immediate(text="first draft"))
    harness.step(first)
    first.stop()
    harness.services.remove(first)
    harness.write("events/draft.json", immediate(text="final text"))
    harness.transport.refuse = False
    second = harness.service()
    harness.step(second)
    harness.step(second, 60)
    assert [t.split("] ")[1] for t in harness.transport.texts()] == ["final text"]
    store = FiringStore(harness.data_dir / "state.db")
    store.open()
    assert [f.state for f in store.unsettled()] == ["done"]
    store.close()


def test_restarts_never_repeat_a_run_that_happened(harness: Harness) -> None:
    harness.write("events/now.json", immediate())
    harness.write("events/soon.json", one_shot("2024-06-01T12:05:00Z"))
    service = harness.service()
    harness.step(service)
    harness.step(service, 600)
    service.stop()
    for _ in range(3):
        service = harness.service()
        harness.step(service, 60)
        service.stop()
    assert len(harness.transport.accepted) == 2


def test_start_up_and_firing_use_the_injected_clock_only(harness: Harness) -> None:
    service = harness.service()
    harness.write("events/x.json", one_shot((START + timedelta(days=3)).isoformat()))
    harness.step(service)
    harness.clock.advance(3 * 86400)
    service.tick()
    assert len(harness.transport.accepted) == 1
