"""The headless bridge transport shows an already-logged message (a sub-agent's announce) by
doing nothing more: for an API session the log is the delivery. It must not log it twice."""

from __future__ import annotations

from pathlib import Path

from iris_runtime.bridge.transport import BridgeTransport
from iris_runtime.config import Settings
from iris_runtime.engine.transport import LoggedMessagePoster
from iris_runtime.runtime import Runtime


def test_show_logged_message_names_the_message_and_logs_nothing(tmp_path: Path) -> None:
    settings = Settings.from_env({"IRIS_DATA_DIR": str(tmp_path), "IRIS_LOAD_PLUGINS": ""})
    runtime = Runtime.build(settings)
    runtime.start()
    try:
        channel = "SESSION-announce"
        bridge = runtime.engine.transports.owner(channel)
        assert isinstance(bridge, BridgeTransport) and isinstance(bridge, LoggedMessagePoster)
        # What the engine does before asking a transport to show an announce:
        runtime.engine.sessions.append_message(
            channel,
            "assistant",
            "Status: success",
            announce="k1",
            posted=True,
            agent="subagent:main",
        )
        first = bridge.show_logged_message(channel, "Status: success", None)
        second = bridge.show_logged_message(channel, "Status: success", "thread")
        assert first and second and first != second
        [entry] = runtime.engine.sessions.entries(channel)
        assert (entry["role"], entry["text"], entry["announce"]) == (
            "assistant",
            "Status: success",
            "k1",
        )
    finally:
        runtime.stop()
