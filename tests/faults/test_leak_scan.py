"""No planted secret anywhere it should not be, across a whole system that was used and crashed.

One served Iris on the Vault backend (a real OpenBao), the Anthropic API, Slack and Telegram
(wire-level fakes), and a sub-agent with its own bridge token that reads an allow-listed secret
through Iris's broker. Every credential is a known value: the LLM key, the Slack and Telegram
tokens, the Vault token, Iris's API token, the sub-agent's token and the stored secret's value.
The system is used through every entry point, Iris is SIGKILLed in the middle of a delegated run
and restarted, and the reply is fetched with ``iris bridge recover``. Meanwhile every process's
command line is sampled; afterwards every file the test's processes wrote is read. Only the
0600 token files may hold a token; nothing else may hold any of them.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from iris_runtime.testing.fake_llm import FakeAnthropic
from iris_runtime.testing.fake_slack import FakeSlack
from iris_runtime.testing.fake_telegram import FakeTelegram
from iris_runtime.testing.leaks import CommandLineSampler, private_file, scan_files
from iris_runtime.testing.openbao import OpenBaoDev
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris
from iris_runtime.testing.subagent import SubAgent, SubAgents, register
from tests.bridge.fault_tools import Background, kill_hard, log_entries, wait_for

SECRET = "WEATHER_API_KEY"
USER = 1001  # the fake Telegram's default sender
# The one file that exists to hold a token here, readable by its owner only: Iris's registry of
# agents holds each agent's token (the others come in through the environment).
TOKEN_FILES = private_file(["agents.json"], ["the sub-agent's bridge token"])


def _hex(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


@pytest.fixture
def fakes() -> Iterator[tuple[FakeAnthropic, FakeTelegram, FakeSlack]]:
    llm = FakeAnthropic(api_key=_hex("sk-ant-canary-"))
    slack = FakeSlack(bot_token=_hex("xoxb-canary-"), app_token=_hex("xapp-canary-"))
    with llm, FakeTelegram() as telegram, slack:
        yield llm, telegram, slack


def _own_folders(folder: Path) -> dict[str, str]:
    """HOME and TMPDIR inside the scanned folder: whatever a process writes there is read."""
    for name in ("home", "tmp"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    return {"HOME": str(folder / "home"), "TMPDIR": str(folder / "tmp")}


def _serve_iris(
    start_iris: Callable[..., IrisServer],
    folder: Path,
    fakes: tuple[FakeAnthropic, FakeTelegram, FakeSlack],
    vault_env: dict[str, str],
) -> IrisServer:
    llm, telegram, slack = fakes
    return start_iris(
        folder / "iris",
        **_own_folders(folder / "iris-files"),
        **llm.iris_env(),
        TELEGRAM_BOT_TOKEN=telegram.token,
        IRIS_TELEGRAM_API_URL=telegram.api_url,
        IRIS_TELEGRAM_POLL_TIMEOUT_S="2",
        IRIS_TELEGRAM_ALLOWED_USERS=str(USER),
        **slack.iris_env(),
        **vault_env,
    )


def _weather_agent(agents: SubAgents, iris: IrisServer, folder: Path) -> SubAgent:
    """A sub-agent whose scripted model reads its secret (hashing it, never printing it) and,
    when asked for a slow job, takes long enough to be crashed in the middle of."""
    get_secret = Path(sys.executable).parent / "get-secret"
    command = f"{get_secret} --no-newline {SECRET} | sha256sum > {folder / 'secret.sha'}"
    rules = [
        {
            "when": "read the key",
            "turns": [[{"tool": "bash", "args": {"command": command}}], [{"text": "read"}]],
        },
        {"when": "slow job", "turns": [[{"thinking": "working"}, {"sleep": 4}, {"text": "late"}]]},
    ]
    return agents.start(
        "weather",
        rules,
        token=_hex("bridge-canary-"),
        **_own_folders(folder / "agent-files"),
        IRIS_SECRETS_MODE="store",
        IRIS_SECRET_BROKER_URL=iris.url,
    )


def _use_every_entry_point(
    iris: IrisServer, agent: SubAgent, fakes: tuple[FakeAnthropic, FakeTelegram, FakeSlack]
) -> None:
    _, telegram, slack = fakes
    reply = iris.post("/sessions/leak/message", json_body={"text": "@weather read the key"})
    assert reply.status == 200 and reply.json()["text"] == "read", reply.body
    assert iris.post("/sessions/leak/message", json_body={"text": "hello"}).status == 200
    update = telegram.user_says(7001, "hello from telegram", user_id=USER)
    asked = update["message"]["message_id"]
    telegram.wait_for(
        lambda fake: any(m.reply_to == asked for m in fake.bot_messages(7001)), "a reply", 30
    )
    slack.wait_connected(30)
    channel = slack.add_channel("CLEAK0001", "leaks").id
    slack.mention(channel, "hello from slack")
    slack.wait_for(lambda fake: fake.bot_messages(channel), "a Slack reply", 30)


def _crash_mid_delegation_and_recover(iris: IrisServer, agent: SubAgent) -> None:
    """SIGKILL Iris while the sub-agent works, start it again, fetch the reply by hand."""
    pending = Background(
        lambda: iris.post("/sessions/crash/message", json_body={"text": "@weather slow job"})
    )
    marker = wait_for(
        lambda: next(
            (e for e in log_entries(iris, "crash") if e.get("type") == "bridge_call"), None
        ),
        30,
        "the bridge_call marker",
    )
    # The marker is logged before the call: kill once the sub-agent really has the job.
    job = agent.server.data_dir / "bridge-jobs" / f"{marker['requestId']}.jsonl"
    wait_for(job.exists, 30, "the sub-agent's job log")
    kill_hard(iris)
    with contextlib.suppress(OSError, http.client.HTTPException, AssertionError):
        pending.join(30)
    iris.start()
    env = clean_environment(IRIS_DATA_DIR=str(iris.data_dir))
    deadline = time.monotonic() + 60
    while True:
        done = run_iris("bridge", "recover", "weather", marker["requestId"], env=env, timeout=60)
        if done.returncode != 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert done.returncode == 0 and "late" in done.stdout, (done.stdout, done.stderr)


def test_no_planted_secret_is_anywhere_it_should_not_be(
    tmp_path: Path,
    start_iris: Callable[..., IrisServer],
    fakes: tuple[FakeAnthropic, FakeTelegram, FakeSlack],
    openbao: OpenBaoDev,
    vault_env: dict[str, str],
) -> None:
    llm, telegram, slack = fakes
    stored = _hex("stored-canary-")
    agents = SubAgents(tmp_path / "agents")
    (tmp_path / "agents").mkdir()
    with CommandLineSampler() as sampler:
        try:
            iris = _serve_iris(start_iris, tmp_path, fakes, vault_env)
            put = iris.request("PUT", f"/secrets/{SECRET}", json_body={"value": stored})
            assert put.status == 200, put.body
            agent = _weather_agent(agents, iris, tmp_path)
            register(iris, "weather", agent.bridge_url, "--secret", SECRET, token=agent.token)
            _use_every_entry_point(iris, agent, fakes)
            _crash_mid_delegation_and_recover(iris, agent)
        finally:
            agents.stop_all()
            # start_iris stops Iris at teardown; stop it now so its last words are on disk.
            with contextlib.suppress(NameError):
                iris.stop()
    canaries = {
        "the LLM API key": llm.api_key,
        "the Telegram bot token": telegram.token,
        "the Slack bot token": slack.bot_token,
        "the Slack app token": slack.app_token,
        "the Vault token": openbao.root_token,
        "Iris's API token": iris.token,
        "the sub-agent's bridge token": agent.token,
        "the stored secret's value": stored,
    }
    # The secret really went through: the agent hashed what the broker gave it.
    digest = hashlib.sha256(stored.encode()).hexdigest()
    assert (tmp_path / "secret.sha").read_text().split()[0] == digest
    audit = (iris.data_dir / "audit" / "secrets.jsonl").read_text()
    assert '"weather"' in audit.replace('":"', '": "') or "weather" in audit
    # The scan can find a canary: the registry holds the agent's token (and is allowed to).
    unallowed = scan_files(iris.data_dir, {"the sub-agent's bridge token": agent.token})
    assert [leak.where for leak in unallowed] == [str(iris.data_dir / "agents.json")]

    leaks = scan_files(tmp_path, canaries, [TOKEN_FILES]) + sampler.leaks(canaries)
    assert sampler.rounds > 10 and len(sampler.seen) > 5  # the sampler really watched
    assert not leaks, "\n".join(map(str, leaks))
    print(json.dumps({"leak_scan": {"canaries": len(canaries), "leaks": len(leaks)}}))
