"""Open relay turns: what the reach socket's ``turn.*`` requests are checked against.

A turn is open from just before its POST until it ends, for whatever reason: ``turn.done``,
silence, Stop, a failed POST or Iris shutting down. Ending takes the turn's lock, the same lock
every delivery holds, so once :meth:`OpenTurns.end` returns nothing more of that turn reaches the
chat: a late request is answered ``no such turn`` (spec 004, "Nothing late gets through").
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from iris_runtime.engine.tools import TOOL_KINDS
from iris_runtime.engine.transport import ToolEvent


class TurnOutput(Protocol):
    """Where a turn's progress goes: the run that is waiting for it."""

    def delta(self, text: str) -> None: ...
    def tool(self, event: ToolEvent) -> None: ...


# A reply longer than this is cut, with a note saying so: it is held in memory, shown, logged.
MAX_TURN_TEXT_CHARS = 200_000
CUT_NOTE = f"\n\n(the reply was cut here: it is longer than {MAX_TURN_TEXT_CHARS} characters)"


@dataclass(frozen=True)
class TurnResult:
    text: str
    status: str  # done | stopped | failed
    error: str | None = None


def new_turn_id() -> str:
    return "t_" + secrets.token_hex(16)


@dataclass
class _Card:
    kind: str
    title: str
    input: dict[str, Any]


@dataclass
class Turn:
    turn_id: str
    kind: str  # the agent's
    chat_id: str
    output: TurnOutput
    last_activity: float = field(default_factory=time.monotonic)
    ended: str | None = None  # why: done | stopped | silence | failed | shutdown
    parts: list[str] = field(default_factory=list)
    size: int = 0  # characters in parts
    cut: bool = False  # the reply reached MAX_TURN_TEXT_CHARS; the rest is dropped
    cards: dict[str, _Card] = field(default_factory=dict)
    lock: threading.Condition = field(default_factory=threading.Condition)

    def text(self) -> str:
        return "".join(self.parts)

    def add_text(self, text: str) -> str:
        """Keep one delta's text, up to :data:`MAX_TURN_TEXT_CHARS` in all; returns what was
        kept (with the note the first time the cap is reached) for the chat. Called with the
        lock held."""
        if self.cut or not text:  # an empty delta is a heartbeat: activity, nothing to keep
            return ""
        room = MAX_TURN_TEXT_CHARS - self.size
        if len(text) <= room:
            kept = text
        else:
            kept = text[:room] + CUT_NOTE
            self.cut = True
        self.parts.append(kept)
        self.size += len(kept)
        return kept

    def touch(self) -> None:
        """Restart the silence clock (the POST was accepted, or something arrived)."""
        with self.lock:
            self.last_activity = time.monotonic()

    def wait(self, abort: threading.Event, silence: float) -> str:
        """Block until the turn ends, Stop is pressed, or ``silence`` seconds pass without
        activity; returns ``done``, ``stopped`` or ``silence`` (or what ended it elsewhere)."""
        with self.lock:
            while self.ended is None:
                if abort.is_set():
                    self.ended = "stopped"  # under the lock: no delivery slips in after this
                elif time.monotonic() - self.last_activity >= silence:
                    self.ended = "silence"
                else:
                    # Stop is an Event of its own, so look at it a few times a second.
                    quiet = time.monotonic() - self.last_activity
                    self.lock.wait(max(0.0, min(0.2, silence - quiet)))
            return self.ended

    def deliver_tool(self, fields: dict[str, Any]) -> None:
        """One ``turn.tool`` request: the first for an id draws the card, one with ``output``
        fills it. Called with the lock held.

        Agents pick their own ids (the spec's example uses ``"1"``), so the card the chat sees
        is named ``<turn_id>:<id>``: a later turn reusing an id draws a card of its own."""
        call_id = str(fields["id"])
        card_id = f"{self.turn_id}:{call_id}"
        card = self.cards.get(call_id)
        raw_input = fields.get("input")
        given = raw_input if isinstance(raw_input, dict) else {}
        if card is None:
            kind = fields.get("kind")
            title = fields.get("title")
            card = _Card(
                kind if isinstance(kind, str) and kind in TOOL_KINDS else "other",
                title if isinstance(title, str) and title else call_id,
                given,
            )
            self.cards[call_id] = card
            self.output.tool(ToolEvent("start", card_id, card.title, card.input, kind=card.kind))
        elif given and not card.input:
            card.input = given
        if "output" in fields:
            output = fields["output"]
            result = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
            failed = fields.get("status") == "failed"
            event = ToolEvent("end", card_id, card.title, card.input, result, failed, card.kind)
            self.output.tool(event)


class OpenTurns:
    def __init__(self) -> None:
        self._turns: dict[str, Turn] = {}
        self._lock = threading.Lock()

    def open(self, kind: str, chat_id: str, output: TurnOutput) -> Turn:
        turn = Turn(new_turn_id(), kind, chat_id, output)
        with self._lock:
            self._turns[turn.turn_id] = turn
        return turn

    def deliver(self, turn_id: str, action: Callable[[Turn], None]) -> bool:
        """Run ``action`` on the open turn under its lock and count it as activity; False when
        there is no such open turn (never opened, or ended)."""
        with self._lock:
            turn = self._turns.get(turn_id)
        if turn is None:
            return False
        with turn.lock:
            if turn.ended is not None:
                return False
            action(turn)
            turn.last_activity = time.monotonic()
        return True

    def finish(self, turn_id: str) -> bool:
        """``turn.done``: end the open turn ``turn_id`` as done; False when there is none."""
        with self._lock:
            turn = self._turns.get(turn_id)
        return turn is not None and self.end(turn, "done")

    def end(self, turn: Turn, reason: str) -> bool:
        """End ``turn`` (first reason wins); from now on its requests are ``no such turn``."""
        with self._lock:
            self._turns.pop(turn.turn_id, None)
        with turn.lock:
            if turn.ended is not None:
                return False
            turn.ended = reason
            turn.lock.notify_all()
        return True

    def end_all(self, reason: str) -> None:
        with self._lock:
            turns = list(self._turns.values())
        for turn in turns:
            self.end(turn, reason)

    def chat_of(self, turn_id: str) -> str | None:
        with self._lock:
            turn = self._turns.get(turn_id)
        return None if turn is None else turn.chat_id

    def __len__(self) -> int:
        with self._lock:
            return len(self._turns)
