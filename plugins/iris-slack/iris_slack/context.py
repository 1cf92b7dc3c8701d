"""Reply plumbing for one run on Slack: the placeholder, progress edits, chunking and threading.

A message from a person gets a placeholder at once, in the thread it was written in (or a new
thread under it). While the run works, the placeholder is edited in place with the latest status
line and the text so far, at most one edit per second per channel (newer progress replaces
progress not yet shown). When the run ends, the placeholder is replaced by the reply's first
chunk and further chunks follow in the thread. A synthetic event (scheduled, or from the API) has
no placeholder: its reply is posted when the run ends, the first chunk in the channel and the
rest in that message's thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from iris_runtime.engine.dispatch import split_conversation
from iris_runtime.engine.transport import ChannelInfo, ToolEvent, TransportEvent, UserInfo
from iris_runtime.transport_kit.edit_pacing import EditPacer
from iris_slack.api import SlackApi, SlackError
from iris_slack.text import MIN_CHUNK_LENGTH, SLACK_MAX_LENGTH, escape, split_chunks

log = logging.getLogger(__name__)

THINKING = "Thinking…"
PROGRESS_PREVIEW_CHARS = 3000
# Progress waits this long before its first edit, so a quick reply replaces the placeholder
# directly instead of spending the channel's edit slot on a progress edit.
PROGRESS_GRACE_SECONDS = 0.5
# The conversation is gone for the bot: nothing more can be posted there.
UNDELIVERED = (
    "_(the rest of this reply could not be delivered; the full reply is in the channel's log)_"
)
GONE_ERRORS = frozenset(
    {"channel_not_found", "not_in_channel", "is_archived", "account_inactive", "invalid_auth"}
)


class ContextHost(Protocol):
    """What a context needs of its transport (the transport module depends on this one, not the
    other way round): the API, the channels' edit pacer, and the register of runs in progress,
    where a stop finds the run's context."""

    @property
    def api(self) -> SlackApi: ...

    @property
    def pacer(self) -> EditPacer: ...

    def run_started(self, channel: str, ctx: SlackContext) -> None: ...

    def run_ended(self, channel: str, ctx: SlackContext) -> None: ...


class SlackContext:
    def __init__(
        self,
        transport: ContextHost,
        event: TransportEvent,
        *,
        placeholder_ts: str | None,
        thread_ts: str | None,
        placeholder_queued: bool = False,
        channel_name: str | None,
        channels: list[ChannelInfo],
        users: list[UserInfo],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.transport_id = "slack"
        self.message = event
        self.channel_name = channel_name
        self.channels = channels
        self.users = users
        self.on_tool_event: Callable[[ToolEvent], None] | None = None
        self.stopped = False  # set by the transport when someone asks to stop this run
        self._transport = transport
        self._api = transport.api
        self._pacer = transport.pacer
        self._sleep = sleep
        # A thread's conversation key ("C1@17.5") names the Slack channel it is in.
        self._channel, _ = split_conversation(event.channel)
        self._run_key = event.channel  # what the transport tracks the run by (for stop)
        self._thread = thread_ts
        self._placeholder = placeholder_ts
        self._placeholder_queued = placeholder_queued  # it says "queued": show "thinking"
        self._limit = SLACK_MAX_LENGTH
        self._parts: list[str] = []
        self._status = ""
        self._notes = 0
        self._finished = False
        self._deleted = False
        self._gone = False
        self._lock = threading.Lock()
        self._edit_lock = threading.Lock()
        self._timer: threading.Timer | None = None

    # -- MessageContext -----------------------------------------------------------------------

    def respond(self, text: str, should_log: bool = True) -> None:
        with self._lock:
            self._parts.append(text)
        self._progress()

    def replace_message(self, text: str) -> None:
        with self._lock:
            self._parts = [text]
        self._progress()

    def respond_in_thread(self, text: str) -> None:
        """A supplementary detail (an error, a note): posted in the thread right away."""
        if not text.strip():
            return
        with self._lock:
            self._notes += 1
        with self._edit_lock:
            self._deliver(split_chunks(text, self._limit), None)

    def set_typing(self, is_typing: bool) -> None:
        return None  # bots have no typing indicator; the placeholder says it

    def set_status(self, text: str) -> None:
        with self._lock:
            self._status = text
        self._progress()

    def set_working(self, working: bool) -> None:
        if working:
            self._transport.run_started(self._run_key, self)
            if self._placeholder_queued:
                self._progress()
            return
        try:
            self._finish()
        finally:
            self._transport.run_ended(self._run_key, self)

    def upload_file(self, file_path: str, title: str | None = None) -> None:
        path = Path(file_path)
        try:
            self._api.upload_file(self._channel, self._thread, path, title)
        except (SlackError, OSError) as exc:
            reason = exc.error if isinstance(exc, SlackError) else type(exc).__name__
            log.warning("slack: could not upload a file to %s: %s", self._channel, reason)
            self.respond_in_thread(f"(could not upload {path.name}: {reason})")

    def delete_message(self) -> None:
        with self._lock:
            self._deleted = True
            self._parts = []
            placeholder, self._placeholder = self._placeholder, None
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if placeholder is not None:
            try:
                self._api.delete_message(self._channel, placeholder)
            except SlackError as exc:
                log.warning(
                    "slack: could not remove a placeholder in %s: %s", self._channel, exc.error
                )

    def accumulated_text(self) -> str:
        with self._lock:
            return "\n\n".join(self._parts)

    # -- progress -----------------------------------------------------------------------------

    def _render_progress(self) -> str:
        text = "\n\n".join(self._parts)
        status = self._status or THINKING
        if not text:
            return escape(f"_{status}_" if status == THINKING else f"_{THINKING} {status}_")
        if len(text) > PROGRESS_PREVIEW_CHARS:
            text = text[:PROGRESS_PREVIEW_CHARS] + "…"
        return escape(f"{text}\n\n_{status}_")

    def _progress(self) -> None:
        """Show the run's progress in the placeholder, soon and paced per channel. Progress
        that arrives while an edit is pending is folded into it (the newest state is shown),
        and a run that ends within the grace period goes straight to its final reply."""
        with self._lock:
            if self._placeholder is None or self._finished or self._deleted or self._gone:
                return
            if self._timer is not None:
                return  # the pending edit will show the newest state
            delay = max(PROGRESS_GRACE_SECONDS, self._pacer.wait_hint(self._channel))
            self._timer = threading.Timer(delay, self._flush_progress)
            self._timer.daemon = True
            self._timer.start()

    def _flush_progress(self) -> None:
        with self._edit_lock:
            with self._lock:
                self._timer = None
                if self._finished or self._deleted or self._placeholder is None:
                    return
                placeholder = self._placeholder
            with self._lock:
                if self._finished or self._deleted:
                    return
                text = self._render_progress()
            try:
                # Progress is best-effort: a failed edit is superseded by the next one.
                self._api.update_message(
                    self._channel, placeholder, text, attempts=2, slot=self._slot
                )
            except SlackError as exc:
                log.info("slack: a progress edit in %s failed: %s", self._channel, exc.error)
                if exc.error in GONE_ERRORS:
                    self._gone = True

    # -- the final reply ----------------------------------------------------------------------

    def _finish(self) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = True
            timer, self._timer = self._timer, None
            text = "\n\n".join(self._parts)
            placeholder = self._placeholder
        if timer is not None:
            timer.cancel()
        with self._edit_lock:
            if self._deleted:
                return
            chunks = split_chunks(text, self._limit) if text.strip() else []
            if not chunks:
                self._finish_without_text(placeholder)
                return
            self._deliver(chunks, placeholder, reply=True)

    @property
    def finished(self) -> bool:
        with self._lock:
            return self._finished

    def abandon(self, note: str) -> None:
        """The run ended without ever finishing this context (it failed before it started, or
        was cancelled): the placeholder says ``note`` instead of *Thinking…* forever."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            timer, self._timer = self._timer, None
            placeholder = self._placeholder
        if timer is not None:
            timer.cancel()
        with self._edit_lock:
            if placeholder is not None and not self._deleted:
                self._deliver([note], placeholder)

    def _finish_without_text(self, placeholder: str | None) -> None:
        if placeholder is None:
            return
        with self._lock:
            notes = self._notes
        if notes:  # the thread already says what happened (an error note, say)
            self._remove(placeholder)
            return
        note = "_(stopped)_" if self.stopped else "_(no reply)_"
        self._deliver([note], placeholder)

    @contextmanager
    def _slot(self) -> Iterator[None]:
        """The channel's edit slot, held for one edit request."""
        with self._pacer.slot(self._channel, self._sleep):
            yield

    def _deliver(self, chunks: list[str], placeholder: str | None, *, reply: bool = False) -> None:
        """Put ``chunks`` in Slack in order: the first into ``placeholder`` (when there is
        one), the rest posted in the thread. ``msg_too_long`` halves the limit (down to
        ``MIN_CHUNK_LENGTH``) and re-cuts what is left; a placeholder that cannot be edited is
        removed and its text posted instead; any other failure stops delivery there (later
        pieces would leave a silent gap), with one note in the thread for a reply."""
        pending = deque(chunks)
        target = placeholder
        while pending and not self._gone:
            pieces = split_chunks(pending.popleft(), self._limit)
            if not pieces:
                continue
            piece = pieces[0]
            pending.extendleft(reversed(pieces[1:]))
            try:
                if target is not None:
                    self._api.update_message(self._channel, target, escape(piece), slot=self._slot)
                else:
                    ts = self._api.post_message(self._channel, escape(piece), self._thread)
                    if self._thread is None:
                        self._thread = ts  # no thread yet: what follows goes under it
            except SlackError as exc:
                if exc.error == "msg_too_long" and self._limit // 2 >= MIN_CHUNK_LENGTH:
                    self._limit //= 2
                    pending.appendleft(piece)
                    continue
                if exc.error in GONE_ERRORS:
                    self._lost(exc)
                    return
                if target is not None:
                    log.warning(
                        "slack: could not edit the placeholder in %s (%s); posting instead",
                        self._channel,
                        exc.error,
                    )
                    self._remove(target)
                    target = None
                    pending.appendleft(piece)
                    continue
                self._undelivered(exc, len(piece) + sum(map(len, pending)), note=reply)
                return
            target = None

    def _undelivered(self, exc: SlackError, characters: int, *, note: bool) -> None:
        log.error(
            "slack: %d characters of a reply could not be posted in %s: %s "
            "(the full reply is in the channel's log)",
            characters,
            self._channel,
            exc.error,
        )
        if note:
            try:
                self._api.post_message(self._channel, escape(UNDELIVERED), self._thread, attempts=2)
            except SlackError as again:
                log.info("slack: could not say so in %s: %s", self._channel, again.error)

    def _remove(self, placeholder: str) -> None:
        """Delete a placeholder that will not hold the reply (best effort: a failure is
        logged; the reply or note follows in the thread)."""
        with self._lock:
            if self._placeholder == placeholder:
                self._placeholder = None
        try:
            self._api.delete_message(self._channel, placeholder, attempts=2)
        except SlackError as exc:
            log.info("slack: could not remove a placeholder in %s: %s", self._channel, exc.error)

    def _lost(self, exc: SlackError) -> None:
        if not self._gone:
            self._gone = True
            log.warning(
                "slack: cannot post in %s any more (%s); the reply stays in the channel's log",
                self._channel,
                exc.error,
            )
