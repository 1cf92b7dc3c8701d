"""Telegram transport throughput and edit rate, against the fake Bot API (offline provider).

A served Iris (``iris serve``, the ``iris-telegram`` plugin installed) polls a wire-level fake of
the Bot API (``iris_runtime.testing.fake_telegram``) running in this process; the real client
code does every call (``getUpdates``, ``sendChatAction``, the placeholder ``sendMessage``, the
final ``editMessageText``).

* ``messages_per_s``: ``--messages`` messages, one per chat, arrive at once; the figure is
  messages / (first arrival → last final reply, as recorded by the fake). Baseline: the same
  number of messages through the same server's internal API (``POST /sessions/<id>/message``,
  one session each, 16 clients), i.e. the engine and provider without the platform. Phases run
  api, telegram, telegram, api after a warm-up of each.
* ``burst_edit_rate_per_s``: ``--burst-chats`` chats each get six messages at once (one runs,
  five wait: the queue limit), so every chat's runs end back to back and each final reply is an
  edit. The figure is the highest edit rate seen in one chat ((edits - 1) / their span); the
  baseline is the throttle's allowance, one edit per second per chat. Target: ratio <= 1.
* ``burst_min_edit_gap_s``: the shortest time between two edits arriving in one chat during the
  burst; baseline: the throttle interval (1 s). Target: ratio >= 1 (the transport counts the
  interval from the previous edit's answer, so network delays cannot shorten it).
* ``markup_worst_kb_per_s``: Markdown → Telegram HTML over 100 KB single-line inputs that used to
  be quadratic (openers without closers: ``_a``, ``**a``, minified JSON with ``_id`` keys), with
  the long-line cap lifted so the span matcher itself is measured; the figure is the slowest
  input's throughput, the baseline plain prose of the same size. Target: ratio >= 0.1 (linear).

The exit status is 1 when a target is MISSED.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

import itertools

from _cli import bench_parser, run_main
from _figures import emit
from _load import LoadResult, Request, drive_clients, split_evenly
from _servers import Server, log_tail, running_iris, temp_workdir

from iris_runtime.testing.fake_telegram import BotMessage, FakeTelegram

BENCH = "telegram_throughput"
REPLY_PREFIX = "No language model is configured"
EDIT_INTERVAL_S = 1.0  # the transport's default throttle
QUEUE = 6  # one running + five waiting


def _finished(messages: list[BotMessage], count: int) -> list[BotMessage] | None:
    done = [m for m in messages if m.text.startswith(REPLY_PREFIX)]
    return done if len(done) >= count else None


def telegram_phase(fake: FakeTelegram, first_chat: int, count: int, timeout: float) -> float:
    """Seconds from the first message's arrival to the last final reply (fake's clock)."""
    chats = list(range(first_chat, first_chat + count))
    started = time.monotonic()
    for chat in chats:
        fake.user_says(chat, f"ping {chat}")
    pending = set(chats)

    def all_done(f: FakeTelegram) -> bool:
        for chat in list(pending):
            if _finished(f.bot_messages(chat), 1):
                pending.discard(chat)
        return not pending

    fake.wait_for(all_done, f"{count} replies", timeout)
    last = max(m.edits[-1].at for chat in chats for m in fake.bot_messages(chat) if m.edits)
    return last - started


def api_phase(server: Server, count: int, tag: str, clients: int = 16) -> LoadResult:
    headers = {"Authorization": f"Bearer {server.token}"}
    per_client = split_evenly(count, clients)

    def request_for(index: int) -> Request:
        sequence = iter(range(10**9))

        def one(http: requests.Session) -> tuple[float, str | None]:
            url = f"{server.base_url}/sessions/bench-{tag}-{index}-{next(sequence)}/message"
            start = time.perf_counter()
            response = http.post(url, json={"text": "ping"}, headers=headers, timeout=60)
            problem = None if response.status_code == 200 else f"HTTP {response.status_code}"
            return (time.perf_counter() - start) * 1000.0, problem

        return one

    return drive_clients(request_for, clients=clients, per_client=per_client, name="api-client")


def burst_phase(
    fake: FakeTelegram, first_chat: int, chats: int, timeout: float
) -> tuple[float, float, int]:
    """(highest per-chat edit rate, shortest gap between edits in a chat, edits seen)."""
    ids = list(range(first_chat, first_chat + chats))
    for _ in range(QUEUE):
        for chat in ids:
            fake.user_says(chat, "burst")
    fake.wait_for(
        lambda f: all(_finished(f.bot_messages(c), QUEUE) for c in ids),
        f"{QUEUE} replies in each of {chats} chats",
        timeout,
    )
    rates: list[float] = []
    gaps: list[float] = []
    edits = 0
    for chat in ids:
        times = sorted(e.at for m in fake.bot_messages(chat) for e in m.edits)
        edits += len(times)
        if len(times) >= 2:
            span = times[-1] - times[0]
            rates.append((len(times) - 1) / span if span > 0 else float("inf"))
            gaps.extend(b - a for a, b in itertools.pairwise(times))
    # A burst in which no chat saw two edits measured nothing: report it as missed, not crash.
    return (max(rates) if rates else float("inf")), (min(gaps) if gaps else 0.0), edits


def markup_phase(size: int = 100_000) -> tuple[float, float]:
    """(KB/s of the slowest pathological input, KB/s of plain prose), long-line cap lifted."""
    markup: Any = importlib.import_module("iris_telegram.markup")
    cases = {
        "prose": "hello world, this is a reply. " * (size // 30),
        "italic_openers": "_a " * (size // 3),
        "bold_openers": "**a " * (size // 4),
        "json_ids": '{"_id":1,"name":"x"},' * (size // 21),
    }
    saved, markup.MAX_FORMATTED_LINE = markup.MAX_FORMATTED_LINE, 10**9
    try:
        rates: dict[str, float] = {}
        for name, text in cases.items():
            start = time.perf_counter()
            markup.html_chunks(text)
            rates[name] = len(text) / 1024 / max(time.perf_counter() - start, 1e-6)
    finally:
        markup.MAX_FORMATTED_LINE = saved
    prose = rates.pop("prose")
    return min(rates.values()), prose


def main() -> int:
    parser = bench_parser(__doc__, default_seconds=0.0)  # no timed phases; accepted for run_all
    parser.add_argument("--messages", type=int, default=200, help="messages per phase [200]")
    parser.add_argument("--burst-chats", type=int, default=10, help="chats in the burst [10]")
    parser.add_argument("--timeout", type=float, default=300.0, help="per phase [300 s]")
    args = parser.parse_args()
    if args.messages < 16 or args.burst_chats < 1:
        parser.error("need --messages >= 16 and --burst-chats >= 1")

    telegram_s: list[float] = []
    api = LoadResult()
    with temp_workdir() as workdir, FakeTelegram() as fake:
        env = {
            "TELEGRAM_BOT_TOKEN": fake.token,
            "IRIS_TELEGRAM_API_URL": fake.api_url,
            "IRIS_TELEGRAM_ALLOWED_USERS": "*",
        }
        with running_iris(workdir, extra_env=env) as server:
            try:
                fake.wait_for(lambda f: f.calls_of("getUpdates"), "Iris polling the fake", 30)
            except AssertionError:
                print(
                    "Iris never polled the fake Bot API: is iris-telegram installed "
                    f"(pip install -e plugins/iris-telegram)?\n{log_tail(server.process)}",
                    file=sys.stderr,
                )
                return 1
            warm = args.messages // 4
            telegram_phase(fake, 1_000_000, warm, args.timeout)
            api_phase(server, warm, "warmup")
            next_chat = 2_000_000
            for phase, kind in enumerate(("api", "telegram", "telegram", "api")):
                if kind == "api":
                    result = api_phase(server, args.messages, f"p{phase}")
                    if result.errors:
                        print(f"api errors (first 3): {result.errors[:3]}", file=sys.stderr)
                        return 1
                    api.add(result)
                else:
                    telegram_s.append(telegram_phase(fake, next_chat, args.messages, args.timeout))
                    next_chat += args.messages
            rate, gap, edits = burst_phase(fake, 3_000_000, args.burst_chats, args.timeout)
        if fake.errors:
            print(f"the fake failed: {fake.errors[:1]}", file=sys.stderr)
            return 1

    tg_rate = 2 * args.messages / sum(telegram_s)
    api_rate = api.requests_per_s
    print(
        f"telegram: {2 * args.messages} messages in {sum(telegram_s):.2f} s; "
        f"api: {len(api.latencies_ms)} in {api.elapsed_s:.2f} s; burst: {edits} edits",
        file=sys.stderr,
    )
    emit(BENCH, "messages_per_s", tg_rate, "msg/s", api_rate)
    limit = 1.0 / EDIT_INTERVAL_S
    emit(BENCH, "burst_edit_rate_per_s", rate, "edits/s", limit)
    emit(BENCH, "burst_min_edit_gap_s", gap, "s", EDIT_INTERVAL_S)
    within = rate <= limit * 1.005 and gap >= EDIT_INTERVAL_S * 0.995  # timer granularity
    print(f"target edits within the throttle: {'met' if within else 'MISSED'}", file=sys.stderr)
    worst, prose = markup_phase()
    emit(BENCH, "markup_worst_kb_per_s", worst, "KB/s", prose)
    linear = worst >= 0.1 * prose
    print(f"target markup linear: {'met' if linear else 'MISSED'}", file=sys.stderr)
    return 0 if within and linear else 1


if __name__ == "__main__":
    run_main(BENCH, main)
