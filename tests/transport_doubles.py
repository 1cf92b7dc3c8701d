"""What a test transport has no platform for (the engine's and the event service's test
transports share it; each adds how it owns channels, takes events and makes contexts)."""

from __future__ import annotations

from iris_runtime.engine.transport import ChannelInfo, UserInfo


class NoPlatform:
    """The :class:`~iris_runtime.engine.transport.ChannelTransport` parts of a transport with
    no platform behind it: starting and stopping do nothing, it knows no channels or users,
    and every post lands as message ``"1"`` (edits go nowhere)."""

    def start(self) -> None: ...
    def stop(self) -> None: ...

    def channels(self) -> list[ChannelInfo]:
        return []

    def users(self) -> list[UserInfo]:
        return []

    def post_message(self, channel_id: str, text: str) -> str:
        return "1"

    def update_message(self, channel_id: str, message_id: str, text: str) -> None: ...
