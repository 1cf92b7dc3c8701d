"""TransportRegistry: declared channel shapes keep ids away from the catch-all (unit level; the
served behaviour is in tests/web/test_channel_ownership.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from iris_runtime.engine.transport import ChannelShape, TransportRegistry
from iris_runtime.errors import NoSuchChannel, TransportNotRunning

SHAPE = ChannelShape("xy", re.compile(r"xy-.*"), valid=re.compile(r"xy-[0-9]+"), rule="xy-<n>")


@dataclass
class Stub:
    """Owns the channels starting with ``prefix`` (every channel for the catch-all)."""

    transport_id: str
    prefix: str = ""
    prompt_profile: Any = None
    stop_command_hint: str = "stop"

    def owns_channel(self, channel_id: str) -> bool:
        return channel_id.startswith(self.prefix)

    def inject_session_message(self, event: Any) -> Any: ...
    def reset_session_context(self, channel_id: str) -> None: ...


def registry(*transports: Stub, shapes: tuple[ChannelShape, ...] = (SHAPE,)) -> TransportRegistry:
    out = TransportRegistry()
    out.add(Stub("bridge"), fallback=True)  # type: ignore[arg-type]
    for transport in transports:
        out.add(transport)  # type: ignore[arg-type]
    for shape in shapes:
        out.declare(shape)
    return out


def test_a_claimed_id_of_a_transport_that_is_off_is_409() -> None:
    with pytest.raises(TransportNotRunning, match="'xy-1' belongs to the xy transport") as exc:
        registry().owner("xy-1")
    assert (exc.value.status, exc.value.code) == (409, "transport_not_running")
    with pytest.raises(TransportNotRunning):
        registry().session_owner("xy-1")


@pytest.mark.parametrize("running", [(), (Stub("xy", "xy-9"),)], ids=["off", "running"])
def test_a_malformed_claimed_id_is_404_running_or_not(running: tuple[Stub, ...]) -> None:
    with pytest.raises(NoSuchChannel, match=r"not a valid xy channel id \(xy-<n>\)") as exc:
        registry(*running).owner("xy-ops")
    assert (exc.value.status, exc.value.code) == (404, "no_such_channel")


def test_the_running_transport_serves_its_ids_and_refuses_the_rest() -> None:
    running = registry(Stub("xy", "xy-1"))
    assert running.owner("xy-12").transport_id == "xy"
    with pytest.raises(NoSuchChannel, match="the xy transport has no channel 'xy-2'"):
        running.owner("xy-2")


def test_unclaimed_ids_still_go_to_the_catch_all() -> None:
    for channel in ("SESSION-a", "BRIDGE-ops", "ops", "XY-1", "axy-1"):
        assert registry().owner(channel).transport_id == "bridge"


def test_the_first_declared_shape_wins() -> None:
    other = ChannelShape("other", re.compile(r"xy-.*"))
    with pytest.raises(TransportNotRunning, match="the xy transport"):
        registry(shapes=(SHAPE, other)).owner("xy-1")
    assert [s.transport_id for s in registry(shapes=(SHAPE, other)).shapes()] == ["xy", "other"]
