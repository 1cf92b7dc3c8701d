"""sessions_list, sessions_history and sessions_send, called by the main agent of a served Iris."""

from __future__ import annotations

from collections.abc import Callable

from iris_runtime.testing.fake_llm import FakeAnthropic
from iris_runtime.testing.server import IrisServer
from tests.session_agents.conftest import (
    announces,
    call_tool,
    spawn,
    wait_for_announces,
    wait_for_status,
)

Serve = Callable[..., IrisServer]


def test_list_history_and_send(serve: Serve, llm: FakeAnthropic) -> None:
    iris = serve()
    [first, second] = spawn(
        iris, "t1", {"task": "draft the plan", "label": "plan"}, {"task": "slow survey"}
    )
    wait_for_status(iris, "t1", {"success", "running"}, count={"success": 1, "running": 1})

    listed = call_tool(iris, llm, "t1", "sessions_list")["sessions"]
    assert [(s["index"], s["label"], s["status"]) for s in listed] == [
        (1, "plan", "success"),
        (2, "", "running"),
    ]
    assert [s["runId"] for s in listed] == [first["runId"], second["runId"]]

    history = call_tool(iris, llm, "t1", "sessions_history", {"sessionKey": "#1"})
    assert history["sessionKey"] == first["childSessionKey"]
    texts = [(e["role"], e["text"]) for e in history["entries"]]
    assert ("user", "draft the plan") in texts
    assert ("assistant", "worked on: draft the plan") in texts

    busy = call_tool(iris, llm, "t1", "sessions_send", {"sessionKey": "#2", "message": "more"})
    assert busy == {
        "status": "error",
        "error": "sub-agent #2 is still working; send again when it has finished",
    }
    sent = call_tool(
        iris,
        llm,
        "t1",
        "sessions_send",
        {"sessionKey": first["childSessionKey"], "message": "add a budget"},
    )
    assert sent["status"] == "done" and sent["reply"] == "worked on: add a budget"
    # The caller got the reply: nothing more is announced for it.
    assert len(announces(iris, "t1")) == 1
    later = call_tool(iris, llm, "t1", "sessions_history", {"sessionKey": first["runId"]})
    assert ("assistant", "worked on: add a budget") in [
        (e["role"], e["text"]) for e in later["entries"]
    ]
    unknown = call_tool(iris, llm, "t1", "sessions_history", {"sessionKey": "#9"})
    assert unknown["status"] == "error" and "no sub-agent '#9' in this chat" in unknown["error"]
    elsewhere = call_tool(
        iris, llm, "t2", "sessions_history", {"sessionKey": first["childSessionKey"]}
    )
    assert elsewhere == {"status": "error", "error": "no sub-agents were spawned in this chat"}


def test_send_to_an_archived_sub_agent_is_refused(serve: Serve, llm: FakeAnthropic) -> None:
    iris = serve()
    spawn(iris, "t3", {"task": "quick", "cleanup": "delete"})
    wait_for_announces(iris, "t3", 1)
    wait_for_archived(iris, llm)
    refused = call_tool(iris, llm, "t3", "sessions_send", {"sessionKey": "#1", "message": "hi"})
    assert refused == {"status": "error", "error": "sub-agent #1 is archived; spawn a new one"}


def wait_for_archived(iris: IrisServer, llm: FakeAnthropic) -> None:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = call_tool(iris, llm, "t3", "sessions_list")["sessions"]
        if not listed:
            return
        time.sleep(0.1)
    raise AssertionError("never archived")
