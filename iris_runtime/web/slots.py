"""Taking a held-request slot inside a request: the Flask side of :mod:`.capacity`."""

from __future__ import annotations

from flask import Response, current_app

from iris_runtime.web.capacity import HeldRequests, Slot

EXTENSION = "iris_held_requests"


def hold(kind: str) -> Slot:
    """A slot of ``kind`` from the serving app's budget (one per process, shared by every
    port), or ``AtCapacity`` (503) when all are taken."""
    budget: HeldRequests = current_app.extensions[EXTENSION]
    return budget.hold(kind)


def held_until_closed(response: Response, slot: Slot) -> Response:
    """Keep ``slot`` until the streamed ``response`` is closed (client gone, stream ended)."""
    response.call_on_close(slot.release)
    return response
