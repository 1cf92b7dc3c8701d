"""Scheduled events as a user makes them, and the runs they made, read from the channel's log.

Events reach Iris the two ways a user has: a file dropped in ``events/`` (written aside, then
renamed into place, as a careful writer does) and ``POST /events``. What counts is the runs that
went to their end: a user message carrying the event's text whose run logged a reply with status
``done``. A run cut short by a crash legitimately happens again (Iris promises that an event runs
to its end once, not that it is never started twice), so it is not counted; two finished runs of
one event are a duplicate, none is a loss.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import time
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from iris_runtime.engine.channels import resolve_channel_dir
from iris_runtime.testing.server import IrisServer

Body = dict[str, str]
# Generous: the machine is shared and loaded; it only bounds a hang.
DRAIN_SECONDS = 180.0


def immediate(channel: str, text: str) -> Body:
    return {"type": "immediate", "channelId": channel, "text": text}


def one_shot(channel: str, text: str, in_seconds: float) -> Body:
    """Due ``in_seconds`` from now (a negative value: already due, within the grace period)."""
    at = datetime.now(UTC) + timedelta(seconds=in_seconds)
    return {"type": "one-shot", "channelId": channel, "text": text, "at": at.isoformat()}


def drop(data_dir: Path, name: str, body: Body) -> None:
    """Put an event file in ``events/``: written under a hidden name, then renamed."""
    folder = data_dir / "events"
    staged = folder / f".{name}.json.tmp"
    staged.write_text(json.dumps(body))
    os.rename(staged, folder / f"{name}.json")


def drop_in_place(data_dir: Path, name: str, body: Body) -> None:
    """Put an event file in ``events/`` the careless way: written where it is read."""
    (data_dir / "events" / f"{name}.json").write_text(json.dumps(body))


def post(iris: IrisServer, name: str, body: Body) -> bool:
    """``POST /events``: True once Iris answered 201; False when it died before answering (the
    event may or may not have been written, so it was not promised)."""
    try:
        reply = iris.post("/events", json_body={"name": name, **body}, timeout=60)
    except (OSError, http.client.HTTPException):
        return False
    assert reply.status == 201, reply.body
    return True


def log_entries(data_dir: Path, channel: str) -> list[dict[str, Any]]:
    """The channel's log as written so far (read from disk: Iris may be down)."""
    path = resolve_channel_dir(data_dir, channel) / "log.jsonl"
    entries: list[dict[str, Any]] = []
    with contextlib.suppress(FileNotFoundError), path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.endswith("\n"):  # the line being appended right now is not read yet
                entries.append(json.loads(line))
    return entries


def finished_runs(data_dir: Path, channel: str, texts: Iterable[str]) -> Counter[str]:
    """For each event text: how many runs of it went to their end in ``channel``."""
    wanted = list(texts)
    entries = log_entries(data_dir, channel)
    finished = {
        e.get("runId")
        for e in entries
        if e.get("role") == "assistant" and e.get("status") == "done"
    }
    counts: Counter[str] = Counter({text: 0 for text in wanted})
    for entry in entries:
        if entry.get("role") != "user" or entry.get("user") != "event":
            continue
        if entry.get("runId") not in finished:
            continue
        prompt = str(entry.get("text", ""))
        # "[EVENT:<file>:<type>:<when>] <text>" (a late one-shot has a note before its text).
        for text in wanted:
            if prompt.startswith("[EVENT:") and prompt.endswith(f" {text}"):
                counts[text] += 1
    return counts


def started_runs(data_dir: Path, channel: str, text: str) -> int:
    """How many runs of the event with ``text`` have started (logged their user message)."""
    return sum(
        1
        for e in log_entries(data_dir, channel)
        if e.get("role") == "user" and str(e.get("text", "")).endswith(f" {text}")
    )


def restart_and_drain(iris: IrisServer, channels: Iterable[str], label: str) -> list[str]:
    """Restart Iris, then wait until a sentinel event has run to its end on each channel; the
    sentinels' texts.

    The restart is the last chance for a duplicate: start-up checks every firing it cannot
    prove ran against the channel's log. A channel runs its events one at a time, in the order
    they were handed over, and what start-up delivers again goes first: once its sentinel has
    run, nothing sent before it is still on its way."""
    iris.restart()
    sentinels = {channel: f"event {label} sentinel {channel}" for channel in channels}
    for number, (channel, text) in enumerate(sentinels.items()):
        drop(iris.data_dir, f"sentinel-{number}", immediate(channel, text))
    for channel, text in sentinels.items():
        deadline = time.monotonic() + DRAIN_SECONDS
        while finished_runs(iris.data_dir, channel, [text])[text] < 1:
            assert time.monotonic() < deadline, f"{text!r} never ran:\n{iris.log_tail()}"
            time.sleep(0.05)
    return list(sentinels.values())
