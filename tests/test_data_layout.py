"""``iris_runtime.data_layout`` names every top-level entry of the data dir, and the code uses it.

(a) No code builds a data-dir path from a string literal (``data_dir / "audit"``): it must use
    a layout constant, so a new feature's entry is reserved as a channel id automatically.
(b) The paths the code really builds start with layout names.
(c) A served Iris that has done a bit of everything leaves nothing at the top of its data dir
    but layout names and the channels it was asked to use.
(d) Every layout name is used by the code (or is planned by the spec and said so here).
Refusing the names as channel ids through the API is tested in
``tests/web/test_channel_ownership.py``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from iris_runtime import data_layout
from iris_runtime.config import Settings
from iris_runtime.engine.channels import validate_channel_id
from iris_runtime.errors import InvalidInput
from iris_runtime.testing.server import IrisServer

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(
    [
        *(ROOT / "iris_runtime").rglob("*.py"),
        *(p for p in (ROOT / "plugins").glob("*/iris_*/**/*.py")),
    ]
)
LAYOUT_MODULE = ROOT / "iris_runtime" / "data_layout.py"
# Names whose paths are built as ``<something>.data_dir / ...`` (the workspace is the data dir).
DATA_DIR_NAMES = frozenset({"data_dir", "_data_dir", "workspace"})
# Layout names no code creates yet: the spec's features that will (keep them reserved now, so
# no channel can take the name first).
PLANNED: dict[str, str] = {}
# Names derived from another constant where they are made, not spelled out.
DERIVED = {"AGENTS_JSON_LOCK": "registry path + '.lock'", "SQLITE_SIDECARS": "SQLite's own"}


def _tail(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def literal_data_dir_paths(path: Path) -> list[str]:
    """``data_dir / "literal"`` (or ``workspace / ...``) expressions in one source file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.name}:{node.lineno}: / {node.right.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Div)
        and _tail(node.left) in DATA_DIR_NAMES
        and isinstance(node.right, ast.Constant)
        and isinstance(node.right.value, str)
    ]


def test_no_data_dir_path_is_built_from_a_string_literal() -> None:
    offenders = [f"{p.parent.name}/{hit}" for p in SOURCES for hit in literal_data_dir_paths(p)]
    assert offenders == [], "use a constant from iris_runtime/data_layout.py:\n" + "\n".join(
        offenders
    )


def test_the_scan_sees_a_literal(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('x = settings.data_dir / "audit"\ny = self.workspace / NAME\n')
    assert literal_data_dir_paths(sample) == ["sample.py:1: / 'audit'"]


def _settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"IRIS_DATA_DIR": str(tmp_path)})


def _top(tmp_path: Path, path: Path) -> str:
    return path.relative_to(tmp_path).parts[0]


def _paths(tmp_path: Path) -> dict[str, Path]:
    """Paths as the code builds them, each by its own owner."""
    from iris_telegram.offsets import OffsetStore
    from iris_webui.auth import LoginSessions, login_file

    from iris_runtime.agents.registry import registry_for
    from iris_runtime.agents.spawn_config import SpawnConfig
    from iris_runtime.bridge.jobs import JobStore
    from iris_runtime.events import files, state
    from iris_runtime.provision import supervised
    from iris_runtime.secrets.audit import audit_log_for
    from iris_runtime.secrets.file_store import file_store

    settings = _settings(tmp_path)
    sessions = LoginSessions(tmp_path)
    return {
        "token file": settings.token_file,
        "control socket": settings.control_socket,
        "agent registry": registry_for(settings).path,
        "agent homes": SpawnConfig.from_settings(settings).agents_dir / "x",
        "bridge jobs": JobStore(tmp_path).directory,
        "audit log": audit_log_for(tmp_path).path,
        "secret store": file_store(settings).directory,
        "events state": tmp_path / state.DB_NAME,
        "supervised processes": tmp_path / supervised.DB_NAME,
        "telegram offsets": OffsetStore.for_bot(tmp_path, "1").path,
        "webui login key": login_file(tmp_path),
        "webui sessions": sessions._path,
        **{f"events folder {f.rel}": tmp_path / f.rel for f in files.folders_for(["x-chat"])},
    }


def test_the_paths_the_code_builds_start_with_layout_names(tmp_path: Path) -> None:
    tops = {what: _top(tmp_path, path) for what, path in _paths(tmp_path).items()}
    outside = {what: top for what, top in tops.items() if top not in data_layout.TOP_LEVEL}
    # A third-party transport's events folder is named for its transport id, not listed.
    assert outside == {"events folder x-chat/events": "x-chat"}


def test_every_layout_name_is_refused_as_a_channel_id_in_any_case() -> None:
    for name in data_layout.TOP_LEVEL:
        for variant in {name, name.upper(), name.lower(), name.swapcase()}:
            if not variant[0].isalnum():
                continue
            with pytest.raises(InvalidInput, match="reserved"):
                validate_channel_id(variant)
    assert validate_channel_id("agents-ops") == "agents-ops"  # only whole names are reserved


def test_every_layout_name_is_used_by_the_code() -> None:
    constants = {
        name
        for name, value in vars(data_layout).items()
        if name.isupper() and isinstance(value, str | tuple)
    }
    code = "\n".join(p.read_text(encoding="utf-8") for p in SOURCES if p != LAYOUT_MODULE)
    unused = {name for name in constants if not re.search(rf"\b{name}\b", code)}
    # SQLITE_SIDECARS is used (private_files); the registry's lock is named from its path.
    assert unused == set(PLANNED) | {"AGENTS_JSON_LOCK"}, unused
    assert set(DERIVED) <= constants


@pytest.mark.slow
def test_a_served_iris_creates_nothing_at_the_top_but_layout_names_and_channels(
    start_iris: Callable[..., IrisServer],
) -> None:
    server = start_iris()
    data = server.data_dir
    channels = {"SESSION-layout", "ops", "SESSION-events"}
    assert server.post("/sessions/layout/message", json_body={"text": "hi"}).status == 200
    assert server.post("/sessions/layout/attachments", body=b"x", headers={"X-Filename": "a.txt"})
    assert server.request("PUT", "/secrets/demo", json_body={"value": "v"}).status == 200
    assert server.get("/secrets/demo").status == 200
    assert server.post("/escalate", json_body={"text": "help", "channel": "ops"}).status == 202
    event = {"name": "e", "type": "immediate", "channelId": "SESSION-events", "text": "x"}
    assert server.post("/events", json_body=event).status == 201
    (data / "agents.json").write_text(json.dumps({}))
    server.stop()
    entries = {p.name for p in data.iterdir()}
    assert entries - channels <= data_layout.TOP_LEVEL, entries - channels - data_layout.TOP_LEVEL
    assert {"audit", "events", "run", "secrets", "state.db"} <= entries
