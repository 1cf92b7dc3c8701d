"""What the fake answers instead of the real reply, queued per method with
:meth:`FakeTelegram.fail_next`: an error status with the Bot API's JSON body, a flood-control 429
with ``retry_after``, a 409 conflict, or a connection reset with no answer at all."""

from __future__ import annotations

from dataclasses import dataclass

CONFLICT_OTHER_POLLER = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance is "
    "running"
)
CONFLICT_WEBHOOK = (
    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete "
    "the webhook first"
)


@dataclass(frozen=True)
class Fail:
    """An error answer: ``{"ok": false, "error_code": status, "description": ...}``."""

    status: int
    description: str
    retry_after: int | None = None


@dataclass(frozen=True)
class Reset:
    """Close the connection without answering (the client sees a reset)."""


Fault = Fail | Reset


def server_error(status: int = 500) -> Fail:
    return Fail(status, "Internal Server Error")


def flood(retry_after: int = 1) -> Fail:
    """Telegram's flood control: 429 with ``parameters.retry_after`` seconds."""
    return Fail(429, f"Too Many Requests: retry after {retry_after}", retry_after)


def conflict(description: str = CONFLICT_OTHER_POLLER) -> Fail:
    """What ``getUpdates`` answers when another process polls with the same token."""
    return Fail(409, description)
