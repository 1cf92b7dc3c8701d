"""``RouteRequest.slash_command``: how the chat commands (``/agents``, ``/events``,
``/channels``, ``/subagents``) recognise themselves in a message, on every transport."""

from __future__ import annotations

import threading

import pytest

from iris_runtime.engine.routing import RouteRequest
from iris_runtime.engine.transport import TransportEvent


def request(text: str) -> RouteRequest:
    return RouteRequest(TransportEvent("C1", text), "test", lambda _: None, threading.Event())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/agents", ("agents", "")),
        ("  /Events  ", ("events", "")),
        ("/CHANNELS reload", ("channels", "reload")),
        ("/channels@iris_bot   Reload \n", ("channels", "Reload")),  # Telegram's addressed form
        ("/agents\nsecond line", ("agents", "second line")),
    ],
)
def test_a_command_gives_its_name_as_declared_and_the_rest_stripped(
    text: str, expected: tuple[str, str]
) -> None:
    assert request(text).slash_command("agents", "events", "channels") == expected


@pytest.mark.parametrize(
    "text", ["agents", "/agentsx", "/agent", "please /agents", "/subagents list", "/ agents"]
)
def test_anything_else_is_not_the_command(text: str) -> None:
    assert request(text).slash_command("agents", "events", "channels") is None
