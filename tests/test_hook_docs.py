"""Meta-tests over the hook specifications.

(a) Every hookspec has a docstring and a ``## <name>`` section in ``docs/plugin_hooks.md``.
(b) Every hookspec is really called by the runtime: the probe plugin (``tests/plugin_fixture``)
    implements all hooks and logs each call to ``$IRIS_PROBE_LOG``; a served Iris, a plugin
    command and ``iris doctor`` between them must call every one.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pluggy
import pytest

from iris_runtime import PROJECT_NAME, hookspecs
from iris_runtime.testing.server import IrisServer, run_iris

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "plugin_hooks.md"
FIXTURE_DIR = Path(__file__).resolve().parent / "plugin_fixture"
TIMEOUT = 120.0


def hookspec_functions() -> dict[str, Callable[..., Any]]:
    """The functions ``hookspecs`` marks with ``@hookspec`` (pluggy sets ``<project>_spec``)."""
    return {
        name: function
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(function, f"{PROJECT_NAME}_spec")
    }


HOOKS = hookspec_functions()
HOOK_NAMES = sorted(HOOKS)


def doc_sections() -> dict[str, str]:
    """``## heading`` → the text up to the next ``## `` heading."""
    text = DOC.read_text(encoding="utf-8")
    parts = re.split(r"^## +(.+?)[ \t]*$", text, flags=re.MULTILINE)
    return {heading: body for heading, body in zip(parts[1::2], parts[2::2], strict=True)}


# -- (a) documented ------------------------------------------------------------------------------


def test_marker_scan_agrees_with_pluggy() -> None:
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    registered = sorted(name for name in vars(manager.hook) if not name.startswith("_"))
    assert registered == HOOK_NAMES
    assert len(HOOK_NAMES) >= 10


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_hookspec_has_a_docstring(name: str) -> None:
    doc = inspect.getdoc(HOOKS[name])
    assert doc, f"hookspec {name} has no docstring (the docstrings are the docs of record)"
    assert len(doc.split()) >= 5, f"hookspec {name}'s docstring says too little: {doc!r}"


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_hook_has_a_section_with_signature_and_example(name: str) -> None:
    sections = doc_sections()
    assert name in sections, f"docs/plugin_hooks.md has no '## {name}' section"
    body = sections[name]
    assert f"def {name}(" in body, f"the {name} section does not show the signature"
    for parameter in inspect.signature(HOOKS[name]).parameters:
        assert parameter in body, f"the {name} section does not mention {parameter!r}"
    assert body.count("```python") >= 2, f"the {name} section needs a signature and an example"


def test_docs_have_no_section_for_a_hook_that_does_not_exist() -> None:
    identifiers = {h for h in doc_sections() if re.fullmatch(r"[a-z][a-z0-9_]*", h)}
    assert identifiers <= set(HOOK_NAMES), identifiers - set(HOOK_NAMES)


def test_docs_intro_covers_loading() -> None:
    intro = DOC.read_text(encoding="utf-8").split(f"## {HOOK_NAMES[0]}")[0]
    for needle in (
        "@hookimpl",
        "[options.entry_points]",
        "iris =",
        "IRIS_LOAD_PLUGINS",
        "IRIS_TRACE_PLUGINS=1",
        "iris plugins",
        "rejected",
    ):
        assert needle in intro, needle


# -- (b) exercised -------------------------------------------------------------------------------


def logged_hooks(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [json.loads(line)["hook"] for line in log.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_every_hook_is_called_by_the_runtime(tmp_path: Path) -> None:
    log = tmp_path / "probe-log.jsonl"
    python_path = os.pathsep.join([str(FIXTURE_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
    server = IrisServer(
        tmp_path / "data",
        env={
            "PYTHONPATH": python_path,
            "IRIS_LOAD_PLUGINS": "probe",
            "IRIS_PROBE_LOG": str(log),
            "IRIS_PROVIDER": "probe",
            "IRIS_SANDBOX": "probe",
            # The probe plugin's level only wraps the command line: opted into on purpose here,
            # where the point is that every hook is called.
            "IRIS_SANDBOX_UNPROVEN": "1",
        },
    )

    # 1. serve: one message, then SIGTERM.
    try:
        server.start(timeout=60.0)
        reply = server.post("/sessions/x/message", json_body={"text": "hi"})
        # The probe's declared channel shape: refused, never taken by the bridge catch-all.
        off = server.post("/channels/PROBE-1/events", json_body={"text": "x"})
        malformed = server.post("/channels/PROBE-x/events", json_body={"text": "x"})
    finally:
        exit_code = server.stop()
    assert reply.status == 200, reply.body
    assert reply.json()["text"] == "probe says hi"
    assert exit_code == 0, server.log_tail()
    assert (off.status, off.json()["code"]) == (409, "transport_not_running"), off.body
    assert (malformed.status, malformed.json()["code"]) == (404, "no_such_channel")
    assert "probe" in off.json()["error"] and "PROBE-<digits>" in malformed.json()["error"]
    served = logged_hooks(log)
    assert served.count("engine_started") == 1, served
    assert served.count("engine_stopping") == 1, (served, server.log_tail())

    # 2. a plugin command, and 3. iris doctor, with the same environment.
    env = server.environment()
    hello = run_iris("probe-hello", env=env)
    assert hello.returncode == 0, hello.stderr
    assert hello.stdout.strip() == "hello from probe"
    after_hello = logged_hooks(log)
    assert after_hello[len(served) :] == ["register_commands"]

    doctor = run_iris("doctor", "--json", env=env)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    by_doctor = set(logged_hooks(log)[len(after_hello) :])
    assert {"register_providers", "register_sandboxes", "register_secret_backends"} <= by_doctor

    missing = set(HOOK_NAMES) - set(logged_hooks(log))
    assert not missing, f"hooks the runtime never called: {sorted(missing)}"
