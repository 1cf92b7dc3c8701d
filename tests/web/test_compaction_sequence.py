"""What the model receives around a compaction, message by message, through a served Iris talking
to the wire-level Anthropic fake: the summary exchange, a kept tail that starts with a user turn
and alternates, then the current message exactly once — on the compacting turn, on the next one,
and after a restart (the log's marker must rebuild the same context)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iris_runtime.engine.compaction import SUMMARY_SYSTEM
from iris_runtime.engine.sessions import SUMMARY_HEADER
from iris_runtime.testing.fake_llm import FakeAnthropic, Reply, Text
from iris_runtime.testing.server import IrisServer

Start = Callable[..., IrisServer]
ACK = ("assistant", "Understood; I will continue from that summary.")
# About 4,000 tokens each by the engine's estimate (four characters a token).
BIG = 16_000


def big(tag: str) -> str:
    return f"{tag} " + "x" * (BIG - len(tag) - 1)


def tiny_model(data_dir: Path, context_window: int) -> None:
    """A model of our own with a small window, so a few messages fill it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "models.yaml").write_text(
        "models:\n"
        "  tiny-claude:\n"
        "    provider: anthropic\n"
        f"    context_window: {context_window}\n"
        "    max_output_tokens: 1024\n"
    )


def start(start_iris: Start, fake: FakeAnthropic, data_dir: Path, window: int) -> IrisServer:
    tiny_model(data_dir, window)
    return start_iris(
        data_dir,
        **fake.iris_env(),
        IRIS_MODEL="tiny-claude",
        IRIS_PROVIDER_MAX_RETRIES="0",
    )


def flatten(message: dict[str, Any]) -> tuple[str, str]:
    content = message["content"]
    if isinstance(content, str):
        return message["role"], content
    return message["role"], "".join(b.get("text", "") for b in content if b["type"] == "text")


def sent(fake: FakeAnthropic, index: int) -> list[tuple[str, str]]:
    return [flatten(m) for m in fake.requests[index]["body"]["messages"]]


def system_of(fake: FakeAnthropic, index: int) -> str:
    system = fake.requests[index]["body"].get("system", "")
    if isinstance(system, list):
        return "".join(block.get("text", "") for block in system)
    return str(system)


def say(iris: IrisServer, text: str) -> str:
    reply = iris.post("/sessions/c/message", json_body={"text": text})
    assert reply.status == 200, reply.body
    return str(reply.json()["text"])


def summary(text: str) -> tuple[str, str]:
    return ("user", f"{SUMMARY_HEADER}\n{text}")


def alternates(messages: list[tuple[str, str]]) -> bool:
    return all(a[0] != b[0] for a, b in itertools.pairwise(messages))


def test_nothing_kept_the_current_message_arrives_once_and_stays(
    start_iris: Start, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    # Budget for kept turns is 3,000 tokens: the last user turn (4,000) does not fit, so only the
    # summary and the current message remain.
    data_dir = tmp_path / "kept0"
    fake_anthropic.enqueue(
        Reply([Text("a1")]),
        Reply([Text("a2")]),
        Reply([Text("S-ONE")]),  # the summary of turns 1-2
        Reply([Text("a3")]),
        Reply([Text("a4")]),
        Reply([Text("a5")]),
    )
    iris = start(start_iris, fake_anthropic, data_dir, 12_000)
    u1, u2, u3 = big("one"), big("two"), big("three")
    assert [say(iris, u) for u in (u1, u2)] == ["a1", "a2"]
    assert say(iris, u3) == "a3"

    assert system_of(fake_anthropic, 2) == SUMMARY_SYSTEM
    assert "one" in sent(fake_anthropic, 2)[0][1] and "three" not in sent(fake_anthropic, 2)[0][1]
    after = [summary("S-ONE"), ACK]
    assert sent(fake_anthropic, 3) == [*after, ("user", u3)]

    assert say(iris, "four") == "a4"
    next_turn = sent(fake_anthropic, 4)
    assert next_turn == [*after, ("user", u3), ("assistant", "a3"), ("user", "four")]

    iris.restart()
    assert say(iris, "five") == "a5"
    assert sent(fake_anthropic, 5) == [*next_turn, ("assistant", "a4"), ("user", "five")]
    assert len(fake_anthropic.requests) == 6


def test_kept_turns_start_with_a_user_and_the_current_message_arrives_once(
    start_iris: Start, fake_anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    # Budget for kept turns is 4,003 tokens: the last exchange (4,001 + 1) fits and so would a1
    # (1) before it — but a tail must start with a user turn, so exactly u2, a2 are kept.
    data_dir = tmp_path / "kept2"
    fake_anthropic.enqueue(
        Reply([Text("a1")]),
        Reply([Text("a2")]),
        Reply([Text("S-ONE")]),
        Reply([Text("a3")]),
        Reply([Text("a4")]),
        Reply([Text("a5")]),
    )
    iris = start(start_iris, fake_anthropic, data_dir, 16_012)
    u1, u2, u3 = big("one"), big("two"), big("three")
    assert [say(iris, u) for u in (u1, u2, u3)] == ["a1", "a2", "a3"]

    assert system_of(fake_anthropic, 2) == SUMMARY_SYSTEM
    transcript = sent(fake_anthropic, 2)[0][1]
    assert "one" in transcript and "two" not in transcript
    compacted = [summary("S-ONE"), ACK, ("user", u2), ("assistant", "a2"), ("user", u3)]
    assert sent(fake_anthropic, 3) == compacted
    assert alternates(compacted)

    assert say(iris, "four") == "a4"
    next_turn = sent(fake_anthropic, 4)
    assert next_turn == [*compacted, ("assistant", "a3"), ("user", "four")]

    iris.restart()
    assert say(iris, "five") == "a5"
    assert sent(fake_anthropic, 5) == [*next_turn, ("assistant", "a4"), ("user", "five")]
    entries = iris.get("/sessions/c/history?all=1").json()["entries"]
    assert sum(e["type"] == "compaction" for e in entries) == 1
