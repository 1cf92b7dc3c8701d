"""Iris's tools for ACP agents: the MCP server each session carries (``iris mcp-tools``), used by
the SDK-built test agent with the official ``mcp`` client, through served Iris."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.custom_agents.acp_setup import acp_agent, recorded
from tests.custom_agents.conftest import Setup, wait_until


def _said(setup: Setup, chat: str, text: str) -> str:
    reply = setup.ask(chat, text)
    assert reply.status == 200, reply.body
    said: str = reply.json()["text"]
    return said


def test_an_acp_agent_calls_each_tool_scoped_to_itself_and_its_chat(setup: Setup) -> None:
    record = acp_agent(setup, "coder", "--load")
    helper = acp_agent(setup, "helper")
    iris = setup.serve()
    assert _said(setup, "t", "@coder mcp tools") == (
        "ok: call_agent list_agents note schedule_event"
    )
    new = recorded(record, "session/new")[0]
    (server,) = new["servers"]
    token = new["mcp_env"]["IRIS_TOOLS_TOKEN"]
    assert server["args"][-1] == "mcp-tools" and token not in " ".join(server["args"])
    assert "IRIS_TOOLS_TOKEN" in server["env"]

    listed = _said(setup, "t", "@coder mcp list_agents {}")
    assert '"name": "helper"' in listed and '"name": "coder"' not in listed

    assert _said(setup, "t", '@coder mcp note {"text": "hello from coder"}') == (
        "ok: noted in the chat"
    )
    history = iris.get("/sessions/t/history").json()["entries"]
    notes = [e for e in history if e.get("type") == "note"]
    assert [(n["text"], n["from"]) for n in notes] == [("hello from coder", "coder")]

    called = _said(setup, "t", '@coder mcp call_agent {"agent": "helper", "message": "echo hi"}')
    assert called.startswith("ok: helper was asked")
    wait_until(lambda: [p for p in recorded(helper, "session/prompt") if p["text"] == "echo hi"])

    # Out of scope: itself, an unknown agent, a forged token (no tool takes a chat at all).
    refused = _said(setup, "t", '@coder mcp call_agent {"agent": "coder", "message": "loop"}')
    assert refused.startswith("error: Error executing tool call_agent: not allowed")
    assert "not an agent you may call" in refused
    unknown = _said(setup, "t", '@coder mcp call_agent {"agent": "root", "message": "x"}')
    assert "not an agent you may call" in unknown
    with setup.reach() as reach:
        forged = reach.request("tool", token="forged", name="note", args={"text": "x"})
        assert forged == {"error": "not allowed: this tools token is unknown or expired"}
        listing = reach.request("chats")["chats"]
    chat_of_t = next(c["chat_id"] for c in listing if c["channel"] == "SESSION-t")
    assert new["mcp_env"]["IRONWIRE_CHAT_ID"] == chat_of_t

    at = (datetime.now(UTC) + timedelta(seconds=2)).isoformat(timespec="seconds")
    scheduled = _said(
        setup, "t", f'@coder mcp schedule_event {{"text": "@helper echo later", "at": "{at}"}}'
    )
    assert scheduled.startswith("ok: scheduled as event coder-"), scheduled
    event = scheduled.removeprefix("ok: scheduled as event ")
    assert iris.log_path is not None
    fired = f"events/{event}.json fired on SESSION-t (one-shot)"
    wait_until(lambda: fired in iris.log_path.read_text(errors="replace"), timeout=30)

    # The process ends (another chat takes a turn): its token is revoked with it.
    _said(setup, "other", "@coder echo bye")
    with setup.reach() as reach:
        stale = reach.request("tool", token=token, name="note", args={"text": "x"})
    assert stale == {"error": "not allowed: this tools token is unknown or expired"}
    assert token not in iris.log_path.read_text(errors="replace")


def test_an_agent_that_refuses_mcp_servers_gets_one_retry_without(setup: Setup) -> None:
    record = acp_agent(setup, "plain", "--refuse-mcp")
    iris = setup.serve()
    assert _said(setup, "r", "@plain echo hi") == "You said: hi"
    assert [n["mcp"] for n in recorded(record, "session/new")] == [1, 0]
    assert _said(setup, "r", "@plain echo again") == "You said: again"  # same process
    assert len(recorded(record, "session/new")) == 2
    # Remembered: the next process (another chat) is offered none from the start.
    assert _said(setup, "other", "@plain echo there") == "You said: there"
    assert [n["mcp"] for n in recorded(record, "session/new")] == [1, 0, 0]
    assert iris.log_path is not None
    log = iris.log_path.read_text(errors="replace")
    line = next(x for x in log.splitlines() if "refused session/new" in x)
    assert "acp agent plain" in line and "this agent takes no MCP servers" in line


def test_a_hung_session_creation_is_not_taken_for_a_refusal_of_mcp(setup: Setup) -> None:
    record = acp_agent(setup, "coder", "--hang-session")
    iris = setup.serve(IRIS_ACP_START_TIMEOUT_MS="2000")
    for chat in ("h", "k"):
        reply = setup.ask(chat, "@coder echo hi")
        assert reply.json()["error"] == "it did not answer session/new within 2 s"
    # One attempt each, both with Iris's MCP server: a timeout is no refusal.
    assert [n["mcp"] for n in recorded(record, "session/new")] == [1, 1]
    assert iris.log_path is not None
    assert "refused session/new" not in iris.log_path.read_text(errors="replace")


def test_a_refusal_of_mcp_revokes_the_token_and_never_logs_it(setup: Setup) -> None:
    record = acp_agent(setup, "plain", "--refuse-mcp-echo")
    iris = setup.serve()
    assert _said(setup, "r", "@plain echo hi") == "You said: hi"
    first = recorded(record, "session/new")[0]
    token = first["mcp_env"]["IRIS_TOOLS_TOKEN"]
    with setup.reach() as reach:
        used = reach.request("tool", token=token, name="note", args={"text": "x"})
    assert used == {"error": "not allowed: this tools token is unknown or expired"}
    assert iris.log_path is not None
    log = iris.log_path.read_text(errors="replace")
    assert "refused session/new" in log
    assert token not in log
