"""resolve_dispatch across every mode x {top level, in a thread} x {mention, none} x {admin,
not} x {a person, a bot, an edit}, and channels.json's strict reading."""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from iris_runtime.engine import dispatch_config
from iris_runtime.engine.dispatch import (
    IGNORE,
    MODES,
    REFUSAL,
    REFUSE,
    RUN,
    UNCONFIGURED,
    ChannelRule,
    DispatchConfig,
    InboundMessage,
    conversation_key,
    resolve_dispatch,
    split_conversation,
)
from iris_runtime.engine.dispatch_config import ChannelModes, missing_agents, parse_channels
from iris_runtime.errors import ConfigError

CHANNEL = "C0CHAN001"
ADMIN = "U0ADMIN01"
THREAD = "1700000000.000100"
MESSAGE = "1700000001.000200"


def config_for(mode: str) -> DispatchConfig:
    rule = ChannelRule(
        mode,
        frozenset({ADMIN}) if mode == "admin" else frozenset(),
        "helper" if mode == "passthrough" else None,
    )
    return DispatchConfig({CHANNEL: rule})


# What the issue fixes, one row per mode: (top level runs?, in thread runs?) for a mention and
# without one; the conversation and the thread answered in (own: the message's own thread).
TRIGGERS: dict[str, dict[tuple[bool, bool], bool | str]] = {
    # mode: {(in_thread, mentioned): runs}
    "dm": {(False, False): True, (False, True): True, (True, False): True, (True, True): True},
    "thread": {
        (False, False): False,
        (False, True): True,
        (True, False): False,
        (True, True): True,
    },
    "interactive-thread": {
        (False, False): False,
        (False, True): True,
        (True, False): "answered",
        (True, True): True,
    },
    "leads": {(False, False): True, (False, True): True, (True, False): False, (True, True): True},
    "passthrough": {
        (False, False): True,
        (False, True): True,
        (True, False): True,
        (True, True): True,
    },
}

CASES = list(
    itertools.product(
        MODES, [False, True], [False, True], [False, True], ["person", "bot", "edit"], [False, True]
    )
)


@pytest.mark.parametrize(
    ("mode", "in_thread", "mentioned", "is_admin", "sender", "answered"), CASES
)
def test_every_mode_and_message_kind(
    mode: str, in_thread: bool, mentioned: bool, is_admin: bool, sender: str, answered: bool
) -> None:
    inbound = InboundMessage(
        channel=CHANNEL,
        message_id=MESSAGE,
        user=ADMIN if is_admin else "U0OTHER01",
        text="hello",
        thread=THREAD if in_thread else None,
        mentioned=mentioned,
        from_bot=sender == "bot",
        edited=sender == "edit",
        thread_answered=answered and in_thread,
    )
    decision = resolve_dispatch(inbound, config_for(mode))
    assert decision.mode == mode
    if sender != "person":
        assert decision.action == IGNORE
        return
    if mode == "admin":
        if not is_admin:
            if not mentioned:  # chatter between people: no refusal posted, no run
                assert decision.action == IGNORE
                return
            assert decision.action == REFUSE and decision.refusal == REFUSAL
            assert decision.reply_thread == (THREAD if in_thread else MESSAGE)
            return
        assert decision.action == RUN and decision.conversation == CHANNEL
        assert decision.reply_thread == (THREAD if in_thread else None)
        return
    runs = TRIGGERS[mode][(in_thread, mentioned)]
    if runs == "answered":
        runs = answered
    assert decision.action == (RUN if runs else IGNORE), decision
    if not runs:
        return
    assert decision.refusal is None
    assert decision.target == ("helper" if mode == "passthrough" else None)
    if mode == "dm":
        assert (decision.conversation, decision.reply_thread) == (
            CHANNEL,
            THREAD if in_thread else None,
        )
    else:  # thread, interactive-thread, leads, passthrough: one conversation per thread
        own = THREAD if in_thread else MESSAGE
        assert (decision.conversation, decision.reply_thread) == (f"{CHANNEL}@{own}", own)


def test_a_channel_without_a_rule_keeps_its_transports_behaviour() -> None:
    inbound = InboundMessage(channel="C0OTHER01", message_id=MESSAGE, user="U1", mentioned=True)
    assert resolve_dispatch(inbound, config_for("thread")).action == UNCONFIGURED
    assert resolve_dispatch(inbound, DispatchConfig()).action == UNCONFIGURED


def test_defaults_cover_group_channels_but_never_a_direct_conversation() -> None:
    config = DispatchConfig({}, ChannelRule("thread"))
    group = InboundMessage(channel="C0OTHER01", message_id=MESSAGE, user="U1")
    assert resolve_dispatch(group, config).action == IGNORE  # top level, no mention
    direct = InboundMessage(channel="D0OTHER01", message_id=MESSAGE, user="U1", direct=True)
    assert resolve_dispatch(direct, config).action == UNCONFIGURED


def test_passthrough_keeps_one_conversation_where_threads_are_only_topics() -> None:
    top = InboundMessage(channel=CHANNEL, message_id=MESSAGE, user="U1", threads=False)
    decision = resolve_dispatch(top, config_for("passthrough"))
    assert (decision.conversation, decision.reply_thread) == (CHANNEL, None)
    topic = InboundMessage(
        channel=CHANNEL, message_id=MESSAGE, user="U1", thread="7", threads=False
    )
    decision = resolve_dispatch(topic, config_for("passthrough"))
    assert (decision.conversation, decision.reply_thread) == (f"{CHANNEL}@7", "7")


def test_conversation_keys_round_trip() -> None:
    assert split_conversation(conversation_key(CHANNEL, THREAD)) == (CHANNEL, THREAD)
    assert split_conversation(conversation_key("tg--100123", None)) == ("tg--100123", None)
    assert split_conversation("tg--100123@42") == ("tg--100123", "42")


GOOD = {
    "C0CHAN001": {"mode": "thread"},
    "C0ADMIN01": {"mode": "admin", "admins": ["U0ADMIN01"]},
    "tg--1001234": {"mode": "passthrough", "agent": "@Helper"},
    "defaults": {"mode": "interactive-thread"},
}


def test_a_good_file_parses() -> None:
    config = parse_channels(json.dumps(GOOD))
    assert config.channels["tg--1001234"] == ChannelRule("passthrough", frozenset(), "helper")
    assert config.channels["C0ADMIN01"].admins == {"U0ADMIN01"}
    assert config.defaults == ChannelRule("interactive-thread")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{", "not JSON"),
        ("[]", "top level must be an object"),
        ('{"C1": {"mode": "party"}}', "mode must be one of"),
        ('{"C1": {"mode": "thread", "colour": "red"}}', "unknown field(s) 'colour'"),
        ('{"C1": {"mode": "passthrough"}}', 'passthrough needs "agent"'),
        ('{"C1": {"mode": "dm", "mode": "thread"}}', "duplicate key 'mode'"),
        ('{"C1": {"mode": "dm"}, "C1": {"mode": "thread"}}', "duplicate key 'C1'"),
        ('{"C1": {"mode": "admin"}}', 'admin mode needs "admins"'),
        ('{"C1": {"mode": "admin", "admins": [42]}}', "user ids as strings"),
        ('{"C1": {"mode": "thread", "admins": ["U1"]}}', "admin mode only"),
        ('{"C1": {"mode": "dm", "agent": "helper"}}', "passthrough mode only"),
        ('{"../x": {"mode": "dm"}}', "invalid channel id"),
        ('{"C1@5": {"mode": "dm"}}', "not a thread"),
        ('{"C1": "thread"}', "must be an object"),
    ],
)
def test_a_bad_file_names_its_problem(content: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_channels(content)
    assert problem in caught.value.message


def test_a_bad_file_keeps_the_previous_configuration(tmp_path: Path) -> None:
    path = tmp_path / "channels.json"
    modes = ChannelModes(path, tmp_path)
    assert modes.current() == DispatchConfig() and modes.problem is None  # no file: no modes
    path.write_text(json.dumps({"C0CHAN001": {"mode": "dm"}}))
    assert modes.current().channels["C0CHAN001"].mode == "dm"
    path.write_text('{"C0CHAN001": {"mode": "nonsense"}}')
    os.utime(path, ns=(1, 1))  # a different signature whatever the clock's resolution
    assert modes.current().channels["C0CHAN001"].mode == "dm"
    assert modes.problem is not None and "mode must be one of" in modes.problem
    path.write_text(json.dumps({"C0CHAN001": {"mode": "leads"}}))
    assert modes.current().channels["C0CHAN001"].mode == "leads"
    assert modes.problem is None


def test_an_unknown_agent_does_not_make_the_file_bad(tmp_path: Path) -> None:
    # Agents come and go (a custom agent's manifest breaks): the file stays in force, the
    # passthrough answers "not available", and the missing agent is only a warning.
    path = tmp_path / "channels.json"
    path.write_text(
        json.dumps(
            {
                "C0CHAN001": {"mode": "passthrough", "agent": "helper"},
                "C0ADMIN01": {"mode": "admin", "admins": [" U0ADMIN01 "]},
            }
        )
    )
    modes = ChannelModes(path, tmp_path)
    config = modes.current()
    assert modes.problem is None and config.channels["C0CHAN001"].agent == "helper"
    assert config.channels["C0ADMIN01"].admins == {"U0ADMIN01"}  # stored stripped
    assert missing_agents(config, lambda: {"other"}) == ["helper"]
    assert missing_agents(config, lambda: {"helper"}) == []


def test_a_file_rejected_at_start_up_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "channels.json"
    path.write_text(
        '{"C0ADMIN01": {"mode": "admin", "admins": ["U0ADMIN01"]}, "C0CHAN001": {"mode": "x"}}'
    )
    modes = ChannelModes(path, tmp_path)
    mention = InboundMessage(channel="C0ADMIN01", message_id=MESSAGE, user="U1", mentioned=True)
    decision = modes.decide(mention)
    assert modes.problem and decision.action == IGNORE, decision  # never "unconfigured"
    assert modes.decide(replace(mention, channel="C0CHAN001")).action == IGNORE
    other = replace(mention, channel="C0OTHER01")
    assert modes.decide(other).action == UNCONFIGURED  # not listed: its usual behaviour
    # A file that names no channel we can read (not JSON): every channel is held back.
    path.write_text("{not json")
    os.utime(path, ns=(1, 1))
    assert modes.decide(other).action == IGNORE
    # "defaults" listed: every group channel is held back, a direct conversation is not.
    path.write_text('{"defaults": {"mode": "nonsense"}}')
    os.utime(path, ns=(2, 2))
    assert modes.decide(other).action == IGNORE
    direct = InboundMessage(channel="D0OTHER01", message_id=MESSAGE, user="U1", direct=True)
    assert modes.decide(direct).action == UNCONFIGURED
    # Once a good file has loaded, a bad one keeps it in force (as before).
    path.write_text(json.dumps({"C0ADMIN01": {"mode": "admin", "admins": ["U0ADMIN01"]}}))
    os.utime(path, ns=(3, 3))
    assert modes.decide(mention).action == REFUSE
    path.write_text("{")
    os.utime(path, ns=(4, 4))
    assert modes.decide(mention).action == REFUSE
    assert modes.decide(other).action == UNCONFIGURED


def test_a_rejected_file_is_not_read_again_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "channels.json"
    path.write_text("{")
    modes = ChannelModes(path, tmp_path)
    reads: list[Path] = []
    real = dispatch_config.read_text
    monkeypatch.setattr(dispatch_config, "read_text", lambda p: reads.append(p) or real(p))
    for _ in range(3):
        modes.current()
    assert len(reads) == 1 and modes.problem


def test_a_fifo_is_rejected_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "channels.json"
    os.mkfifo(path)
    modes = ChannelModes(path, tmp_path)
    modes.current()  # returns at once
    assert modes.problem and "not a regular file" in modes.problem


def test_decide_looks_for_a_thread_log_only_in_a_channel_with_a_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modes = ChannelModes(tmp_path / "channels.json", tmp_path)

    def no_stat(conversation: str) -> bool:
        raise AssertionError(f"stat'ed {conversation}")

    monkeypatch.setattr(modes, "answered", no_stat)
    reply = InboundMessage(channel="C0OTHER01", message_id=MESSAGE, user="U1", thread=THREAD)
    assert modes.decide(reply).action == UNCONFIGURED


@pytest.mark.parametrize("mode", ["thread", "interactive-thread", "leads"])
def test_without_reply_threads_top_level_is_the_channels_conversation(mode: str) -> None:
    # Where a reply cannot open a thread (threads=False), a top-level message belongs to the
    # channel's one conversation: follow-ups keep their history and a stop reaches the run.
    top = InboundMessage(
        channel=CHANNEL, message_id=MESSAGE, user="U1", mentioned=True, threads=False
    )
    decision = resolve_dispatch(top, config_for(mode))
    assert decision.action == RUN
    assert (decision.conversation, decision.reply_thread) == (CHANNEL, None)
    later = replace(top, message_id="1700000002.000300")
    assert resolve_dispatch(later, config_for(mode)).conversation == CHANNEL
    in_thread = replace(top, thread="7")
    decision = resolve_dispatch(in_thread, config_for(mode))
    assert (decision.conversation, decision.reply_thread) == (f"{CHANNEL}@7", "7")


def test_leads_without_reply_threads_still_runs_every_top_level_message() -> None:
    top = InboundMessage(channel=CHANNEL, message_id=MESSAGE, user="U1", threads=False)
    decision = resolve_dispatch(top, config_for("leads"))
    assert decision.action == RUN and decision.conversation == CHANNEL
    assert resolve_dispatch(top, config_for("thread")).action == IGNORE  # still mention-gated


def test_the_pipeline_names_no_platform() -> None:
    engine = Path(dispatch_config.__file__).parent
    for name in ("dispatch.py", "dispatch_config.py"):
        text = (engine / name).read_text().lower()
        for word in ("topic", "decimal", "slack", "telegram", "forum"):
            assert word not in text, (name, word)


def test_interactive_threads_remember_where_iris_answered(tmp_path: Path) -> None:
    path = tmp_path / "channels.json"
    path.write_text(json.dumps({CHANNEL: {"mode": "interactive-thread"}}))
    modes = ChannelModes(path, tmp_path)
    follow_up = InboundMessage(channel=CHANNEL, message_id=MESSAGE, user="U1", thread=THREAD)
    assert modes.decide(follow_up).action == IGNORE
    (tmp_path / f"{CHANNEL}@{THREAD}").mkdir()
    (tmp_path / f"{CHANNEL}@{THREAD}" / "log.jsonl").write_text("{}\n")
    assert modes.decide(follow_up).action == RUN
