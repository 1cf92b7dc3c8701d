"""Channel modes (spec 003): one pipeline that decides what an inbound chat message does.

A transport maps its platform's event to an :class:`InboundMessage` and asks
:func:`resolve_dispatch` with the :class:`DispatchConfig` read from ``channels.json``; the
:class:`Decision` says whether to run, in which conversation, in which thread to answer, for whom
(Iris or a named agent) and what to say when refusing. No transport re-derives the trigger or
thread rules, so they cannot drift apart between platforms.

The six modes (a channel without an entry keeps its transport's own behaviour):

- ``dm``: every message runs, no mention needed; one conversation for the channel.
- ``admin``: only the listed admins run (and admin commands work); anyone else who addresses
  Iris gets a refusal, and everything else is left alone.
- ``thread``: a mention runs; a top-level mention starts a thread answered in that thread; each
  thread is its own conversation; later messages in it need a mention too.
- ``interactive-thread``: as ``thread``, but once Iris has answered in a thread, every later
  message there runs without a mention.
- ``leads``: every top-level message runs and is answered in its own thread (one conversation per
  thread); replies in a thread follow the ``thread`` rules.
- ``passthrough``: every message goes to the named agent without Iris's model, answered in the
  message's thread (one conversation per thread).

Where a reply cannot open a thread (:attr:`InboundMessage.threads` is False: threads exist only
as made beforehand), a top-level message belongs to the channel's own conversation in every mode,
so follow-ups keep their history and a stop at top level reaches the run.

Pure: no I/O, no platform words. Whether Iris has answered in a thread is an input
(:attr:`InboundMessage.thread_answered`), looked up by the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

MODES = ("dm", "admin", "thread", "interactive-thread", "leads", "passthrough")
# A conversation inside a channel is named "<channel id>@<thread id>": still a valid channel id
# (see engine.channels), so it gets its own log, queue and stop like any channel.
THREAD_SEPARATOR = "@"
REFUSAL = "Sorry, only this channel's admins can ask me things here."

RUN = "run"
IGNORE = "ignore"
REFUSE = "refuse"
UNCONFIGURED = "unconfigured"  # no rule for the channel: the transport's own behaviour


@dataclass(frozen=True)
class InboundMessage:
    """One message as every transport describes it."""

    channel: str  # the Iris channel id, as the transport names its channels
    message_id: str
    user: str  # the platform's user id, as a string
    text: str = ""
    thread: str | None = None  # the thread it was posted in; None at top level
    mentioned: bool = False  # it addresses Iris (an @mention, a reply to Iris, ...)
    direct: bool = False  # a one-to-one conversation with Iris
    from_bot: bool = False  # posted by a bot (Iris included)
    edited: bool = False  # an edit of an earlier message
    thread_answered: bool = False  # Iris has already answered in ``thread``
    # Whether a reply can open a thread under any message (False where threads exist only as
    # made beforehand): top-level messages then share the channel's one conversation.
    threads: bool = True


@dataclass(frozen=True)
class ChannelRule:
    mode: str
    admins: frozenset[str] = frozenset()
    agent: str | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"mode": self.mode}
        if self.mode == "admin":
            out["admins"] = sorted(self.admins)
        if self.agent is not None:
            out["agent"] = self.agent
        return out


@dataclass(frozen=True)
class DispatchConfig:
    """Rules by channel id, plus ``defaults`` for group channels that have none.

    ``held`` (channel ids) and ``hold_rest`` (``"groups"``: every group channel, ``"all"``:
    every channel) fail closed while no good file has loaded: those channels were listed in a
    file that was rejected, so they are ignored rather than given their usual behaviour (an
    admin channel must never turn into an open one)."""

    channels: Mapping[str, ChannelRule] = field(default_factory=lambda: MappingProxyType({}))
    defaults: ChannelRule | None = None
    held: frozenset[str] = frozenset()
    hold_rest: str | None = None

    def holds(self, channel: str, *, direct: bool = False) -> bool:
        if channel in self.held or self.hold_rest == "all":
            return True
        return self.hold_rest == "groups" and not direct

    def rule_for(self, channel: str, *, direct: bool = False) -> ChannelRule | None:
        """The channel's rule; a direct conversation is never covered by ``defaults`` (a
        default of ``thread`` must not make people mention Iris in their own DM)."""
        rule = self.channels.get(channel)
        if rule is not None or direct:
            return rule
        return self.defaults

    def agents(self) -> set[str]:
        rules = [*self.channels.values(), *([self.defaults] if self.defaults else [])]
        return {r.agent for r in rules if r.agent is not None}


@dataclass(frozen=True)
class Decision:
    action: str  # run | ignore | refuse | unconfigured
    mode: str | None = None
    conversation: str | None = None  # the channel id the run belongs to (its log and queue)
    reply_thread: str | None = None  # the thread to answer in; None: where the message was
    target: str | None = None  # None: Iris's own model; else the agent that answers
    refusal: str | None = None
    reason: str = ""

    @property
    def trigger(self) -> bool:
        return self.action == RUN


def conversation_key(channel: str, thread: str | None) -> str:
    return channel if thread is None else f"{channel}{THREAD_SEPARATOR}{thread}"


def split_conversation(key: str) -> tuple[str, str | None]:
    """``"C1@17.5"`` → ``("C1", "17.5")``; a plain channel id → ``(id, None)``."""
    channel, sep, thread = key.partition(THREAD_SEPARATOR)
    return (channel, thread) if sep and thread else (key, None)


def resolve_dispatch(inbound: InboundMessage, config: DispatchConfig) -> Decision:
    rule = config.rule_for(inbound.channel, direct=inbound.direct)
    if rule is None:
        if config.holds(inbound.channel, direct=inbound.direct):
            return Decision(IGNORE, reason="listed in a rejected channels.json: held back")
        return Decision(UNCONFIGURED, reason="no rule for this channel")
    if inbound.from_bot or inbound.edited:
        why = "a bot's message" if inbound.from_bot else "an edit"
        return Decision(IGNORE, rule.mode, reason=why)
    mode = rule.mode
    channel, thread = inbound.channel, inbound.thread
    if mode == "dm":
        return Decision(RUN, mode, channel, thread, reason="every message runs")
    if mode == "admin":
        if inbound.user in rule.admins:
            return Decision(RUN, mode, channel, thread, reason="an admin")
        if not (inbound.mentioned or inbound.direct):
            return Decision(IGNORE, mode, reason="not an admin, not addressing Iris")
        return Decision(
            REFUSE,
            mode,
            reply_thread=thread or inbound.message_id,
            refusal=REFUSAL,
            reason="not an admin",
        )
    if mode == "passthrough":
        # A top-level message opens its own thread where the platform can: the follow-ups
        # people write there continue the agent's conversation.
        own = thread or (inbound.message_id if inbound.threads else None)
        why = f"relayed to {rule.agent}"
        return Decision(RUN, mode, conversation_key(channel, own), own, rule.agent, reason=why)
    if thread is None:
        if mode == "leads" or inbound.mentioned:
            why = "a new lead" if mode == "leads" else "a mention starts a thread"
            own = inbound.message_id if inbound.threads else None
            return Decision(RUN, mode, conversation_key(channel, own), own, reason=why)
        return Decision(IGNORE, mode, reason="top level without a mention")
    if inbound.mentioned or (mode == "interactive-thread" and inbound.thread_answered):
        why = "a mention" if inbound.mentioned else "a thread Iris answered in"
        return Decision(RUN, mode, conversation_key(channel, thread), thread, reason=why)
    return Decision(IGNORE, mode, reason="in a thread without a mention")
