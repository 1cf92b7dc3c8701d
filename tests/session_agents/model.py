"""A content-driven "model" for the sub-agent tests, answering through the wire-level Anthropic
fake (parallel children's requests arrive in no fixed order, so replies follow the request).

Main agent (no sub-agent line in its system prompt):
- ``spawn <json list>``: one ``sessions_spawn`` call per object in the list, then "spawned";
- ``call <tool> [<json args>]``: one call of that tool, then its result;
- anything else: "ok".
Child (its system prompt starts with the sub-agent line):
- task containing ``slow``: stalls for a minute (a stop or timeout cuts it short);
- task containing ``fail``: an API error;
- task containing ``nest``: tries ``sessions_spawn`` itself, then reports the tool's answer;
- otherwise: "worked on: <task>";
- the announce step: "ANNOUNCE_SKIP" when the task contains ``skip``, else "summary: <task>".
"""

from __future__ import annotations

import json
from typing import Any

from iris_runtime.session_agents.announce import ANNOUNCE_PROMPT
from iris_runtime.testing.fake_llm import Fail, Reply, Stall, Text, ToolCall
from iris_runtime.testing.fake_llm.script import Usage

CHILD_LINE = "You are a background sub-agent"


def system_text(body: dict[str, Any]) -> str:
    system = body.get("system", "")
    if isinstance(system, list):
        return "".join(block.get("text", "") for block in system)
    return str(system)


def blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body["messages"]):
        if message["role"] != "user":
            continue
        texts = [b.get("text", "") for b in blocks(message) if b["type"] == "text"]
        if texts:
            return "".join(texts)
    return ""


def tool_results(body: dict[str, Any]) -> list[str]:
    last = body["messages"][-1]
    out = []
    for block in blocks(last):
        if block["type"] == "tool_result":
            content = block.get("content", "")
            if isinstance(content, list):
                content = "".join(c.get("text", "") for c in content)
            out.append(str(content))
    return out


def task_of(body: dict[str, Any]) -> str:
    """The child's task: its session's first user message."""
    first = body["messages"][0]
    return "".join(b.get("text", "") for b in blocks(first) if b["type"] == "text")


def respond(body: dict[str, Any]) -> Reply | Fail | None:
    if CHILD_LINE in system_text(body):
        return _child(body)
    results = tool_results(body)
    if results:
        return Reply([Text("spawned: " + " | ".join(results))])
    text = last_user_text(body)
    if text.startswith("call "):
        name, _, raw = text[len("call ") :].partition(" ")
        return Reply([ToolCall(name, json.loads(raw or "{}"), id="toolu_call")])
    if text.startswith("spawn "):
        calls = json.loads(text[len("spawn ") :])
        return Reply(
            [ToolCall("sessions_spawn", args, id=f"toolu_{i}") for i, args in enumerate(calls)]
        )
    return Reply([Text("ok")])


def latest_task(body: dict[str, Any]) -> str:
    """The latest message the child was given (a follow-up's, or its task)."""
    texts = [
        "".join(b.get("text", "") for b in blocks(m) if b["type"] == "text")
        for m in body["messages"]
        if m["role"] == "user"
    ]
    given = [t for t in texts if t and t != ANNOUNCE_PROMPT]
    return given[-1] if given else ""


def _child(body: dict[str, Any]) -> Reply | Fail:
    task = task_of(body)
    if last_user_text(body) == ANNOUNCE_PROMPT:
        latest = latest_task(body)
        return Reply([Text("ANNOUNCE_SKIP" if "skip" in latest else f"summary: {latest}")])
    results = tool_results(body)
    if results:
        return Reply([Text("nested said: " + results[0])])
    if "slow" in task:
        return Reply([Text("starting"), Stall(60), Text(" never")])
    if "fail" in task:
        return Fail(400, "invalid_request_error", "the child's request was refused")
    if "nest" in task:
        return Reply([ToolCall("sessions_spawn", {"task": "grandchild"}, id="toolu_n")])
    latest = latest_task(body)
    return Reply([Text(f"worked on: {latest}"), Usage(100, 20)])
