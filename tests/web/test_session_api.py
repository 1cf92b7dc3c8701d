"""The internal session API through a real gunicorn-served Iris."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iris_runtime.testing.server import IrisServer
from tests.web.conftest import SSEReader, in_background

Start = Callable[..., IrisServer]
WriteScript = Callable[[list[dict[str, Any]]], Path]


def scripted(
    start_iris: Start, write_script: WriteScript, rules: list[dict[str, Any]], **env: str
) -> IrisServer:
    return start_iris(IRIS_PROVIDER="scripted", IRIS_SCRIPT_FILE=str(write_script(rules)), **env)


def test_health_needs_no_token(iris_server: IrisServer) -> None:
    reply = iris_server.get("/health", auth=False)
    assert reply.status == 200 and reply.json()["status"] == "ok"


def test_offline_provider_answers_plainly(iris_server: IrisServer) -> None:
    reply = iris_server.post("/sessions/s1/message", json_body={"text": "plan my week"})
    assert reply.status == 200
    body = reply.json()
    assert body["status"] == "done"
    assert "No language model is configured" in body["text"] and "plan my week" in body["text"]


def test_three_call_turn_attach_message_and_stop(
    start_iris: Start, write_script: WriteScript
) -> None:
    server = scripted(
        start_iris,
        write_script,
        [
            {
                "when": "review",
                "turns": [[{"text": "reviewing"}, {"thinking": "reading"}, {"sleep": 60}]],
            },
        ],
    )
    staged = server.post(
        "/sessions/s1/attachments", body=b"%PDF-1.4 report", headers={"X-Filename": "report.pdf"}
    )
    assert staged.status == 201
    handle = staged.json()["local"]
    assert handle.startswith("SESSION-s1/attachments/") and handle.endswith("_report.pdf")
    assert (server.data_dir / handle).read_bytes() == b"%PDF-1.4 report"

    stream = SSEReader(server, "s1")
    pending = in_background(
        lambda: server.post(
            "/sessions/s1/message",
            json_body={"text": "review this", "attachments": [{"local": handle}]},
        )
    )
    stream.wait_for(lambda evs: any(e["event"] == "thinking" for e in evs))
    stopped = server.post("/sessions/s1/stop")
    assert stopped.status == 200 and stopped.json() == {"stopped": True}
    reply = pending(10)
    assert reply.status == 200
    assert reply.json()["status"] == "stopped" and reply.json()["text"] == "reviewing"
    stream.close()
    user_entry = server.get("/sessions/s1/history").json()["entries"][0]
    assert user_entry["attachments"] == [handle]


def test_attachment_paths_reach_the_model(start_iris: Start, write_script: WriteScript) -> None:
    server = scripted(start_iris, write_script, [])
    handle = server.post(
        "/sessions/a1/attachments", body=b"x", headers={"X-Filename": "notes.txt"}
    ).json()["local"]
    reply = server.post(
        "/sessions/a1/message", json_body={"text": "read", "attachments": [{"local": handle}]}
    )
    assert str(server.data_dir / handle) in reply.json()["text"]
    assert "<attachments>" in reply.json()["text"]


def test_stream_mirrors_a_turn_when_connected_first(
    start_iris: Start, write_script: WriteScript
) -> None:
    server = scripted(
        start_iris,
        write_script,
        [
            {
                "when": "go",
                "turns": [
                    [
                        {"thinking": "hmm"},
                        {"tool": "bash", "args": {"command": "echo hi > out.txt"}, "id": "t1"},
                    ],
                    [{"tool": "attach", "args": {"path": "out.txt"}, "id": "t2"}],
                    [{"text": "finished"}],
                ],
            }
        ],
    )
    stream = SSEReader(server, "w1")
    assert stream.status == 200
    assert (
        server.post("/sessions/w1/message", json_body={"text": "go"}).json()["text"] == "finished"
    )
    stream.wait_for(lambda evs: any(e["event"] == "final" for e in evs))
    kinds = [(e["event"], e.get("phase")) for e in stream.events]
    assert kinds == [
        ("thinking", None),
        ("status", None),
        ("tool", "start"),
        ("tool", "end"),
        ("status", None),
        ("tool", "start"),
        ("file", None),
        ("tool", "end"),
        ("final", None),
    ]
    assert stream.events[1]["text"] == "→ running bash"
    assert stream.events[6]["path"] == "out.txt"
    assert stream.events[-1]["text"] == "finished"
    time.sleep(1.2)
    assert "heartbeat" in stream.comments
    stream.close()


def test_a_turn_is_not_mirrored_to_a_stream_opened_after_it_started(
    start_iris: Start, write_script: WriteScript
) -> None:
    server = scripted(
        start_iris,
        write_script,
        [
            {
                "when": "slow",
                "turns": [[{"sleep": 1.5}, {"thinking": "late thought"}, {"text": "done"}]],
            },
        ],
    )
    pending = in_background(lambda: server.post("/sessions/m1/message", json_body={"text": "slow"}))
    time.sleep(0.5)
    late = SSEReader(server, "m1")
    assert pending(10).json()["text"] == "done"
    time.sleep(0.5)
    assert late.events == []
    late.close()


def test_a_ninth_stream_is_refused(iris_server: IrisServer) -> None:
    streams = [SSEReader(iris_server, "busy") for _ in range(8)]
    assert [s.status for s in streams] == [200] * 8
    ninth = SSEReader(iris_server, "busy")
    assert ninth.status == 429
    assert b"too_many_streams" in ninth.body
    assert SSEReader(iris_server, "other").status == 200  # the cap is per session
    streams[0].close()
    deadline = time.monotonic() + 10  # the slot frees once a heartbeat finds the socket gone
    while time.monotonic() < deadline:
        again = SSEReader(iris_server, "busy")
        if again.status == 200:
            break
        time.sleep(0.2)
    assert again.status == 200
    for stream in streams:
        stream.close()


def test_history_survives_a_restart_and_is_replayed(
    start_iris: Start, write_script: WriteScript
) -> None:
    server = scripted(
        start_iris, write_script, [{"when": "what did I say", "turns": [[{"recall": True}]]}]
    )
    server.post("/sessions/h1/message", json_body={"text": "remember the blue door"})
    server.restart()
    history = server.get("/sessions/h1/history").json()["entries"]
    assert [(e["role"], e["text"]) for e in history] == [
        ("user", "remember the blue door"),
        ("assistant", "echo: remember the blue door"),
    ]
    reply = server.post("/sessions/h1/message", json_body={"text": "what did I say"})
    assert reply.json()["text"] == "recall: remember the blue door"


def test_reset_and_inject_turn(start_iris: Start, write_script: WriteScript) -> None:
    server = scripted(start_iris, write_script, [{"when": "recap", "turns": [[{"recall": True}]]}])
    server.post("/sessions/r1/message", json_body={"text": "before the reset"})
    assert server.post("/sessions/r1/reset").json() == {"reset": True}
    injected = server.post(
        "/sessions/r1/inject-turn",
        json_body={"user": "a human said this", "assistant": "and a human answered"},
    )
    assert injected.json() == {"injected": 2}
    assert server.post("/sessions/r1/message", json_body={"text": "recap"}).json()["text"] == (
        "recall: a human said this"
    )
    everything = server.get("/sessions/r1/history?all=1").json()["entries"]
    assert everything[0]["text"] == "before the reset"  # a reset never deletes


def test_channel_addressed_events_reach_the_owning_transport(iris_server: IrisServer) -> None:
    # A channel of no transport's shape (C42 would be Slack's: see test_channel_ownership).
    reply = iris_server.post("/channels/ops-42/events", json_body={"text": "wake up"})
    assert reply.status == 202 and reply.json() == {"accepted": True, "transport": "bridge"}
    log = iris_server.data_dir / "ops-42" / "log.jsonl"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        not log.exists() or len(log.read_text().splitlines()) < 2
    ):
        time.sleep(0.05)
    assert "wake up" in log.read_text()
    bad = iris_server.post("/channels/..%2Fetc/events", json_body={"text": "x"})
    assert bad.status in {400, 404}


def test_sigterm_resolves_a_pending_message_and_exits_cleanly(
    start_iris: Start, write_script: WriteScript
) -> None:
    server = scripted(
        start_iris,
        write_script,
        [{"when": "forever", "turns": [[{"text": "so far"}, {"thinking": "..."}, {"sleep": 120}]]}],
    )
    stream = SSEReader(server, "t1")
    pending = in_background(
        lambda: server.post("/sessions/t1/message", json_body={"text": "forever"})
    )
    stream.wait_for(lambda evs: any(e["event"] == "thinking" for e in evs))
    started = time.monotonic()
    assert server.stop() == 0
    assert time.monotonic() - started < 10
    reply = pending(5)
    assert reply.status == 200 and reply.json()["text"] == "so far"
    assert "so far" in (server.data_dir / "SESSION-t1" / "log.jsonl").read_text()


def test_a_failed_run_is_a_502_that_still_carries_its_text(
    start_iris: Start, write_script: WriteScript
) -> None:
    server = scripted(
        start_iris,
        write_script,
        [{"when": "break", "turns": [[{"text": "started"}, {"error": "upstream exploded"}]]}],
    )
    reply = server.post("/sessions/f1/message", json_body={"text": "break it"})
    assert reply.status == 502
    body = reply.json()
    assert body["code"] == "run_failed" and body["status"] == "failed"
    assert body["error"] == "upstream exploded"
    assert body["text"] == "started\n\n(run failed: upstream exploded)"


def test_a_crashing_run_keeps_its_text_and_tells_its_watchers(
    start_iris: Start, write_script: WriteScript
) -> None:
    # A provider that raises (a plugin bug) after the run already said something.
    server = scripted(
        start_iris,
        write_script,
        [
            {
                "when": "crash",
                "turns": [
                    [{"text": "looking"}, {"tool": "bash", "args": {"command": "true"}}],
                    [{"raise": "provider bug"}],
                ],
            }
        ],
    )
    stream = SSEReader(server, "k1")
    reply = server.post("/sessions/k1/message", json_body={"text": "crash please"})
    assert reply.status == 502
    body = reply.json()
    assert (body["status"], body["code"]) == ("failed", "run_crashed")
    assert body["text"] == "looking\n\n(run failed: provider bug)"
    stream.wait_for(lambda evs: any(e["event"] == "final" for e in evs))
    assert [e["text"] for e in stream.events if e["event"] == "final"] == [body["text"]]
    stream.close()
    entries = server.get("/sessions/k1/history").json()["entries"]
    assert entries[-1]["text"] == body["text"] and entries[-1]["status"] == "failed"
    # The channel is free again.
    assert server.post("/sessions/k1/message", json_body={"text": "hi"}).json()["status"] == "done"
