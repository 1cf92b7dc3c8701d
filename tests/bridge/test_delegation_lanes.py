"""A run waiting on a sub-agent holds no compute slot, and a stop reaches a run still queued for
one: a served Iris, a real sub-agent runtime and the scripted provider on both."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from iris_runtime.testing.server import HttpReply, IrisServer
from iris_runtime.testing.subagent import SubAgent, register
from tests.bridge.fault_tools import Background, wait_for

StartSub = Callable[..., SubAgent]
StartIris = Callable[..., IrisServer]
SLOW = [{"when": "long", "turns": [[{"sleep": 120}]]}]


def logged(iris: IrisServer, session: str, needle: str) -> bool:
    log = iris.data_dir / f"SESSION-{session}" / "log.jsonl"
    return log.exists() and needle in log.read_text()


def send(iris: IrisServer, session: str, text: str) -> Background:
    return Background(lambda: iris.post(f"/sessions/{session}/message", json_body={"text": text}))


def test_five_waiting_delegations_leave_the_lanes_free(
    start_subagent: StartSub, start_iris: StartIris
) -> None:
    sub = start_subagent(rules=SLOW)
    iris = start_iris()  # the main lane is 4 wide
    register(iris, "helper", sub.bridge_url, token=sub.token)
    channels = [f"w{n}" for n in range(1, 6)]
    waiting = [send(iris, c, "@helper long task") for c in channels]
    wait_for(lambda: all(logged(iris, c, "bridge_call") for c in channels), 20, "five delegations")

    started = time.monotonic()
    other = send(iris, "w6", "are you there?")
    other.join(15)
    assert isinstance(other.value, HttpReply) and other.value.status == 200, other.value
    assert other.value.json()["text"].endswith("You said: are you there?")
    assert time.monotonic() - started < 10  # not after the delegations (2 min)
    assert all(w.thread.is_alive() for w in waiting)

    for channel in channels:
        assert iris.post(f"/sessions/{channel}/stop").json() == {"stopped": True}
    for call in waiting:
        call.join(15)
        assert call.value.json()["status"] == "stopped"


def test_a_stop_resolves_a_run_still_queued_for_a_lane(
    start_iris: StartIris, write_script: Callable[..., Path]
) -> None:
    iris = start_iris(
        IRIS_PROVIDER="scripted", IRIS_SCRIPT_FILE=str(write_script(SLOW)), IRIS_LANE_MAIN="1"
    )
    busy = send(iris, "q1", "long thinking")
    wait_for(lambda: logged(iris, "q1", "long thinking"), 15, "the first run to start")
    queued = send(iris, "q2", "hello")
    time.sleep(0.5)
    assert not logged(iris, "q2", "hello")  # it has not started: the only slot is taken

    assert iris.post("/sessions/q2/stop").json() == {"stopped": True}
    queued.join(10)
    assert queued.value.status == 200 and queued.value.json()["status"] == "stopped"
    assert busy.thread.is_alive()  # the running one is untouched

    assert iris.post("/sessions/q1/stop").json() == {"stopped": True}
    busy.join(10)
    after = iris.post("/sessions/q2/message", json_body={"text": "again"}).json()
    assert after == {**after, "status": "done", "text": "echo: again"}
    # The stopped message was never answered, so the conversation goes on without it.
    entries = iris.get("/sessions/q2/history").json()["entries"]
    assert [(e["role"], e["text"], e.get("status")) for e in entries] == [
        ("user", "hello", "cancelled"),
        ("user", "again", None),
        ("assistant", "echo: again", "done"),
    ]
