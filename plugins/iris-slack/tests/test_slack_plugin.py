"""Registration: no tokens, no cost; both tokens, a transport; one token, a clear error."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from iris_slack.config import SlackConfig

from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError
from iris_runtime.plugins import PluginHost
from iris_runtime.testing.fake_slack import FakeSlack
from iris_runtime.testing.server import IrisServer, clean_environment, free_port, run_iris

PROBE = """
import sys
from iris_runtime.config import Settings
from iris_runtime.runtime import Runtime
runtime = Runtime.build(Settings.from_env())
runtime.start()
ids = [t.transport_id for t in runtime.engine.transports.all()]
shapes = [s.transport_id for s in runtime.engine.transports.shapes()]
runtime.stop()
loaded = sorted(m for m in sys.modules if m.startswith(("slack_sdk", "websocket", "iris_slack.")))
print(ids, "slack" in shapes, loaded)
"""


def test_without_tokens_nothing_is_registered_imported_or_started(tmp_path: Path) -> None:
    env = clean_environment(IRIS_DATA_DIR=str(tmp_path / "data"))
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    # Only the id shape is declared (a regex, so Slack ids are refused while Slack is off).
    modules = "['iris_slack.channel_ids', 'iris_slack.config', 'iris_slack.plugin']"
    assert done.stdout.strip() == f"['bridge'] True {modules}"
    assert "slack" not in done.stderr.replace("slack/events/", "")  # no log line at all


@pytest.mark.slow
def test_a_served_iris_without_tokens_says_nothing_about_slack(tmp_path: Path) -> None:
    iris = IrisServer(tmp_path / "data").start()
    try:
        assert iris.get("/health").status == 200
    finally:
        iris.stop()
    assert iris.log_path is not None
    logged = iris.log_path.read_text().replace("slack/events/", "")
    assert "transports=bridge" in logged and "slack" not in logged.lower()


def test_both_tokens_register_the_transport(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            "IRIS_DATA_DIR": str(tmp_path),
            "IRIS_SLACK_APP_TOKEN": "xapp-1",
            "IRIS_SLACK_BOT_TOKEN": "xoxb-1",
        }
    )
    host = PluginHost(settings)
    assert "slack" in {p.name for p in host.plugins()}
    factories = host.transports()
    assert len(factories) == 2 and sum(f.fallback for f in factories) == 1  # slack + bridge


@pytest.mark.parametrize("present", ["IRIS_SLACK_APP_TOKEN", "IRIS_SLACK_BOT_TOKEN"])
def test_one_token_without_the_other_is_a_configuration_error(present: str) -> None:
    with pytest.raises(ConfigError, match="needs both"):
        SlackConfig.from_env({present: "x-1"})


def test_iris_serve_refuses_half_a_configuration(tmp_path: Path) -> None:
    env = clean_environment(
        IRIS_DATA_DIR=str(tmp_path),
        IRIS_API_PORT=str(free_port()),
        IRIS_SLACK_BOT_TOKEN="xoxb-secret-1",  # noqa: S106 (a made-up token)
    )
    done = run_iris("serve", env=env, timeout=60)
    assert done.returncode != 0
    assert "IRIS_SLACK_APP_TOKEN" in done.stdout + done.stderr
    assert "xoxb-secret-1" not in done.stdout + done.stderr


def test_tokens_can_come_from_files_and_never_show_in_repr(tmp_path: Path) -> None:
    (tmp_path / "app").write_text("xapp-from-file\n")
    (tmp_path / "bot").write_text("xoxb-from-file\n")
    config = SlackConfig.from_env(
        {
            "IRIS_SLACK_APP_TOKEN_FILE": str(tmp_path / "app"),
            "IRIS_SLACK_BOT_TOKEN_FILE": str(tmp_path / "bot"),
            "IRIS_SLACK_API_URL": "http://127.0.0.1:9/api",
        }
    )
    assert config is not None
    assert (config.app_token, config.bot_token) == ("xapp-from-file", "xoxb-from-file")
    assert config.api_url == "http://127.0.0.1:9/api/"
    assert "from-file" not in repr(config)
    assert config.file_hosts == {"files.slack.com", "127.0.0.1:9"}
    with pytest.raises(ConfigError, match="cannot read"):
        SlackConfig.from_env({"IRIS_SLACK_BOT_TOKEN_FILE": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="http"):
        SlackConfig.from_env(
            {
                "IRIS_SLACK_APP_TOKEN": "a",
                "IRIS_SLACK_BOT_TOKEN": "b",
                "IRIS_SLACK_API_URL": "file:///etc/passwd",
            }
        )


@pytest.mark.slow
def test_the_shipped_fixtures_drive_a_served_iris(
    fake_slack: FakeSlack, start_iris: Callable[..., IrisServer]
) -> None:
    """The example of docs/slack.md, as a plugin author would write it."""
    start_iris(**fake_slack.iris_env())
    fake_slack.wait_connected()
    ts = fake_slack.mention("CGENERAL1", "hello")
    [reply] = fake_slack.wait_for(
        lambda f: [m for m in f.thread("CGENERAL1", ts) if "You said: hello" in m.current_text],
        "a reply in the thread",
    )
    assert reply.text == "_Thinking…_" and reply.thread_ts == ts
