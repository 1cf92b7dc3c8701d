"""Reaching ``Engine.notify`` and the announce path of a served Iris from a test.

The served Iris loads the test-only plugin in ``notify_plugin/`` (through the real entry-point
mechanism: its ``.dist-info`` is on the server's ``PYTHONPATH``), which adds ``POST /test/notify``
and ``POST /test/announce`` to the internal API. See ``notify_plugin/iris_test_notify.py``."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from iris_runtime.testing.server import IrisServer

NOTIFY_PLUGIN = Path(__file__).parent / "notify_plugin"


def notify_env() -> dict[str, str]:
    """The environment that makes a served Iris load the hook plugin."""
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(NOTIFY_PLUGIN), path) if p)}


def subagent_event(phase: str, status: str, **fields: Any) -> dict[str, Any]:
    """A sub-agent event as the engine sends it (``fields`` override or add)."""
    event: dict[str, Any] = {
        "type": "subagent",
        "phase": phase,
        "runId": "run-1",
        "sessionKey": "agent:main:subagent:0b5e",
        "sessionId": "subagent-0b5e",
        "index": 1,
        "label": "find sources",
        "agentId": "main",
        "status": status,
        "createdAt": time.time(),
        "startedAt": None,
        "endedAt": None,
        "runtimeSeconds": None,
    }
    event.update(fields)
    return event


def notify(server: IrisServer, channel: str, event: dict[str, Any]) -> None:
    reply = server.post("/test/notify", json_body={"channel": channel, "event": event})
    assert reply.status == 200, reply.body


def announce(
    server: IrisServer, channel: str, text: str, key: str | None = None, agent_id: str = "main"
) -> str:
    """Log ``text`` as the engine logs an announce, then have the transport show it; its id."""
    body = {"channel": channel, "text": text, "key": key or uuid.uuid4().hex, "agentId": agent_id}
    reply = server.post("/test/announce", json_body=body)
    assert reply.status == 200, reply.body
    return str(reply.json()["id"])
