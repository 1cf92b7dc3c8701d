"""``iris acp`` as an editor sees it: the official SDK's client side over real stdio."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block

from iris_runtime.testing import acp_agent
from iris_runtime.testing.server import clean_environment
from tests.acp.conftest import iris_acp, run

SCRIPT = [
    {
        "when": "list files",
        "turns": [
            [
                {"thinking": "the user wants files"},
                {"text": "Looking."},
                {"tool": "bash", "args": {"command": "echo hi-from-bash"}},
            ],
            [{"text": "Done."}],
        ],
    },
    {"when": "slow", "turns": [[{"text": "partial"}, {"sleep": 60}, {"text": " never"}]]},
    {"when": "recall", "turns": [[{"recall": True}]]},
]


@pytest.fixture
def env(write_script: Callable[[list[dict[str, Any]]], Path]) -> dict[str, str]:
    return {"IRIS_PROVIDER": "scripted", "IRIS_SCRIPT_FILE": str(write_script(SCRIPT))}


def test_initialize_new_session_and_a_turn_with_tools(tmp_path: Path, env: dict[str, str]) -> None:
    async def go() -> None:
        async with iris_acp(tmp_path / "data", **env) as (conn, editor, init):
            caps = init.agent_capabilities
            assert init.protocol_version == 1
            assert caps is not None and caps.load_session
            assert caps.prompt_capabilities is not None and caps.prompt_capabilities.image
            assert caps.session_capabilities is not None
            assert caps.session_capabilities.list is not None
            session = await conn.new_session(cwd=str(tmp_path))
            answer = await asyncio.wait_for(
                conn.prompt(session_id=session.session_id, prompt=[text_block("list files")]),
                60,
            )
            assert answer.stop_reason == "end_turn"
            sid = session.session_id
            assert editor.text(sid) == "Looking.Done."
            assert editor.text(sid, "agent_thought_chunk") == "the user wants files"
            (start,) = editor.of(sid, "tool_call")
            assert start.kind == "execute" and start.title == "bash"
            assert start.raw_input == {"command": "echo hi-from-bash"}
            (end,) = editor.of(sid, "tool_call_update")
            assert end.tool_call_id == start.tool_call_id and end.status == "completed"
            assert "hi-from-bash" in end.raw_output

    run(go)


def test_load_after_a_restart_replays_history_and_the_model_remembers(
    tmp_path: Path, env: dict[str, str]
) -> None:
    data = tmp_path / "data"

    async def first() -> str:
        async with iris_acp(data, **env) as (conn, _editor, _init):
            session = await conn.new_session(cwd=str(tmp_path))
            await conn.prompt(session_id=session.session_id, prompt=[text_block("hello there")])
            return session.session_id

    sid = run(first)

    async def second() -> None:
        async with iris_acp(data, **env) as (conn, editor, _init):
            listed = await conn.list_sessions()
            assert [(s.session_id, s.title) for s in listed.sessions] == [(sid, "hello there")]
            await conn.load_session(cwd=str(tmp_path), session_id=sid)
            assert editor.text(sid, "user_message_chunk") == "hello there"
            assert editor.text(sid) == "echo: hello there"  # the scripted provider echoes
            await conn.prompt(session_id=sid, prompt=[text_block("recall")])
            assert "hello there" in editor.text(sid)
            with pytest.raises(RequestError):
                await conn.load_session(cwd=str(tmp_path), session_id="0" * 32)

    run(second)


def test_cancel_stops_the_turn_and_the_prompt_answers_cancelled(
    tmp_path: Path, env: dict[str, str]
) -> None:
    async def go() -> None:
        async with iris_acp(tmp_path / "data", **env) as (conn, editor, _init):
            session = await conn.new_session(cwd=str(tmp_path))
            sid = session.session_id
            prompt = asyncio.ensure_future(
                conn.prompt(session_id=sid, prompt=[text_block("slow please")])
            )
            for _ in range(600):
                if editor.text(sid):
                    break
                await asyncio.sleep(0.05)
            await conn.cancel(session_id=sid)
            answer = await asyncio.wait_for(prompt, 30)
            assert answer.stop_reason == "cancelled"
            assert editor.text(sid) == "partial"

    run(go)


def test_the_model_option_lists_the_models_table(tmp_path: Path, env: dict[str, str]) -> None:
    async def go() -> None:
        async with iris_acp(tmp_path / "data", IRIS_MODEL="scripted-1", **env) as (conn, _e, _i):
            session = await conn.new_session(cwd=str(tmp_path))
            (option,) = session.config_options or []
            assert option.category == "model" and option.id == "model"
            assert option.current_value == "scripted-1"
            same = await conn.set_config_option(
                config_id="model", session_id=session.session_id, value="scripted-1"
            )
            assert same is not None
            with pytest.raises(RequestError) as refused:
                await conn.set_config_option(
                    config_id="model", session_id=session.session_id, value="other"
                )
            assert "IRIS_MODEL=other" in json.dumps(refused.value.data)

    run(go)


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientCapabilities": {}},
}
PARSE_ERROR = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}


def acp_fed(tmp_path: Path, env: dict[str, str], lines: list[str]) -> tuple[list[Any], str]:
    """``iris acp`` given ``lines`` on stdin, then its end: the JSON lines it wrote on stdout,
    and its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "iris_runtime", "acp"],
        input="".join(line + "\n" for line in lines),
        env=clean_environment(IRIS_DATA_DIR=str(tmp_path / "data"), **env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def test_stdout_carries_only_protocol_lines_and_bad_lines_get_a_parse_error(
    tmp_path: Path, env: dict[str, str]
) -> None:
    prompt = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "session/prompt",
        "params": {"sessionId": "f" * 32, "prompt": []},
    }
    lines = ["this is not json", json.dumps(INITIALIZE), json.dumps(prompt)]
    out, stderr = acp_fed(tmp_path, env, lines)
    assert out[0] == PARSE_ERROR
    by_id = {m["id"]: m for m in out[1:]}
    assert by_id[1]["result"]["protocolVersion"] == 1
    assert "no such session" in json.dumps(by_id[2]["error"])
    assert "not JSON-RPC" in stderr


def test_a_turn_reaches_a_custom_acp_agent_through_at_routing(
    tmp_path: Path, env: dict[str, str], socket_dir: Path
) -> None:
    data = tmp_path / "data"
    record = tmp_path / "coder.jsonl"
    acp_agent.install(data / "agents.d", record, "coder")

    async def go() -> None:
        reach = str(socket_dir / "reach.sock")
        async with iris_acp(data, IRIS_REACH_SOCKET=reach, **env) as (conn, editor, _init):
            session = await conn.new_session(cwd=str(tmp_path))
            sid = session.session_id
            await conn.prompt(session_id=sid, prompt=[text_block("@coder echo from the editor")])
            assert editor.text(sid) == "You said: from the editor"

    run(go)


def test_ask_permission_asks_the_editor_and_honours_the_answer(
    tmp_path: Path, env: dict[str, str]
) -> None:
    async def go() -> None:
        async with iris_acp(tmp_path / "data", "--ask-permission", **env) as (conn, editor, _i):
            session = await conn.new_session(cwd=str(tmp_path))
            sid = session.session_id
            editor.answer = "reject"
            await conn.prompt(session_id=sid, prompt=[text_block("list files")])
            (asked,) = editor.permissions
            assert asked.title == "bash" and asked.kind == "execute"
            assert asked.raw_input == {"command": "echo hi-from-bash"}
            (declined,) = editor.of(sid, "tool_call_update")
            assert declined.status == "failed"
            assert declined.raw_output == "the user declined this tool call"
            editor.answer = "always"
            await conn.prompt(session_id=sid, prompt=[text_block("list files")])
            await conn.prompt(session_id=sid, prompt=[text_block("list files")])
            assert len(editor.permissions) == 2, "always is remembered for the session"
            ran = editor.of(sid, "tool_call_update")[1:]
            assert [u.status for u in ran] == ["completed", "completed"]
            assert "hi-from-bash" in ran[0].raw_output

    run(go)


def test_an_editor_that_goes_away_mid_prompt_stops_the_run_and_iris_exits(
    tmp_path: Path, env: dict[str, str]
) -> None:
    environment = clean_environment(IRIS_DATA_DIR=str(tmp_path / "data"), **env)
    process = subprocess.Popen(
        [sys.executable, "-m", "iris_runtime", "acp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=environment,
    )
    assert process.stdin is not None and process.stdout is not None

    def call(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert process.stdin is not None and process.stdout is not None
        line = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        process.stdin.write(json.dumps(line).encode() + b"\n")
        process.stdin.flush()
        while True:
            answer: dict[str, Any] = json.loads(process.stdout.readline())
            if answer.get("id") == rid:
                return answer

    try:
        call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        sid = call(2, "session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"]
        prompt = {"sessionId": sid["sessionId"], "prompt": [{"type": "text", "text": "slow"}]}
        process.stdin.write(
            json.dumps(
                {"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt}
            ).encode()
            + b"\n"
        )
        process.stdin.flush()
        first = json.loads(process.stdout.readline())  # the run is under way
        assert first["method"] == "session/update"
        process.stdin.close()
        # The scripted turn would sleep 60 s; the editor's leaving stops it instead.
        assert process.wait(45) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_ask_permission_refuses_sub_agents_whose_tools_the_editor_could_not_gate(
    tmp_path: Path, write_script: Callable[[list[dict[str, Any]]], Path]
) -> None:
    script = [
        {
            "when": "delegate",
            "turns": [
                [{"tool": "sessions_spawn", "args": {"task": "run rm -rf in bash"}}],
                [{"text": "Could not."}],
            ],
        }
    ]
    env = {"IRIS_PROVIDER": "scripted", "IRIS_SCRIPT_FILE": str(write_script(script))}

    async def go() -> None:
        async with iris_acp(tmp_path / "data", "--ask-permission", **env) as (conn, editor, _i):
            session = await conn.new_session(cwd=str(tmp_path))
            sid = session.session_id
            await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text_block("delegate")]), 60)
            (refused,) = editor.of(sid, "tool_call_update")
            assert refused.status == "failed"
            assert "--ask-permission" in refused.raw_output
            assert editor.permissions == []

    run(go)


def test_streamed_text_is_sent_once_and_a_silent_reply_never_streams(
    tmp_path: Path, write_script: Callable[[list[dict[str, Any]]], Path]
) -> None:
    script = [
        {"when": "greet", "turns": [[{"text": "Hello"}, {"text": " world\n"}]]},
        {"when": "hush", "turns": [[{"text": " [SIL"}, {"text": "ENT] nothing to say"}]]},
        {"when": "bracket", "turns": [[{"text": "[S"}, {"text": "ure] ok"}]]},
    ]
    env = {"IRIS_PROVIDER": "scripted", "IRIS_SCRIPT_FILE": str(write_script(script))}

    async def go() -> None:
        async with iris_acp(tmp_path / "data", **env) as (conn, editor, _i):
            said = {}
            for word in ("greet", "hush", "bracket"):
                session = await conn.new_session(cwd=str(tmp_path))
                await asyncio.wait_for(
                    conn.prompt(session_id=session.session_id, prompt=[text_block(word)]), 60
                )
                said[word] = editor.text(session.session_id)
            assert said == {"greet": "Hello world\n", "hush": "", "bracket": "[Sure] ok"}

    run(go)


def test_an_overlong_line_gets_one_parse_error_and_its_rest_is_dropped(
    tmp_path: Path, env: dict[str, str]
) -> None:
    overlong = "x" * (50 * 1024 * 1024 + 300_000) + " " + json.dumps({**INITIALIZE, "id": 9})
    out, _ = acp_fed(tmp_path, env, [overlong, json.dumps(INITIALIZE)])
    assert out[0] == PARSE_ERROR
    assert [m.get("id") for m in out[1:]] == [1]
