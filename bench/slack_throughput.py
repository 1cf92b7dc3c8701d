"""Messages per second through the Slack transport, and the edit rate under a burst.

A served Iris (offline provider) with the Slack plugin talks to the wire-level fake Slack
(``iris_runtime.testing.fake_slack``) through the real ``slack_sdk``: Socket Mode in, Web API
out. ``messages_per_s``: ``--messages`` mentions, one per channel, sent at once; done when the
last reply has replaced its placeholder (times taken by the fake as it receives the calls).
Reference, same run and fake: a bare ``slack_sdk`` client on 8 threads making the two calls
one reply takes (``chat.postMessage`` then ``chat.update``). It is a point of comparison, not
a lower bound: it skips Socket Mode, the engine, the channel log and the edit pacing, and a
served Iris uses more threads, so the ratio can land on either side of 1.
``burst_edit_rate_per_s``: ``--bursts`` bursts of 6 mentions (one running, five queued) into a
single channel; edits per second of that channel over the bursts (informational).
``burst_min_edit_gap_ms`` is the shortest gap between two of its edits as the fake received
them; the verdict is on it: Slack must never see two edits of a channel closer than 1000 ms.
"""

from __future__ import annotations

import itertools
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from _cli import bench_parser, run_main
from _figures import emit
from _servers import running_iris, temp_workdir
from slack_sdk import WebClient

from iris_runtime.testing.fake_slack import FakeSlack

BENCH = "slack_throughput"
REPLY_MARK = "No language model is configured"
THROTTLE_PER_S = 1.0
MIN_EDIT_GAP_MS = 1000.0
BURST = 6


def answered(fake: FakeSlack, channel: str, ts: str) -> float | None:
    """When the reply to ``ts`` replaced its placeholder (fake's clock), or None if not yet."""
    for message in fake.thread(channel, ts):
        if message.bot and REPLY_MARK in message.current_text:
            return message.edits[-1].at if message.edits else message.at
    return None


def wait_all(fake: FakeSlack, sent: list[tuple[str, str]], timeout: float) -> list[float]:
    def done(f: FakeSlack) -> list[float]:
        times = [answered(f, channel, ts) for channel, ts in sent]
        return [t for t in times if t is not None] if all(times) else []

    return fake.wait_for(done, f"{len(sent)} replies", timeout)


def baseline_rate(fake: FakeSlack, messages: int) -> float:
    client = WebClient(token=fake.bot_token, base_url=fake.api_url)

    def one_reply(number: int) -> None:
        posted = client.chat_postMessage(channel="CGENERAL1", text="_Thinking…_")
        client.chat_update(channel="CGENERAL1", ts=posted["ts"], text=f"reply {number}")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one_reply, range(8)))  # warm-up
        started = time.monotonic()
        list(pool.map(one_reply, range(messages)))
        return messages / (time.monotonic() - started)


def main() -> int:
    parser = bench_parser(__doc__)  # accepted for run_all; this bench has no timed load phase
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--bursts", type=int, default=3)
    args = parser.parse_args()
    channels = [f"CBENCH{i:05d}" for i in range(args.messages)]
    with temp_workdir() as workdir, FakeSlack(echo_bot_messages=False) as fake:
        for channel in [*channels, "CWARM0001", "CBURST001"]:
            fake.add_channel(channel, channel.lower())
        with running_iris(workdir, extra_env=fake.iris_env()):
            fake.wait_connected(60)
            wait_all(fake, [("CWARM0001", fake.mention("CWARM0001", "warm up"))], 60)

            started = time.monotonic()
            sent = [(channel, fake.mention(channel, f"ping {channel}")) for channel in channels]
            finished = max(wait_all(fake, sent, 300))
            rate = args.messages / (finished - started)

            for burst in range(args.bursts):
                mentions = [fake.mention("CBURST001", f"burst {burst}.{i}") for i in range(BURST)]
                wait_all(fake, [("CBURST001", ts) for ts in mentions], 120)
        edits = sorted(
            c.at for c in fake.calls("chat.update") if c.ok and c.params["channel"] == "CBURST001"
        )
        base = baseline_rate(fake, args.messages)
    gaps = [b - a for a, b in itertools.pairwise(edits)]
    edit_rate = (len(edits) - 1) / (edits[-1] - edits[0]) if len(edits) > 1 else 0.0
    min_gap_ms = min(gaps) * 1000 if gaps else float("nan")
    emit(BENCH, "messages_per_s", rate, "msg/s", base)
    emit(BENCH, "burst_edits", len(edits), "edits")
    emit(
        BENCH,
        "burst_edit_rate_per_s",
        edit_rate,
        "edits/s",
        THROTTLE_PER_S,
    )
    emit(
        BENCH,
        "burst_min_edit_gap_ms",
        min_gap_ms,
        "ms",
        MIN_EDIT_GAP_MS,
    )
    verdict = "met" if gaps and min_gap_ms >= MIN_EDIT_GAP_MS else "MISSED"
    print(
        f"target min edit gap >= {MIN_EDIT_GAP_MS:.0f} ms per channel: {verdict}", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)
