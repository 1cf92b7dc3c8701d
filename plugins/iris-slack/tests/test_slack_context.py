"""SlackContext in-process, against a recording stand-in for the Web API: the delivery rules
(placeholder, chunks, msg_too_long re-splits, lost channels) for many lengths and limits."""

from __future__ import annotations

import html
import random
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from iris_slack.api import SlackError
from iris_slack.context import UNDELIVERED, SlackContext

from iris_runtime.engine.transport import TransportEvent
from iris_runtime.transport_kit.edit_pacing import EditPacer


@dataclass
class RecordingApi:
    """Answers like Slack: ``msg_too_long`` past ``max_text``, ``not_in_channel`` when gone."""

    max_text: int = 40_000
    gone: bool = False
    posts: list[tuple[str, str | None]] = field(default_factory=list)
    edits: list[tuple[str, str]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    refused: int = 0
    # chat.postMessage calls (1-based) answered with service_unavailable after all attempts
    failing_posts: set[int] = field(default_factory=set)
    failing_edits: bool = False
    post_calls: int = 0

    def _check(self, method: str, text: str) -> None:
        if self.gone:
            self.refused += 1
            raise SlackError(method, "not_in_channel")
        if len(text) > self.max_text:
            self.refused += 1
            raise SlackError(method, "msg_too_long")

    def post_message(
        self, channel: str, text: str, thread_ts: str | None = None, *, attempts: int = 0
    ) -> str:
        self.post_calls += 1
        if self.post_calls in self.failing_posts:
            raise SlackError("chat.postMessage", "service_unavailable", transient=True)
        self._check("chat.postMessage", text)
        self.posts.append((text, thread_ts))
        return f"ts{len(self.posts)}"

    def update_message(
        self,
        channel: str,
        ts: str,
        text: str,
        *,
        attempts: int = 0,
        slot: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> None:
        with slot() if slot is not None else nullcontext():
            if self.failing_edits:
                raise SlackError("chat.update", "service_unavailable", transient=True)
            self._check("chat.update", text)
            self.edits.append((ts, text))

    def delete_message(self, channel: str, ts: str, *, attempts: int = 0) -> None:
        self.deleted.append(ts)

    def upload_file(self, channel: str, thread: str | None, path: Path, title: str | None) -> None:
        raise SlackError("files.upload_v2", "not_in_channel")


class StubTransport:
    def __init__(self, api: RecordingApi) -> None:
        self.api = api
        self.now = [0.0]
        self.pacer = EditPacer(clock=lambda: self.now[0])
        self.waited: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waited.append(seconds)
        self.now[0] += seconds

    def run_started(self, channel: str, ctx: SlackContext) -> None:
        pass

    def run_ended(self, channel: str, ctx: SlackContext) -> None:
        pass


def context(api: RecordingApi, placeholder: str | None = "P") -> tuple[SlackContext, StubTransport]:
    transport = StubTransport(api)
    ctx = SlackContext(
        transport,  # type: ignore[arg-type]
        TransportEvent("C1", "hi", thread="T1"),
        placeholder_ts=placeholder,
        thread_ts="T1" if placeholder else None,
        channel_name="#c1",
        channels=[],
        users=[],
        sleep=transport.sleep,
    )
    return ctx, transport


def delivered(api: RecordingApi) -> list[str]:
    return [html.unescape(text) for _, text in api.edits] + [
        html.unescape(text) for text, _ in api.posts
    ]


@pytest.mark.parametrize("seed", range(12))
def test_every_reply_arrives_whole_whatever_slack_accepts(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 (test data)
    lines = [
        "".join(rng.choice("ab &<>*_ ") for _ in range(rng.randint(0, 300)))
        for _ in range(rng.randint(1, 600))
    ]
    text = "\n".join(line or "x" for line in lines)
    api = RecordingApi(max_text=rng.choice([1000, 1500, 2500, 3999, 40_000]))
    ctx, _ = context(api)
    ctx.set_working(True)
    ctx.respond(text)
    ctx.set_working(False)
    pieces = delivered(api)
    assert all(len(t) <= api.max_text for _, t in api.edits)
    assert "\n".join(pieces) == text
    assert api.edits[0][0] == "P"  # the placeholder holds the first piece
    assert all(thread == "T1" for _, thread in api.posts)


def test_an_event_reply_starts_in_the_channel_and_continues_in_its_thread() -> None:
    api = RecordingApi()
    ctx, _ = context(api, placeholder=None)
    ctx.set_working(True)
    ctx.respond("x\n" * 5000)
    ctx.set_working(False)
    assert api.posts[0][1] is None and len(api.posts) >= 3
    assert {thread for _, thread in api.posts[1:]} == {"ts1"}
    assert api.edits == []


def test_silence_deletes_the_placeholder_and_stop_says_so() -> None:
    api = RecordingApi()
    ctx, _ = context(api)
    ctx.set_working(True)
    ctx.delete_message()
    ctx.set_working(False)
    assert api.deleted == ["P"] and api.edits == [] and api.posts == []
    stopped, _ = context(api)
    stopped.stopped = True
    stopped.set_working(True)
    stopped.set_working(False)
    assert api.edits == [("P", "_(stopped)_")]


def test_a_failure_note_in_the_thread_replaces_an_empty_placeholder() -> None:
    api = RecordingApi()
    ctx, _ = context(api)
    ctx.set_working(True)
    ctx.respond_in_thread("(run failed: boom)")
    ctx.set_working(False)
    assert api.posts == [("(run failed: boom)", "T1")] and api.deleted == ["P"]


def test_a_lost_channel_stops_delivery_at_once() -> None:
    api = RecordingApi(gone=True)
    ctx, _ = context(api)
    ctx.set_working(True)
    ctx.respond("y\n" * 20_000)
    ctx.upload_file("/nonexistent/report.txt")
    ctx.set_working(False)
    assert api.refused <= 3  # the upload note, the edit: then it gives up


def test_the_final_edit_waits_for_the_channels_edit_slot() -> None:
    api = RecordingApi()
    ctx, transport = context(api)
    with transport.pacer.slot("C1", transport.sleep):
        pass  # an edit just went out on this channel
    ctx.set_working(True)
    ctx.respond("done")
    ctx.set_working(False)
    assert transport.waited == [1.0] and api.edits == [("P", "done")]


def test_a_chunk_that_fails_ends_delivery_with_one_note() -> None:
    api = RecordingApi(failing_posts={2})
    ctx, _ = context(api)
    ctx.set_working(True)
    ctx.respond("\n".join(f"PART{i} " + "x" * 3990 for i in range(5)))
    ctx.set_working(False)
    assert [t[:5] for _, t in api.edits] == ["PART0"]
    # PART1 (the second post... the first is PART1) failed: nothing after it, one note instead
    posted = [html.unescape(t) for t, _ in api.posts]
    assert [t[:5] for t in posted[:-1]] == ["PART1"] or posted[:-1] == []
    assert posted[-1] == UNDELIVERED and all(thread == "T1" for _, thread in api.posts)
    assert not any(t.startswith(("PART3", "PART4")) for t in posted)


def test_a_placeholder_that_cannot_be_edited_is_removed_not_left_thinking() -> None:
    api = RecordingApi(failing_edits=True)
    ctx, _ = context(api)
    ctx.set_working(True)
    ctx.respond("the answer")
    ctx.set_working(False)
    assert api.deleted == ["P"] and api.posts == [("the answer", "T1")]


def test_a_context_abandoned_before_it_worked_replaces_thinking() -> None:
    api = RecordingApi()
    ctx, _ = context(api)
    ctx.abandon("_(the run failed: boom)_")
    ctx.set_working(False)  # a late finish changes nothing
    assert api.edits == [("P", "_(the run failed: boom)_")]
