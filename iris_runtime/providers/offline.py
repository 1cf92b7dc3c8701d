"""The ``offline`` provider: no network, no model, fully deterministic.

It is the default so a fresh install answers at once, and it says plainly that no model is
configured instead of pretending to think.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from iris_runtime.config import Settings
from iris_runtime.engine.provider import (
    Done,
    ProviderEvent,
    ProviderRequest,
    TextDelta,
    Usage,
)

REPLY_TEMPLATE = (
    "No language model is configured (IRIS_PROVIDER=offline), so I can't work on this yet. "
    "You said: {text}"
)


def _last_user_text(request: ProviderRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return message.text
    return ""


class OfflineProvider:
    name = "offline"
    context_window = 1_000_000

    def stream(self, request: ProviderRequest, abort: threading.Event) -> Iterator[ProviderEvent]:
        reply = REPLY_TEMPLATE.format(text=_last_user_text(request))
        # Word-sized deltas so streaming consumers see the same shape a real model produces.
        words = reply.split(" ")
        for index, word in enumerate(words):
            if abort.is_set():
                return
            yield TextDelta(word if index == 0 else " " + word)
        yield Done("end_turn", Usage())


def create(settings: Settings) -> OfflineProvider:
    return OfflineProvider()
