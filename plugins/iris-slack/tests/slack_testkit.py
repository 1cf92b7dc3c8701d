"""Helpers for the Slack plugin's tests: a served Iris on the fake Slack, sub-agents, logs."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from iris_runtime.testing.fake_slack import FakeSlack, Message
from iris_runtime.testing.server import IrisServer


def slack_fake(**kwargs: Any) -> FakeSlack:
    """A started fake with tokens unique to the test (so a test can grep logs for them)."""
    return FakeSlack(
        bot_token="xoxb-" + secrets.token_hex(16),
        app_token="xapp-" + secrets.token_hex(16),
        **kwargs,
    ).start()


def stopped_clean(fake: FakeSlack) -> Iterator[FakeSlack]:
    """``fake`` for a fixture to ``yield from``: stopped once its tests are done, which then fail
    if a bug inside the fake showed (``fake.errors``)."""
    yield fake
    fake.stop()
    assert fake.errors == [], fake.errors


def serve(data_dir: Path, fake: FakeSlack, script: Path | None = None, **env: str) -> IrisServer:
    """``iris serve`` with the Slack plugin pointed at ``fake`` (scripted provider if
    ``script`` is given); returns once Slack is connected."""
    extra = dict(fake.iris_env())
    if script is not None:
        extra.update(IRIS_PROVIDER="scripted", IRIS_SCRIPT_FILE=str(script))
    extra.update(env)
    iris = IrisServer(data_dir, env=extra).start()
    try:
        fake.wait_connected(30)
    except AssertionError:
        iris.stop()
        raise AssertionError(
            "Iris never connected to the fake Slack:\n" + iris.log_tail()
        ) from None
    return iris


def write_rules(path: Path, rules: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"rules": rules}), encoding="utf-8")
    return path


def wait_until(condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Poll ``condition`` until it is truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def log_entries(iris: IrisServer, channel: str) -> list[dict[str, Any]]:
    path = iris.data_dir / channel / "log.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def replies(fake: FakeSlack, channel: str, thread: str) -> list[Message]:
    """The bot's messages in a thread, oldest first."""
    return [m for m in fake.thread(channel, thread) if m.bot and not m.deleted]


def settled_reply(fake: FakeSlack, channel: str, thread: str, contains: str) -> list[Message]:
    """Wait until the bot's messages in the thread contain ``contains``; return them."""

    def done(f: FakeSlack) -> list[Message]:
        found = replies(f, channel, thread)
        return found if any(contains in m.current_text for m in found) else []

    return fake.wait_for(done, f"a reply containing {contains!r} in {channel}/{thread}")


def final_reply(fake: FakeSlack, channel: str, thread: str, text: str) -> list[Message]:
    """Wait until one of the bot's messages in the thread reads exactly ``text`` (a progress
    edit that merely contains it does not count); return the bot's messages."""

    def done(f: FakeSlack) -> list[Message]:
        found = replies(f, channel, thread)
        return found if any(m.current_text == text for m in found) else []

    return fake.wait_for(done, f"a reply reading {text!r} in {channel}/{thread}")
