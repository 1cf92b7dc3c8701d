"""The ``/events`` routes in process, through Flask's test client: for a race a served Iris
cannot stage on demand (an immediate event consumed before the response to its POST is built)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from iris_runtime.config import Settings
from iris_runtime.events import catalog
from iris_runtime.events.files import EventSpec, Folder
from iris_runtime.runtime import Runtime
from iris_runtime.web.api import events as events_api
from iris_runtime.web.app import create_api_app

TOKEN = "t" * 40
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[FlaskClient]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": []}))
    settings = Settings.from_env(
        {
            "IRIS_DATA_DIR": str(tmp_path / "data"),
            "IRIS_PROVIDER": "scripted",
            "IRIS_SCRIPT_FILE": str(script),
            "IRIS_LOAD_PLUGINS": "scripted",
            "IRIS_API_TOKEN": TOKEN,
        }
    )
    runtime = Runtime.build(settings)
    yield create_api_app(runtime).test_client()
    runtime.stop()


def test_adding_an_event_that_runs_at_once_answers_with_what_was_written(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_add = catalog.add_event

    def consumed_at_once(
        data_dir: Path, folder: Folder, name: str, spec: EventSpec, **kw: bool
    ) -> Path:
        path = real_add(data_dir, folder, name, spec, **kw)
        path.unlink()  # the watcher ran it and removed it before the response was built
        return path

    monkeypatch.setattr(events_api, "add_event", consumed_at_once)  # as the route looks it up
    body = {"name": "now", "type": "immediate", "channelId": "SESSION-x", "text": "hi"}
    reply = client.post("/events", json=body, headers=AUTH)
    assert reply.status_code == 201, reply.get_json()
    entry = reply.get_json()
    assert entry["id"] == "events/now.json" and entry["type"] == "immediate"
    assert entry["status"] == "scheduled" and entry["text"] == "hi" and entry["next"]
