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


@pytest.mark.slow
def test_plugins_start_before_the_transports(tmp_path: Path) -> None:
    log = tmp_path / "probe-log.jsonl"
    python_path = os.pathsep.join([str(FIXTURE_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
    server = IrisServer(
        tmp_path / "data",
        env={"PYTHONPATH": python_path, "IRIS_LOAD_PLUGINS": "probe", "IRIS_PROBE_LOG": str(log)},
    )
    try:
        server.start(timeout=60.0)
    finally:
        server.stop()
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    started = [line for line in lines if line["hook"] == "engine_started"]
    assert started == [{"hook": "engine_started", "transports_started": False}]
