"""The engine's run lifecycle: queueing, stop, the agent loop, failures and shutdown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from iris_runtime.engine.core import Engine
from iris_runtime.engine.scheduler import MAX_WAITING_PER_CHANNEL
from iris_runtime.engine.transport import ChannelState, TransportEvent
from iris_runtime.errors import EngineStopping, QueueFull
from tests.engine.conftest import RecordingContext, RecordingTransport, wait_until


def watch(engine: Engine, channel: str) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    engine.observers.register(channel, seen.append)
    return seen


Script = Callable[[list[dict[str, Any]]], None]


def test_a_plain_message_runs_and_both_sides_are_logged(
    engine: Engine, transport: RecordingTransport
) -> None:
    result = engine.submit(transport, TransportEvent("rec-1", "hello")).wait(10)
    assert result.status == "done"
    assert result.text == "echo: hello"
    roles = [(e["role"], e["text"]) for e in engine.sessions.entries("rec-1")]
    assert roles == [("user", "hello"), ("assistant", "echo: hello")]


def test_one_run_per_channel_and_five_waiting_then_refusal(
    engine: Engine, transport: RecordingTransport, script: Script
) -> None:
    script([{"when": "slow", "turns": [[{"sleep": 30}]]}])
    first = engine.submit(transport, TransportEvent("rec-q", "slow 0"))
    wait_until(lambda: engine.is_running("rec-q"))
    waiting = [
        engine.submit(transport, TransportEvent("rec-q", f"quick {i}"))
        for i in range(MAX_WAITING_PER_CHANNEL)
    ]
    with pytest.raises(QueueFull):
        engine.submit(transport, TransportEvent("rec-q", "one too many"))
    # Another channel is not held up by the full one.
    assert engine.submit(transport, TransportEvent("rec-other", "hi")).wait(10).status == "done"
    assert engine.handle_stop("rec-q")
    assert first.wait(10).status == "stopped"
    assert [t.wait(10).text for t in waiting] == [f"echo: quick {i}" for i in range(5)]
    users = [e["text"] for e in engine.sessions.entries("rec-q") if e["role"] == "user"]
    assert users == ["slow 0", *[f"quick {i}" for i in range(5)]]


def test_stop_resolves_the_waiter_with_text_so_far(
    engine: Engine, transport: RecordingTransport, script: Script
) -> None:
    script(
        [
            {
                "when": "long",
                "turns": [
                    [
                        {"text": "half an answer"},
                        {"thinking": "mid"},
                        {"sleep": 30},
                        {"text": " never"},
                    ]
                ],
            }
        ]
    )
    seen = watch(engine, "rec-s")
    ticket = engine.submit(transport, TransportEvent("rec-s", "long job"))
    wait_until(lambda: any(e["type"] == "thinking" for e in seen))
    assert engine.handle_stop("rec-s")
    result = ticket.wait(5)
    assert result.status == "stopped"
    assert result.text == "half an answer"
    assert not engine.handle_stop("rec-s")  # nothing running any more


def test_tool_calls_loop_until_a_final_answer(
    engine: Engine, transport: RecordingTransport, script: Script
) -> None:
    script(
        [
            {
                "when": "files",
                "turns": [
                    [
                        {"thinking": "let me look"},
                        {"tool": "bash", "args": {"command": "echo tool-ran"}, "id": "c1"},
                    ],
                    [{"text": "all done"}],
                ],
            }
        ]
    )
    result = engine.submit(transport, TransportEvent("rec-t", "list files")).wait(15)
    assert result.status == "done" and result.text == "all done"
    ctx = transport.contexts[-1]
    assert ("status", "→ running bash") in ctx.calls
    tool_events = [c[1] for c in ctx.calls if c[0] == "tool"]
    assert [(e.phase, e.name) for e in tool_events] == [("start", "bash"), ("end", "bash")]
    assert [e.kind for e in tool_events] == ["execute", "execute"]  # the tool's declared kind
    assert tool_events[0].as_dict()["kind"] == "execute"
    assert "tool-ran" in (tool_events[1].result or "")
    assert ctx.calls[0] == ("working", True) and ctx.calls[-1] == ("working", False)


def test_runaway_tool_loops_stop_at_max_turns(
    engine: Engine, transport: RecordingTransport, script: Script
) -> None:
    loop = [{"tool": "bash", "args": {"command": "true"}}]
    script([{"when": "loop", "turns": [loop] * 10}])
    result = engine.submit(transport, TransportEvent("rec-m", "loop forever")).wait(20)
    assert result.status == "failed"
    assert "4 model turns" in (result.error or "")
    assert result.text.startswith("(run failed:")


def test_provider_errors_become_an_explicit_failed_reply(
    engine: Engine, transport: RecordingTransport, script: Script
) -> None:
    script(
        [{"when": "boom", "turns": [[{"text": "partial"}, {"error": "upstream 529 overloaded"}]]}]
    )
    result = engine.submit(transport, TransportEvent("rec-e", "boom")).wait(10)
    assert result.status == "failed"
    assert result.error_code == "run_failed"
    assert "partial" in result.text and "(run failed: upstream 529 overloaded)" in result.text
    assert engine.sessions.entries("rec-e")[-1]["status"] == "failed"


def test_a_transport_without_a_prompt_profile_fails_clearly(engine: Engine) -> None:
    ghost = RecordingTransport(engine, transport_id="ghost")
    engine.transports.add(ghost)  # added without registering a profile for "ghost"
    result = engine.submit(ghost, TransportEvent("rec-g", "hi")).wait(10)
    assert result.status == "failed"
    assert result.error_code == "prompt_profile_missing"
    assert "ghost" in (result.error or "")
    assert engine.sessions.entries("rec-g")[0]["text"] == "hi"  # the message is not lost


def test_dispatch_routes_to_the_owning_transport(
    engine: Engine, transport: RecordingTransport
) -> None:
    assert engine.dispatch(TransportEvent("rec-d", "routed"))
    wait_until(lambda: len(engine.sessions.entries("rec-d")) == 2)
    assert transport.contexts[-1].message.text == "routed"


def test_shutdown_aborts_running_cancels_waiting_and_refuses_new(
    engine: Engine, transport: RecordingTransport, script: Script
) -> None:
    script([{"when": "slow", "turns": [[{"text": "started"}, {"thinking": "mid"}, {"sleep": 30}]]}])
    seen = watch(engine, "rec-x")
    running = engine.submit(transport, TransportEvent("rec-x", "slow"))
    wait_until(lambda: any(e["type"] == "thinking" for e in seen))
    queued = engine.submit(transport, TransportEvent("rec-x", "queued"))
    engine.begin_shutdown()
    assert running.wait(5).text == "started"
    assert queued.wait(5).status == "cancelled"
    with pytest.raises(EngineStopping):
        engine.submit(transport, TransportEvent("rec-x", "late"))
    statuses = [
        (e["text"], e.get("status"))
        for e in engine.sessions.entries("rec-x")
        if e["role"] == "user"
    ]
    assert ("queued", "cancelled") in statuses


def test_history_is_replayed_into_the_next_run(
    engine: Engine, transport: RecordingTransport, script: Script
) -> None:
    script([{"when": "what did I say", "turns": [[{"recall": True}]]}])
    engine.submit(transport, TransportEvent("rec-h", "my name is Ada")).wait(10)
    result = engine.submit(transport, TransportEvent("rec-h", "what did I say")).wait(10)
    assert result.text == "recall: my name is Ada"


def test_silent_replies_are_not_sent(
    engine: Engine, transport: RecordingTransport, script: Script
) -> None:
    script([{"when": "quiet", "turns": [[{"text": "[SILENT]"}]]}])
    result = engine.submit(transport, TransportEvent("rec-q2", "quiet please")).wait(10)
    assert result.text == ""
    assert not [c for c in transport.contexts[-1].calls if c[0] == "respond"]


@pytest.mark.parametrize(
    "reply", ["[SILENT]", "[SILENT] nothing new since the last digest", "  [SILENT]\nall quiet"]
)
def test_a_reply_beginning_with_silent_posts_nothing_and_drops_the_placeholder(
    engine: Engine, transport: RecordingTransport, script: Script, reply: str
) -> None:
    script([{"when": "check", "turns": [[{"text": reply}]]}])
    result = engine.submit(transport, TransportEvent("rec-s", "check the inbox")).wait(10)
    assert result.status == "done" and result.text == ""
    calls = [name for name, _ in transport.contexts[-1].calls]
    assert "respond" not in calls and "thread" not in calls
    assert "delete" in calls


def test_a_reply_mentioning_silent_later_is_still_sent(
    engine: Engine, transport: RecordingTransport, script: Script
) -> None:
    script([{"when": "explain", "turns": [[{"text": "Use [SILENT] to stay quiet."}]]}])
    result = engine.submit(transport, TransportEvent("rec-s2", "explain")).wait(10)
    assert result.text == "Use [SILENT] to stay quiet."
    assert "delete" not in [name for name, _ in transport.contexts[-1].calls]


def test_unknown_tools_and_unparseable_arguments_become_error_results(
    engine: Engine, transport: RecordingTransport, script: Script
) -> None:
    script(
        [
            {
                "when": "odd",
                "turns": [
                    [
                        {"tool": "teleport", "args": {"where": "mars"}, "id": "a"},
                        {"tool": "bash", "args": {"_raw_arguments": '{"command": '}, "id": "b"},
                    ],
                    [{"text": "recovered"}],
                ],
            }
        ]
    )
    result = engine.submit(transport, TransportEvent("rec-odd", "odd tools")).wait(10)
    assert result.status == "done" and result.text == "recovered"
    ends = [c[1] for c in transport.contexts[-1].calls if c[0] == "tool" and c[1].phase == "end"]
    assert [(e.name, e.is_error) for e in ends] == [("teleport", True), ("bash", True)]
    assert "unknown tool 'teleport'" in (ends[0].result or "")
    assert "not valid JSON" in (ends[1].result or "")


def test_text_streams_to_contexts_that_ask_for_it(engine: Engine, script: Script) -> None:
    """A context with an ``on_text_delta`` hook sees the model's text as it streams; the turn's
    whole text still arrives through ``respond`` (contexts without the hook see only that)."""

    class StreamingTransport(RecordingTransport):
        def create_context(
            self, event: TransportEvent, state: ChannelState, is_event: bool = False
        ) -> RecordingContext:
            ctx = super().create_context(event, state, is_event)
            ctx.on_text_delta = lambda text: ctx.calls.append(("delta", text))  # type: ignore[attr-defined]
            return ctx

    streaming = StreamingTransport(engine)
    engine.add_transport(streaming)
    script([{"when": "greet", "turns": [[{"text": "Hel"}, {"text": "lo"}]]}])
    result = engine.submit(streaming, TransportEvent("rec-d", "greet me")).wait(15)
    assert result.text == "Hello"
    calls = [c for c in streaming.contexts[-1].calls if c[0] in {"delta", "respond"}]
    assert calls == [("delta", "Hel"), ("delta", "lo"), ("respond", "Hello")]
