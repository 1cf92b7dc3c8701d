"""The event service on a ManualClock when a channel's queue is full: delivery waits instead of
dropping, in order, is cancelled with its file, skips periodic instants rather than piling them
up, and costs bounded work with 10,000 events waiting. Real files, a real state.db; only time is
simulated."""

from __future__ import annotations

from typing import Any

from iris_runtime.events.files import EventSpec, Folder
from iris_runtime.events.service import EventService
from tests.events.conftest import Harness, immediate, one_shot, periodic


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
