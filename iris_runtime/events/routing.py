"""Which transport delivers an event file, and why a file cannot be delivered from its folder.

``events/`` holds files for any channel; ``<transport>/events/`` holds files for that
transport's channels only, so a file in the wrong folder is refused rather than delivered
somewhere its author did not mean.
"""

from __future__ import annotations

from iris_runtime.engine.transport import TransportRegistry
from iris_runtime.errors import InvalidInput, IrisError, NotFound, TransportNotRunning
from iris_runtime.events.files import ROOT_FOLDER, EventSpec, Folder


def route_error(transports: TransportRegistry, folder: Folder, spec: EventSpec) -> IrisError | None:
    """Why ``spec`` cannot be delivered from ``folder`` as the error the API answers, or None.

    ``NoSuchChannel`` (404) or ``TransportNotRunning`` (409) for a channel of a transport's
    shape that no running transport serves, ``InvalidInput`` (400 ``unroutable_event``) for a
    wrong folder."""
    try:
        owner = transports.owner(spec.channel)
    except (NotFound, TransportNotRunning) as exc:
        return exc
    if folder.transport is None or owner.transport_id == folder.transport:
        return None
    if not any(t.transport_id == folder.transport for t in transports.all()):
        problem = (
            f"the {folder.transport} transport is not loaded, so events in {folder.rel}/ "
            "cannot be delivered (is it configured?)"
        )
    else:
        problem = (
            f"channel {spec.channel!r} belongs to the {owner.transport_id} transport, not "
            f"{folder.transport}; put this file in {ROOT_FOLDER}/ instead"
        )
    return InvalidInput(problem, code="unroutable_event")
