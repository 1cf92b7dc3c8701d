"""Manifests: every strictness rule, and through served Iris the watching, the skip log, the
listing (API, CLI, doctor), restarting one agent, filename order and a clash with a bridge
sub-agent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from iris_runtime.custom_agents.manifest import ManifestError, parse_manifest
from iris_runtime.testing.server import clean_environment, run_iris
from iris_runtime.testing.subagent import register
from tests.custom_agents.conftest import Setup, relay_manifest, wait_until, write_manifest

RELAY = {"kind": "butler", "label": "Butler", "relay": "http://127.0.0.1:8700/inbound"}
ACP = {"kind": "myagent", "label": "My agent", "bin": "/usr/local/bin/myagent-acp"}
SETUP = {
    "login": ["/usr/local/bin/butler", "login", "--provider", "{provider}"],
    "providers": [{"id": "openai", "label": "OpenAI", "note": "Uses your plan."}],
}

REJECTED: list[tuple[str, dict[str, Any], str]] = [
    ("unknown top-level field", {**RELAY, "colour": "red"}, 'unknown field "colour"'),
    (
        "unknown nested field",
        {**RELAY, "commands": [{"name": "s", "description": "d", "emoji": "x"}]},
        'unknown field "commands[].emoji"',
    ),
    (
        "unknown field in auth",
        {**RELAY, "auth": {"file": "/a", "command": "x"}},
        'unknown field "auth.command"',
    ),
    ("relative bin", {**ACP, "bin": "bin/myagent"}, '"bin" must be an absolute path'),
    (
        "both bin and relay",
        {**ACP, "relay": RELAY["relay"]},
        'give exactly one of "bin" (an ACP agent) and "relay" (a relay agent)',
    ),
    (
        "neither bin nor relay",
        {"kind": "x", "label": "X"},
        'give exactly one of "bin" (an ACP agent) and "relay" (a relay agent)',
    ),
    ("reserved kind", {**RELAY, "kind": "iris"}, "\"kind\" 'iris' is reserved"),
    ("reserved kind here", {**RELAY, "kind": "here"}, "\"kind\" 'here' is reserved"),
    (
        "malformed kind",
        {**RELAY, "kind": "My Agent"},
        '"kind" must be 1-63 lowercase letters, digits, "-" or "_", starting with a letter or '
        "digit",
    ),
    ("missing kind", {"relay": RELAY["relay"]}, '"kind" is required'),
    ("modelEnv without models", {**ACP, "modelEnv": "M"}, '"modelEnv" needs "models"'),
    ("empty models", {**ACP, "models": []}, '"models" must not be empty'),
    (
        "model id with whitespace",
        {**ACP, "models": [{"id": "deep seek"}]},
        '"models[].id" must not contain whitespace',
    ),
    (
        "model id default",
        {**ACP, "models": [{"id": "default"}]},
        '"models[].id" must not be "default" (it means the agent\'s own default)',
    ),
    (
        "args with relay",
        {**RELAY, "args": ["--x"]},
        '"args" cannot be used together with "relay"',
    ),
    (
        "models with relay",
        {**RELAY, "models": [{"id": "a"}]},
        '"models" cannot be used together with "relay"',
    ),
    (
        "modelEnv with relay",
        {**RELAY, "modelEnv": "M"},
        '"modelEnv" cannot be used together with "relay"',
    ),
    ("contract with bin", {**ACP, "contract": 1}, '"contract" cannot be used together with "bin"'),
    ("commands with bin", {**ACP, "commands": []}, '"commands" cannot be used together with "bin"'),
    (
        "auth with bin",
        {**ACP, "auth": {"file": "/a"}},
        '"auth" cannot be used together with "bin"',
    ),
    ("setup with bin", {**ACP, "setup": SETUP}, '"setup" cannot be used together with "bin"'),
    ("contract not an integer", {**RELAY, "contract": "1"}, '"contract" must be an integer'),
    ("contract a boolean", {**RELAY, "contract": True}, '"contract" must be an integer'),
    ("contract a float", {**RELAY, "contract": 1.0}, '"contract" must be an integer'),
    (
        "unsupported contract",
        {**RELAY, "contract": 2},
        "relay contract 2 is not supported by this machine (supports: 1)",
    ),
    (
        "relay not loopback",
        {**RELAY, "relay": "http://example.com:8700/inbound"},
        '"relay" must be a loopback http URL',
    ),
    (
        "relay https",
        {**RELAY, "relay": "https://127.0.0.1:8700/inbound"},
        '"relay" must be a loopback http URL',
    ),
    ("relay not a URL", {**RELAY, "relay": "butler"}, '"relay" must be a loopback http URL'),
    (
        "setup without providers",
        {**RELAY, "setup": {"login": ["/bin/true"]}},
        '"setup" needs "providers"',
    ),
]


@pytest.mark.parametrize(
    ("manifest", "reason"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED]
)
def test_every_strictness_rule_rejects_the_file(manifest: dict[str, Any], reason: str) -> None:
    with pytest.raises(ManifestError) as raised:
        parse_manifest(json.dumps(manifest).encode())
    assert str(raised.value) == reason


def test_both_shapes_of_the_spec_are_accepted() -> None:
    acp = parse_manifest(
        json.dumps(
            {
                **ACP,
                "args": ["--acp"],
                "models": [{"id": "fast"}, {"id": "deep", "label": "Deep"}],
                "modelEnv": "MYAGENT_MODEL",
            }
        ).encode()
    )
    assert acp.shape == "acp" and acp.model_env == "MYAGENT_MODEL" and len(acp.models) == 2
    relay = parse_manifest(
        json.dumps(
            {
                **RELAY,
                "contract": 1,
                "commands": [{"name": "remind", "description": "Set", "argHint": "<when>"}],
                "auth": {"file": "/root/.butler/auth.json", "contains": "access_token"},
                "setup": SETUP,
            }
        ).encode()
    )
    assert relay.shape == "relay" and relay.commands[0].arg_hint == "<when>"
    pi = parse_manifest(b'{"kind": "pi", "label": "Pi", "bin": "/usr/local/bin/pi-acp"}')
    assert pi.kind == "pi" and pi.bin == "/usr/local/bin/pi-acp"


def test_a_bridge_agents_name_is_refused() -> None:
    with pytest.raises(ManifestError) as raised:
        parse_manifest(json.dumps(RELAY).encode(), reserved={"butler"})
    assert str(raised.value) == "\"kind\" 'butler' is already the name of a registered sub-agent"


def test_skipped_files_are_logged_and_listed_and_valid_ones_still_load(setup: Setup) -> None:
    agent = setup.relay("butler")
    bad = write_manifest(
        setup.agents_d, "remote.json", {**RELAY, "kind": "remote", "relay": "http://10.0.0.1/"}
    )
    write_manifest(setup.agents_d, "v2.json", {**RELAY, "kind": "v2", "contract": 2})
    write_manifest(setup.agents_d, "broken.json", "{not json")
    write_manifest(setup.agents_d, "notes.txt", "ignored: not a .json file")
    iris = setup.serve()
    listed = setup.custom_agents()
    assert [a["kind"] for a in listed["agents"]] == ["butler"]
    assert listed["agents"][0]["status"] == "ready" and listed["agents"][0]["label"] == "Butler"
    reasons = {s["path"].rsplit("/", 1)[1]: s["reason"] for s in listed["skipped"]}
    assert reasons["remote.json"] == '"relay" must be a loopback http URL'
    assert reasons["v2.json"] == "relay contract 2 is not supported by this machine (supports: 1)"
    assert reasons["broken.json"].startswith("not valid JSON")
    assert "notes.txt" not in reasons
    wait_until(
        lambda: (
            f'agent manifest {bad} skipped: "relay" must be a loopback http URL'
            in iris.log_tail(400)
        )
    )
    assert setup.ask("x", "@butler echo still works").json()["text"] == "You said: still works"
    # The CLI and doctor show the same, without the server.
    env = clean_environment(IRIS_DATA_DIR=str(setup.data_dir))
    cli = run_iris("custom-agents", "list", env=env)
    assert cli.returncode == 0, cli.stderr
    assert "butler" in cli.stdout and "relay" in cli.stdout and "ready" in cli.stdout
    assert f'skipped {bad}: "relay" must be a loopback http URL' in cli.stdout
    doctor = run_iris("doctor", "--json", env=env)
    check = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "custom_agents")
    assert check["status"] == "warn"
    assert "butler (ready)" in check["detail"] and "supports: 1" in check["detail"]
    assert agent.process is not None


def test_a_new_file_is_picked_up_without_a_restart(setup: Setup) -> None:
    setup.serve()
    assert setup.custom_agents()["agents"] == []
    unknown = setup.ask("w", "@butler echo hi")
    assert unknown.json()["text"] != "You said: hi"  # nobody by that name yet: Iris answers
    setup.relay("butler")
    wait_until(lambda: setup.custom_agents()["agents"])
    assert setup.ask("w", "@butler echo hi").json()["text"] == "You said: hi"


def test_a_loaded_file_is_reread_only_when_its_agent_restarts(setup: Setup) -> None:
    agent = setup.relay("butler")
    iris = setup.serve()
    path = setup.agents_d / "butler.json"
    write_manifest(
        setup.agents_d, "butler.json", relay_manifest("butler", agent.port, label="Jeeves")
    )
    write_manifest(setup.agents_d, "zzz.json", {**RELAY, "kind": "other", "label": "Other"})
    wait_until(lambda: len(setup.custom_agents()["agents"]) == 2)
    labels = {a["kind"]: a["label"] for a in setup.custom_agents()["agents"]}
    assert labels["butler"] == "Butler"  # the edit waits for a restart
    env = clean_environment(
        IRIS_DATA_DIR=str(setup.data_dir),
        IRIS_API_PORT=str(iris.port),
        IRIS_API_TOKEN=iris.token,
    )
    restarted = run_iris("custom-agents", "restart", "butler", env=env)
    assert restarted.returncode == 0, restarted.stderr
    assert restarted.stdout.strip() == "butler restarted: Jeeves (ready)"
    path.unlink()
    reply = iris.post("/custom-agents/butler/restart", json_body={})
    assert reply.status == 200 and reply.json() == {
        "restarted": "butler",
        "agent": None,
        "reason": f"{path} is gone",
    }
    assert [a["kind"] for a in setup.custom_agents()["agents"]] == ["other"]
    missing = iris.post("/custom-agents/nobody/restart", json_body={})
    assert missing.status == 404 and missing.json()["code"] == "unknown_agent"
    junk = iris.post("/custom-agents/other/restart", json_body={"now": True})
    assert junk.status == 400


def test_files_load_in_filename_order_and_the_first_of_a_kind_wins(setup: Setup) -> None:
    write_manifest(setup.agents_d, "b.json", {**RELAY, "label": "Second"})
    write_manifest(setup.agents_d, "a.json", {**RELAY, "label": "First"})
    setup.serve()
    listed = setup.custom_agents()
    assert [a["label"] for a in listed["agents"]] == ["First"]
    assert listed["skipped"][0]["path"].endswith("/b.json")
    assert listed["skipped"][0]["reason"].startswith("\"kind\" 'butler' is already loaded from")


def test_a_kind_that_names_a_bridge_sub_agent_is_refused(setup: Setup) -> None:
    iris = setup.serve()
    register(iris, "helper", "http://127.0.0.1:9/")
    write_manifest(setup.agents_d, "helper.json", {**RELAY, "kind": "helper"})
    skipped = wait_until(lambda: setup.custom_agents()["skipped"])
    assert skipped[0]["reason"] == "\"kind\" 'helper' is already the name of a registered sub-agent"


def test_an_acp_manifest_loads_and_a_program_that_is_no_agent_fails_clearly(
    setup: Setup,
) -> None:
    write_manifest(
        setup.agents_d, "echo.json", {"kind": "echo", "label": "Echo", "bin": "/usr/bin/true"}
    )
    setup.serve()
    listed = setup.custom_agents()["agents"]
    assert listed[0]["shape"] == "acp" and listed[0]["status"] == "ready"
    reply = setup.ask("acp", "@echo hi")
    assert reply.status == 502
    assert reply.json()["text"] == (
        "(echo failed: initialize: the agent process exited with code 0 before answering)"
    )
