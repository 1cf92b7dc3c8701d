"""ACP agents hosted by served Iris (spec 004, "ACP agents"), driven over the session API: the
test agent is built with the official SDK's agent side and runs as a real subprocess."""

from __future__ import annotations

import base64
import sys
import time
from pathlib import Path

from tests.custom_agents.acp_setup import acp_agent, alive, pid_of, recorded
from tests.custom_agents.conftest import Setup, wait_until, write_manifest
from tests.web.conftest import SSEReader, in_background

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def test_a_turn_initializes_honestly_and_streams_the_reply(setup: Setup) -> None:
    record = acp_agent(setup)
    setup.serve()
    listed = setup.custom_agents()["agents"]
    assert [(a["kind"], a["status"]) for a in listed] == [("coder", "ready")]
    reply = setup.ask("s1", "@coder echo good morning")
    assert reply.status == 200, reply.body
    assert reply.json() | {"usage": None, "runId": None} == {
        "text": "You said: good morning",
        "status": "done",
        "usage": None,
        "runId": None,
    }
    (init,) = recorded(record, "initialize")
    assert init["protocol_version"] == 1
    assert init["caps"]["fs"] == {"readTextFile": False, "writeTextFile": False}
    assert init["caps"]["terminal"] is False
    (new,) = recorded(record, "session/new")
    assert new["cwd"] == str(setup.data_dir)


def test_one_process_per_chat_and_sigkill_when_another_chat_takes_a_turn(setup: Setup) -> None:
    acp_agent(setup)
    setup.serve()
    first = pid_of(setup.ask("a", "@coder env").json()["text"])
    assert pid_of(setup.ask("a", "@coder env").json()["text"]) == first  # reused
    other = pid_of(setup.ask("b", "@coder env").json()["text"])
    assert other != first
    assert not alive(first)
    back = pid_of(setup.ask("a", "@coder env").json()["text"])
    assert back not in {first, other} and not alive(other)


def test_tool_cards_thinking_plans_and_permissions_reach_the_stream(setup: Setup) -> None:
    record = acp_agent(setup)
    iris = setup.serve()
    stream = SSEReader(iris, "cards")
    reply = setup.ask("cards", "@coder tools")
    assert reply.json()["text"] == "read it"
    thought = setup.ask("cards", "@coder think")
    assert thought.json()["text"] == "thought about it"
    stream.wait_for(lambda evs: len([e for e in evs if e["event"] == "final"]) == 2)
    stream.close()
    tools = [e for e in stream.events if e["event"] == "tool"]
    # Card ids are scoped to their turn ("<turn id>:<the agent's call id>").
    assert [(t["phase"], t["id"].split(":", 1)[1], t["name"], t["kind"]) for t in tools] == [
        ("start", "call-1", "Read report.pdf", "read"),
        ("end", "call-1", "Read report.pdf", "read"),
    ]
    assert tools[0]["id"] == tools[1]["id"] and tools[0]["id"].startswith("t_")
    assert tools[0]["args"] == {"file_path": "/srv/report.pdf"}
    assert tools[1]["result"] == "42 pages" and tools[1]["isError"] is False
    # Permission: never asked of the owner; allow_always chosen over allow_once.
    (permission,) = recorded(record, "permission")
    assert permission["outcome"] == {"outcome": "selected", "optionId": "always"}
    statuses = [e["text"] for e in stream.events if e["event"] == "status"]
    assert "Coder: allowed: Read report.pdf (allow_always)" in statuses
    assert any(s.startswith("Coder: plan: [x] look · [ ] answer") for s in statuses)
    assert [e["text"] for e in stream.events if e["event"] == "thinking"] == ["pondering"]


def test_load_session_restores_memory_after_a_chat_switch(setup: Setup) -> None:
    record = acp_agent(setup, "coder", "--load")
    setup.serve()
    setup.ask("mem", "@coder echo one")
    setup.ask("elsewhere", "@coder echo two")  # kills mem's process
    reply = setup.ask("mem", "@coder recall")
    assert reply.json()["text"] == "I remember: echo one"
    loads = recorded(record, "session/load")
    assert len(loads) == 1
    assert len(recorded(record, "session/new")) == 2


def test_without_load_session_the_owner_is_told_once_per_chat(setup: Setup) -> None:
    acp_agent(setup)
    setup.serve()
    setup.ask("fresh", "@coder echo one")
    setup.ask("other", "@coder echo two")
    again = setup.ask("fresh", "@coder echo three").json()["text"]
    assert again == (
        "This agent could not restore its memory of this chat, so it is continuing fresh."
        "\n\nYou said: three"
    )
    setup.ask("other", "@coder echo four")
    assert setup.ask("fresh", "@coder echo five").json()["text"] == "You said: five"


def test_a_process_that_dies_mid_prompt_fails_the_turn_with_its_exit_and_stderr(
    setup: Setup,
) -> None:
    acp_agent(setup)
    setup.serve()
    reply = setup.ask("d", "@coder die")
    assert reply.status == 502
    error = reply.json()["error"]
    assert "exited with code 3" in error
    assert "fatal: the model went away" in error
    assert setup.ask("d", "@coder echo back").json()["text"].endswith("You said: back")


def test_refusal_fails_the_turn_and_the_process_is_replaced(setup: Setup) -> None:
    acp_agent(setup)
    setup.serve()
    before = pid_of(setup.ask("r", "@coder env").json()["text"])
    reply = setup.ask("r", "@coder refuse")
    assert reply.status == 502 and "refusal" in reply.json()["error"]
    wait_until(lambda: not alive(before))
    assert pid_of(setup.ask("r", "@coder env").json()["text"]) != before


def test_stop_cancels_then_kills_even_an_agent_that_ignores_cancel(setup: Setup) -> None:
    record = acp_agent(setup, "coder", "--load")
    iris = setup.serve(IRIS_ACP_CANCEL_GRACE_MS="300")
    pid = pid_of(setup.ask("stop", "@coder env").json()["text"])
    for word in ("wait", "hang"):
        pending = in_background(lambda word=word: setup.ask("stop", f"@coder {word}"))
        wait_until(
            lambda word=word: [p for p in recorded(record, "session/prompt") if p["text"] == word]
        )
        assert iris.post("/sessions/stop/stop").json() == {"stopped": True}
        reply = pending(30)
        assert reply.status == 200 and reply.json()["status"] == "stopped"
        wait_until(lambda pid=pid: not alive(pid))
        pid = pid_of(setup.ask("stop", "@coder env").json()["text"])
    assert len(recorded(record, "session/cancel")) == 2


def test_a_hang_on_session_creation_fails_clearly(setup: Setup) -> None:
    acp_agent(setup, "coder", "--hang-session")
    setup.serve(IRIS_ACP_START_TIMEOUT_MS="5000")
    reply = setup.ask("h", "@coder echo hi")
    assert reply.status == 502
    assert reply.json()["error"] == "it did not answer session/new within 5 s"


def test_bad_peers_missing_bin_wrong_version_and_malformed_lines(setup: Setup) -> None:
    setup.agents_d.mkdir(parents=True, exist_ok=True)
    (setup.agents_d / "gone.json").write_text(
        '{"kind": "gone", "label": "Gone", "bin": "/nonexistent/agent-acp"}'
    )
    acp_agent(setup, "nine", "--bad-version")
    acp_agent(setup, "coder")
    iris = setup.serve()
    gone = setup.ask("g", "@gone hi")
    assert gone.status == 502
    assert (
        gone.json()["error"]
        == "/nonexistent/agent-acp could not be started: No such file or directory"
    )
    nine = setup.ask("g", "@nine echo hi")
    assert nine.json()["error"] == "it speaks ACP protocol version 9; Iris speaks 1"
    garbage = setup.ask("g", "@coder garbage")
    assert garbage.json()["text"] == "after garbage"
    log = wait_until(lambda: "not JSON-RPC" in (iris.log_tail(400)) and iris.log_tail(400))
    assert "acp agent coder" in log and "this is not json" in log


def test_images_are_sent_ahead_of_the_text_or_dropped_and_counted(setup: Setup) -> None:
    acp_agent(setup, "seer", "--images")
    acp_agent(setup, "blind")
    iris = setup.serve()
    staged = iris.post("/sessions/img/attachments", body=PNG, headers={"X-Filename": "c.png"})
    handles = [{"local": staged.json()["local"]}]
    for kind, expected in (("seer", "blocks: image text"), ("blind", "blocks: text")):
        reply = iris.post(
            "/sessions/img/message",
            json_body={"text": f"@{kind} images", "attachments": handles},
        )
        assert reply.json()["text"] == expected
    assert "acp agent blind takes no images: 1 ignored" in iris.log_tail(400)


def test_model_choice_sets_the_variable_and_the_config_option(setup: Setup) -> None:
    models = {"models": [{"id": "fast"}, {"id": "deep", "label": "Deep"}]}
    record = acp_agent(setup, "coder", "--model-option", modelEnv="TEST_AGENT_MODEL", **models)
    acp_agent(setup, "plain", "--model-option", "--no-config", **models)
    setup.serve()
    shown = setup.ask("m", "@coder /model").json()["text"]
    assert shown == "Coder model: default. Offered: fast, deep (Deep), or default."
    on_default = setup.ask("m", "@coder env").json()["text"]
    assert on_default.endswith("model=")
    assert recorded(record, "session/set_config_option") == []  # Default gets neither
    chosen = setup.ask("m", "@coder /model deep").json()["text"]
    assert chosen == "Coder uses Deep from the next message."
    # A change applies from the next turn: a new process with the variable set.
    on_deep = setup.ask("m", "@coder env").json()["text"]
    assert on_deep.endswith("model=deep")
    assert pid_of(on_deep) != pid_of(on_default)
    (config,) = recorded(record, "session/set_config_option")
    assert (config["config_id"], config["value"]) == ("model", "deep")
    assert "offers no model 'huge'" in setup.ask("m", "@coder /model huge").json()["text"]
    # An agent that rejects session/set_config_option keeps working.
    setup.ask("m", "@plain /model fast")
    assert setup.ask("m", "@plain echo still here").json()["text"] == "You said: still here"


def test_an_agent_restart_kills_its_process(setup: Setup) -> None:
    acp_agent(setup)
    iris = setup.serve()
    pid = pid_of(setup.ask("x", "@coder env").json()["text"])
    assert iris.post("/custom-agents/coder/restart", json_body={}).status == 200
    wait_until(lambda: not alive(pid))
    assert pid_of(setup.ask("x", "@coder env").json()["text"]) != pid


def test_a_load_the_agent_refuses_falls_back_to_a_new_session_with_the_notice(
    setup: Setup,
) -> None:
    record = acp_agent(setup, "coder", "--load")
    setup.serve()
    setup.ask("lost", "@coder echo one")
    setup.ask("other", "@coder echo two")
    record.with_suffix(".sessions.json").unlink()  # the agent lost its sessions
    reply = setup.ask("lost", "@coder recall").json()["text"]
    assert reply == (
        "This agent could not restore its memory of this chat, so it is continuing fresh."
        "\n\nI remember: "
    )
    assert len(recorded(record, "session/load")) == 1


def test_a_restart_of_iris_kills_the_agent_and_the_chat_carries_on(setup: Setup) -> None:
    record = acp_agent(setup)
    iris = setup.serve()
    pending = in_background(lambda: setup.ask("r", "@coder hang"))
    prompt = wait_until(lambda: [p for p in recorded(record, "session/prompt")])[0]
    iris.restart()
    pending(60)
    wait_until(lambda: not alive(prompt["pid"]))
    assert setup.ask("r", "@coder echo back").json()["text"].endswith("You said: back")


def test_another_chat_waits_visibly_for_the_running_turn(setup: Setup) -> None:
    record = acp_agent(setup)
    iris = setup.serve()
    first = in_background(lambda: setup.ask("one", "@coder wait"))
    wait_until(lambda: [p for p in recorded(record, "session/prompt") if p["text"] == "wait"])
    stream = SSEReader(iris, "two")
    second = in_background(lambda: setup.ask("two", "@coder echo after you"))
    waiting = "Coder: waiting for another chat's turn to finish"
    stream.wait_for(lambda evs: any(e.get("text") == waiting for e in evs))
    assert iris.post("/sessions/one/stop").json() == {"stopped": True}
    assert first(30).json()["status"] == "stopped"
    assert second(60).json()["text"] == "You said: after you"
    stream.close()


def test_stop_during_a_hanging_session_creation_kills_the_half_started_agent(
    setup: Setup,
) -> None:
    record = acp_agent(setup, "coder", "--hang-session")
    iris = setup.serve(IRIS_ACP_START_TIMEOUT_MS="120000")
    pending = in_background(lambda: setup.ask("h", "@coder echo hi"))
    (new,) = wait_until(lambda: recorded(record, "session/new"))
    assert iris.post("/sessions/h/stop").json() == {"stopped": True}
    assert pending(30).json()["status"] == "stopped"
    wait_until(lambda: not alive(new["pid"]))


def test_a_stop_while_waiting_for_a_dying_agent_does_not_wedge_the_host(setup: Setup) -> None:
    """Stop in chat A (its agent ignores cancel); within the grace a turn in chat B waits for A's
    process to go and is stopped too: the wait is abandoned, A's process still goes, and later
    turns work."""
    record = acp_agent(setup)
    iris = setup.serve(IRIS_ACP_CANCEL_GRACE_MS="4000")
    first = pid_of(setup.ask("a", "@coder env").json()["text"])
    pending = in_background(lambda: setup.ask("a", "@coder hang"))
    wait_until(lambda: [p for p in recorded(record, "session/prompt") if p["text"] == "hang"])
    assert iris.post("/sessions/a/stop").json() == {"stopped": True}
    assert pending(30).json()["status"] == "stopped"
    waiting = in_background(lambda: setup.ask("b", "@coder echo too soon"))
    time.sleep(1.0)  # B is waiting for A's process to go (the grace is 4 s)
    assert alive(first)
    assert iris.post("/sessions/b/stop").json() == {"stopped": True}
    assert waiting(30).json()["status"] == "stopped"
    later = setup.ask("b", "@coder echo later").json()
    assert later["text"].endswith("You said: later"), later
    assert not alive(first)


def test_a_wrapped_agent_is_killed_with_its_whole_process_group(setup: Setup) -> None:
    """A manifest's bin that is a shell wrapper: the wrapper, the agent it runs and anything else
    it started go together, at once (no wait for the pipes they hold)."""
    record = setup.tmp_path / "wrapped-acp.jsonl"
    sleeper = setup.tmp_path / "sleeper.pid"
    wrapper = setup.tmp_path / "agent-wrapper.sh"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"sleep 1000 &\necho $! > {sleeper}\n"
        f"{sys.executable} -m iris_runtime.testing.acp_agent {record}\n"
    )
    wrapper.chmod(0o755)
    write_manifest(setup.agents_d, "coder.json", {"kind": "coder", "bin": str(wrapper)})
    setup.serve()
    agent = pid_of(setup.ask("a", "@coder env").json()["text"])
    shell = int(Path(f"/proc/{agent}/stat").read_text().rsplit(")", 1)[1].split()[1])
    sleeping = int(sleeper.read_text())
    assert alive(shell) and alive(sleeping) and shell != agent
    started = time.monotonic()
    other = pid_of(setup.ask("b", "@coder env").json()["text"])
    assert time.monotonic() - started < 4.0  # not held up waiting for the pipes' end
    assert other != agent
    wait_until(lambda: not (alive(agent) or alive(shell) or alive(sleeping)), timeout=2.0)
