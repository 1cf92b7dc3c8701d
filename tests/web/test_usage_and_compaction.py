"""Usage and cost reach the API, the session totals and `iris usage`; long conversations are
compacted in the context while the log keeps every turn."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iris_runtime.testing.server import IrisServer, clean_environment, run_iris
from tests.web.conftest import SSEReader

Start = Callable[..., IrisServer]
WriteScript = Callable[[list[dict[str, Any]]], Path]


def test_usage_per_run_session_and_cli(start_iris: Start, write_script: WriteScript) -> None:
    script = write_script(
        [
            {
                "when": "count",
                "turns": [
                    [
                        {"tool": "bash", "args": {"command": "true"}},
                        {"usage": {"input_tokens": 1000, "output_tokens": 100, "cost_usd": 0.0045}},
                    ],
                    [
                        {"text": "counted"},
                        {
                            "usage": {
                                "input_tokens": 1200,
                                "output_tokens": 50,
                                "cache_read_tokens": 800,
                                "cost_usd": 0.0050,
                            }
                        },
                    ],
                ],
            }
        ]
    )
    iris = start_iris(IRIS_PROVIDER="scripted", IRIS_SCRIPT_FILE=str(script))
    reply = iris.post("/sessions/u1/message", json_body={"text": "count things"}).json()
    assert reply["usage"] == {
        "inputTokens": 2200,
        "outputTokens": 150,
        "cacheReadTokens": 800,
        "cacheWriteTokens": 0,
        "totalTokens": 3150,
        "costUsd": 0.0095,
    }
    iris.post("/sessions/u1/message", json_body={"text": "count again"})
    history = iris.get("/sessions/u1/history").json()
    assert history["usage"]["total"]["inputTokens"] == 4400
    assert history["usage"]["byAgent"]["iris"]["costUsd"] == 0.019
    reply_entry = history["entries"][1]
    assert [t["inputTokens"] for t in reply_entry["turns"]] == [1000, 1200]
    done = run_iris("usage", "--json", env=clean_environment(IRIS_DATA_DIR=str(iris.data_dir)))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["byChannel"]["SESSION-u1"]["outputTokens"] == 300
    assert report["byAgent"]["iris"]["costUsd"] == 0.019
    table = run_iris("usage", env=clean_environment(IRIS_DATA_DIR=str(iris.data_dir))).stdout
    assert "SESSION-u1" in table and "TOTAL" in table


def test_long_conversations_are_compacted_but_the_log_keeps_everything(
    start_iris: Start, write_script: WriteScript
) -> None:
    script = write_script(
        [
            {"when": "USER: ", "turns": [[{"text": "SUMMARY: the user listed facts one to five"}]]},
            {"when": "what do you know", "turns": [[{"recall": True}]]},
        ]
    )
    iris = start_iris(
        IRIS_PROVIDER="scripted", IRIS_SCRIPT_FILE=str(script), IRIS_SCRIPTED_CONTEXT_WINDOW="600"
    )
    stream = SSEReader(iris, "c1")
    for number in range(1, 6):
        fact = f"fact {number}: " + "details " * 40
        assert iris.post("/sessions/c1/message", json_body={"text": fact}).status == 200
    recalled = iris.post("/sessions/c1/message", json_body={"text": "what do you know"}).json()[
        "text"
    ]
    assert "[Summary of the earlier conversation]" in recalled
    assert "SUMMARY: the user listed facts one to five" in recalled
    assert "fact 1:" not in recalled  # summarised away from the context...
    everything = iris.get("/sessions/c1/history?all=1").json()["entries"]
    texts = [e.get("text", "") for e in everything]
    assert all(
        any(t.startswith(f"fact {n}:") for t in texts) for n in range(1, 6)
    )  # ...not the log
    compactions = [e for e in everything if e["type"] == "compaction"]
    assert compactions and compactions[-1]["summary"].startswith("SUMMARY:")
    stream.wait_for(lambda evs: sum(e["event"] == "final" for e in evs) == 6)
    assert "→ compacting the conversation" in [e.get("text") for e in stream.events]
    stream.close()
    iris.restart()  # the compacted context is what a restarted Iris replays
    again = iris.post("/sessions/c1/message", json_body={"text": "what do you know now"}).json()
    assert "[Summary of the earlier conversation]" in again["text"]
