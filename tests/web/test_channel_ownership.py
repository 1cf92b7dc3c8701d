"""Channels nobody serves are refused, never silently taken by the bridge catch-all.

A channel id shaped like a transport's (``tg-…``, Slack's ``C…``/``D…``/``G…`` ids, ``WEBUI-…``)
belongs to that transport even while it is off: the API answers ``409 transport_not_running``
then, and ``404 no_such_channel`` for an id that has the shape's prefix but is not a valid id of
that transport (Telegram chat ids are integers). Event files get the same reason in ``.error``.
Every served Iris here loads the Slack, Telegram and Web UI plugins without their credentials.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from iris_runtime.data_layout import TOP_LEVEL
from iris_runtime.testing.server import IrisServer
from tests.bridge.fault_tools import wait_for
from tests.web.test_openapi import SPEC_PATH, assert_documented


class Refusal(NamedTuple):
    channel: str
    status: int
    code: str
    transport: str  # the transport the error must name


REFUSED = [
    ("tg-ops", 404, "no_such_channel", "telegram"),
    ("tg-notachat", 404, "no_such_channel", "telegram"),
    ("tg-0", 404, "no_such_channel", "telegram"),
    ("tg-123456", 409, "transport_not_running", "telegram"),
    ("tg--1001234", 409, "transport_not_running", "telegram"),
    ("C0123ABCD", 409, "transport_not_running", "slack"),
    ("D0123ABCD", 409, "transport_not_running", "slack"),
    ("G0123ABCD", 409, "transport_not_running", "slack"),
    ("WEBUI-abc", 409, "transport_not_running", "webui"),
    ("WEBUI-a.b", 404, "no_such_channel", "webui"),
    ("TG-1", 404, "no_such_channel", "telegram"),  # a prefix in another case is still claimed
    ("webui-abc", 404, "no_such_channel", "webui"),
]
# Channels that are nobody's shape stay with the bridge, as before.
BRIDGED = ["SESSION-own-1", "BRIDGE-ops", "ops", "C1", "GENERAL", "c3po"]


@pytest.fixture(params=REFUSED, ids=[refusal[0] for refusal in REFUSED])
def refusal(request: pytest.FixtureRequest) -> Refusal:
    """Each refused channel, for each way of addressing it (the request differs per test)."""
    return Refusal(*request.param)


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    import yaml

    loaded = yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def assert_refused(body: dict[str, Any], channel: str, code: str, transport: str) -> None:
    assert set(body) == {"error", "code"}, body
    assert body["code"] == code
    assert transport in body["error"] and channel in body["error"], body["error"]


def assert_nothing_written(server: IrisServer, channel: str) -> None:
    assert not (server.data_dir / channel).exists(), f"{channel}/ was created"


def test_an_escalation_to_a_channel_nobody_serves_is_refused(
    spec: dict[str, Any], shared_iris_server: IrisServer, refusal: Refusal
) -> None:
    channel, status, code, transport = refusal
    reply = shared_iris_server.post(
        "/escalate", json_body={"text": "disk full", "channel": channel}
    )
    body = assert_documented(spec, "POST", "/escalate", reply, status)
    assert_refused(body, channel, code, transport)
    assert_nothing_written(shared_iris_server, channel)


def test_a_channel_event_for_a_channel_nobody_serves_is_refused(
    spec: dict[str, Any], shared_iris_server: IrisServer, refusal: Refusal
) -> None:
    channel, status, code, transport = refusal
    reply = shared_iris_server.post(f"/channels/{channel}/events", json_body={"text": "wake up"})
    body = assert_documented(spec, "POST", "/channels/{channel_id}/events", reply, status)
    assert_refused(body, channel, code, transport)
    time.sleep(0.2)  # a wrongly accepted event would have started its run by now
    assert_nothing_written(shared_iris_server, channel)


def test_an_api_event_for_a_channel_nobody_serves_is_refused(
    spec: dict[str, Any], shared_iris_server: IrisServer, refusal: Refusal
) -> None:
    channel, status, code, transport = refusal
    name = "refused-" + channel.replace(".", "-").lower()
    body = {"name": name, "type": "immediate", "channelId": channel, "text": "wake up"}
    reply = shared_iris_server.post("/events", json_body=body)
    answer = assert_documented(spec, "POST", "/events", reply, status)
    assert_refused(answer, channel, code, transport)
    assert not (shared_iris_server.data_dir / "events" / f"{name}.json").exists()
    assert_nothing_written(shared_iris_server, channel)


def test_an_event_file_for_a_channel_nobody_serves_gets_its_reason(
    shared_iris_server: IrisServer,
) -> None:
    events = shared_iris_server.data_dir / "events"
    written: dict[str, tuple[Path, str, str]] = {}
    for number, (channel, status, _, transport) in enumerate(REFUSED):
        name = f"file-{number}-" + channel.replace(".", "-").lower()
        path = events / f"{name}.json"
        tmp = events / f".{name}.tmp"
        tmp.write_text(json.dumps({"type": "immediate", "channelId": channel, "text": "x"}))
        tmp.rename(path)
        reason = "not running" if status == 409 else "not a valid"
        written[channel] = (path, transport, reason)
    for channel, (path, transport, reason) in written.items():
        error = path.with_name(path.name + ".error")
        wait_for(error.exists, 15, error.name)
        text = error.read_text()
        assert transport in text and channel in text and reason in text, text
        assert path.exists(), "a refused event file stays, next to its reason"
        assert_nothing_written(shared_iris_server, channel)


@pytest.mark.parametrize("channel", BRIDGED)
def test_channels_of_no_transport_shape_still_go_to_the_bridge(
    spec: dict[str, Any], shared_iris_server: IrisServer, channel: str
) -> None:
    reply = shared_iris_server.post("/escalate", json_body={"text": "help", "channel": channel})
    body = assert_documented(spec, "POST", "/escalate", reply, 202)
    assert body["transport"] == "bridge"
    event = shared_iris_server.post(f"/channels/{channel}/events", json_body={"text": "hi"})
    accepted = assert_documented(spec, "POST", "/channels/{channel_id}/events", event, 202)
    assert accepted == {"accepted": True, "transport": "bridge"}


# -- channel ids never alias Iris's own files and folders ------------------------------------------

# The names issue 15 found missing; every name of iris_runtime.data_layout is tested as well.
RESERVED_NAMES = [
    "agents",
    "agents.d",
    "agents.json",
    "audit",
    "channels.json",
    "CONSTITUTION.md",
    "MEMORY.md",
    "run",
    "skills",
    "slack",
    "state.db",
    "state.db-wal",
    "state.db-shm",
    "telegram",
    "webui",
]
# The layout is case-sensitive on Linux, but not on every filesystem a data dir may live on.
CASE_VARIANTS = ["AGENTS", "constitution.md", "Memory.md", "Events", "WebUI", "STATE.DB"]


@pytest.mark.parametrize("name", sorted({*RESERVED_NAMES, *TOP_LEVEL}) + CASE_VARIANTS)
def test_a_reserved_name_is_refused_as_a_channel(
    spec: dict[str, Any], shared_iris_server: IrisServer, name: str
) -> None:
    event = shared_iris_server.post(f"/channels/{name}/events", json_body={"text": "x"})
    body = assert_documented(spec, "POST", "/channels/{channel_id}/events", event, 400)
    assert body["code"] == "invalid_channel_id" and "reserved" in body["error"]
    escalation = shared_iris_server.post("/escalate", json_body={"text": "x", "channel": name})
    body = assert_documented(spec, "POST", "/escalate", escalation, 400)
    assert body["code"] == "invalid_channel_id" and "reserved" in body["error"]
    time.sleep(0.1)
    entry = shared_iris_server.data_dir / name
    assert not (entry / "log.jsonl").exists(), f"a channel log was written into {name}"
