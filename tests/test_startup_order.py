"""Start-up order, through a served Iris and the probe plugin: plugins add their routers and tools
(``engine_started``) before any transport starts taking messages, so a message waiting at start-up
(a chat's backlog after a restart) finds every route in place."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from iris_runtime.testing.server import IrisServer
from tests.test_hook_docs import FIXTURE_DIR

PROBES = ("probe", "PROBE")  # the probe plugin declares channel ids of transport "probe"


@pytest.mark.slow
def test_plugins_start_before_the_transports_and_their_folders_are_reserved(tmp_path: Path) -> None:
    log = tmp_path / "probe-log.jsonl"
    python_path = os.pathsep.join([str(FIXTURE_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
    server = IrisServer(
        tmp_path / "data",
        env={"PYTHONPATH": python_path, "IRIS_LOAD_PLUGINS": "probe", "IRIS_PROBE_LOG": str(log)},
    )
    try:
        server.start(timeout=60.0)
        # A third-party transport's <id>/events/ folder is never a channel's, in any case.
        refused = [server.post(f"/channels/{c}/events", json_body={"text": "x"}) for c in PROBES]
    finally:
        server.stop()
    assert [(r.status, r.json()["code"]) for r in refused] == [(400, "invalid_channel_id")] * 2
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    started = [line for line in lines if line["hook"] == "engine_started"]
    assert started == [{"hook": "engine_started", "transports_started": False}]
