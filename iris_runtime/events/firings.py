"""What one due instant of an event file becomes: a :class:`~iris_runtime.events.state.Firing`
with its key and the prompt the model sees.

The key makes a firing unique in ``state.db``: a periodic event fires once per instant, a
one-shot or immediate file once per version of its content (its digest), so an edited file is
a new event and an untouched one never runs twice.
"""

from __future__ import annotations

from datetime import UTC, datetime

from iris_runtime.events.files import EventSpec
from iris_runtime.events.schedule import Due
from iris_runtime.events.state import Firing


def event_prompt(rel: str, spec: EventSpec, when: str, fired_late_at: datetime | None) -> str:
    """``[EVENT:<file>:<type>:<when>] <text>``: tells the model nobody is waiting for a reply."""
    late = ""
    if fired_late_at is not None:
        late = f"(late: due {when}, fired {fired_late_at.isoformat(timespec='seconds')}) "
    return f"[EVENT:{rel}:{spec.type}:{when}] {late}{spec.text}"


def new_firing(
    due: Due, spec: EventSpec, file_digest: str, picked_up: datetime, now: datetime
) -> tuple[Firing, str]:
    """The firing of ``due`` (an instant of the file holding ``spec``, version
    ``file_digest``, first seen at ``picked_up``) and the time it is for, as shown."""
    if spec.type == "periodic":
        key = _utc_key(due.scheduled)
        when = due.scheduled.astimezone(spec.zone).isoformat(timespec="seconds")
    elif spec.type == "one-shot":
        assert spec.at is not None
        key = f"{_utc_key(due.scheduled)}#{file_digest[:16]}"
        when = spec.at.isoformat()
    else:
        key = f"immediate#{file_digest[:16]}"
        when = picked_up.isoformat(timespec="seconds")
    prompt = event_prompt(due.id, spec, when, now if due.late else None)
    return Firing(due.id, key, spec.type, spec.channel, prompt, file_digest), when


def _utc_key(instant: datetime) -> str:
    # Fixed width, so keys of one event sort by time (state.finish_periodic relies on it).
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
