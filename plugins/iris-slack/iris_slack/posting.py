"""Messages the transport posts or edits itself, outside a run's reply (which is the context's):
announces, API posts and edits, placeholders and short notes. Text is escaped and cut into
chunks; edits are paced like every edit of the channel."""

from __future__ import annotations

import logging
import threading
from contextlib import AbstractContextManager

from iris_runtime.errors import NoSuchChannel
from iris_runtime.transport_kit.edit_pacing import EditPacer
from iris_slack.api import SlackApi, SlackError
from iris_slack.text import SLACK_MAX_LENGTH, escape, split_chunks

log = logging.getLogger(__name__)


class ChannelPoster:
    def __init__(self, api: SlackApi, pacer: EditPacer, stopping: threading.Event) -> None:
        self._api = api
        self._pacer = pacer
        self._stopping = stopping

    def post_chunks(self, channel_id: str, thread: str | None, text: str) -> str:
        """``text`` escaped and chunked: the first chunk in ``thread`` (or the channel), the
        rest after it in the same thread (or the first chunk's own). The first chunk's ts."""
        chunks = split_chunks(text) or ["(empty)"]
        try:
            first = self._api.post_message(channel_id, escape(chunks[0]), thread)
        except SlackError as exc:
            # A Slack-shaped id Slack does not know is no channel at all (404), not a fault.
            if exc.error == "channel_not_found":
                raise NoSuchChannel(
                    f"the slack transport has no channel {channel_id!r} ({exc.error})"
                ) from exc
            raise
        for chunk in chunks[1:]:
            self._api.post_message(channel_id, escape(chunk), thread or first)
        return first

    def update(self, channel_id: str, message_id: str, text: str) -> None:
        """Replace a message's text, paced like every edit. One Slack message holds one chunk:
        text longer than that is cut to its first chunk, ending in "…" (a message has no
        place of its own to continue in); ``post_chunks`` is for long text."""
        chunks = split_chunks(text, SLACK_MAX_LENGTH - 1) or ["(empty)"]
        first = chunks[0] + ("…" if len(chunks) > 1 else "")
        if len(chunks) > 1:
            log.info(
                "slack: an edit in %s was cut to its first %d characters", channel_id, len(first)
            )

        def slot() -> AbstractContextManager[None]:
            return self._pacer.slot(channel_id, self._stopping.wait)

        self._api.update_message(channel_id, message_id, escape(first), slot=slot)

    def post_quietly(self, channel: str, text: str, thread: str | None) -> str | None:
        """A short note, escaped; a failure is logged (None), never raised."""
        try:
            return self._api.post_message(channel, escape(text), thread)
        except SlackError as exc:
            log.warning("slack: could not post in %s: %s", channel, exc.error)
            return None

    def replace_quietly(
        self, channel: str, placeholder: str | None, text: str, thread: str | None
    ) -> None:
        """``placeholder`` edited to say ``text`` (posted instead when there is none); a
        failure is logged, never raised."""
        if placeholder is None:
            self.post_quietly(channel, text, thread)
            return
        try:
            self.update(channel, placeholder, text)
        except SlackError as exc:
            log.warning("slack: could not edit a message in %s: %s", channel, exc.error)
