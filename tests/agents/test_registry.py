"""The sub-agent registry as a library: validation, merge semantics, token lookup, file safety."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from iris_runtime.agents import registry as registry_module
from iris_runtime.agents.registry import AgentEntry, AgentRegistry, RegistryError, registry_for
from iris_runtime.config import Settings
from iris_runtime.errors import InvalidInput

URL = "http://127.0.0.1:4000"
TOKEN = "agent-token-0123456789abcdef"


@pytest.fixture
def registry(tmp_path: Path) -> AgentRegistry:
    return AgentRegistry(tmp_path / "data" / "agents.json")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- validation of arguments ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["", "Agent", "-lead", "_lead", "a b", "a/b", "a.b", "é", "a" * 64, "a\n"]
)
def test_bad_names_are_invalid_input(registry: AgentRegistry, name: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        registry.register(name, URL)
    assert caught.value.status == 400 and "agent name" in caught.value.message
    assert not registry.path.exists()


@pytest.mark.parametrize("name", ["a", "0", "agent-1", "my_agent", "a" * 63])
def test_good_names(registry: AgentRegistry, name: str) -> None:
    assert registry.register(name, URL).name == name
    assert registry.names() == [name]


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://127.0.0.1:4000", "http:// or https://"),
        ("127.0.0.1:4000", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("http://", "no host"),
        ("http://:4000", "no host"),
        ("http://127.0.0.1:4000/?x=1", "query or fragment"),
        ("http://127.0.0.1:4000/#top", "query or fragment"),
        ("http://127.0.0.1:4000?", "query or fragment"),
        ("http://127.0.0.1:notaport", "not a valid URL"),
        ("http://127.0.0.1:70000", "not a valid URL"),
        ("http://127.0.0.1:4000/\nx", "control"),
        (" http://127.0.0.1:4000", "whitespace"),
    ],
)
def test_bad_urls_are_invalid_input(registry: AgentRegistry, url: str, problem: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        registry.register("a", url)
    assert problem in caught.value.message


@pytest.mark.parametrize("url", ["http://alice:hunter2@host:4000", "https://alice@host"])
def test_credentials_in_the_url_are_refused_without_echoing_them(
    registry: AgentRegistry, url: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        registry.register("a", url)
    assert "credentials" in caught.value.message
    assert "hunter2" not in caught.value.message and "alice" not in caught.value.message


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:4000", "https://agent.example.com", "http://[::1]:4000/bridge"]
)
def test_good_urls(registry: AgentRegistry, url: str) -> None:
    assert registry.register("a", url).bridge_url == url


@pytest.mark.parametrize("secret", ["", "1ABC", "A B", "A/B", "A" * 129, "A\n"])
def test_bad_secret_names_are_invalid_input(registry: AgentRegistry, secret: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        registry.register("a", URL, [secret])
    assert "secret name" in caught.value.message


def test_a_bare_string_is_not_a_list_of_secrets(registry: AgentRegistry) -> None:
    with pytest.raises(InvalidInput):
        registry.register("a", URL, "GITHUB_TOKEN")


def test_secrets_are_deduplicated_in_order(registry: AgentRegistry) -> None:
    entry = registry.register("a", URL, ["B", "A", "B", "_c.d-e", "A"])
    assert entry.secrets == ("B", "A", "_c.d-e")


@pytest.mark.parametrize("token", ["", " padded ", "with\nnewline", "tab\there"])
def test_bad_tokens_are_invalid_input(registry: AgentRegistry, token: str) -> None:
    with pytest.raises(InvalidInput):
        registry.register("a", URL, token=token)


# -- merge semantics --------------------------------------------------------------------------


def test_reregistering_updates_url_merges_secrets_and_keeps_the_token(
    registry: AgentRegistry,
) -> None:
    registry.register("a", URL, ["A", "B"], TOKEN)
    entry = registry.register("a", "https://elsewhere:4443", ["C", "A"])
    assert entry == AgentEntry("a", "https://elsewhere:4443", ("A", "B", "C"), TOKEN)
    assert registry.get("a") == entry


def test_replace_secrets_and_new_token(registry: AgentRegistry) -> None:
    registry.register("a", URL, ["A", "B"], TOKEN)
    entry = registry.register("a", URL, ["C"], TOKEN + "-new", merge_secrets=False)
    assert entry.secrets == ("C",) and entry.token == TOKEN + "-new"
    assert registry.register("a", URL, [], merge_secrets=False).secrets == ()


def test_other_entries_are_untouched(registry: AgentRegistry) -> None:
    registry.register("a", URL, ["A"])
    registry.register("b", URL, ["B"], TOKEN)
    registry.register("a", URL, ["A2"])
    assert registry.get("b") == AgentEntry("b", URL, ("B",), TOKEN)


def test_unregister(registry: AgentRegistry) -> None:
    assert registry.unregister("a") is False
    assert not registry.path.exists()  # nothing to remove: no file is created
    registry.register("a", URL)
    registry.register("b", URL)
    assert registry.unregister("a") is True
    assert registry.names() == ["b"] and registry.get("a") is None
    assert registry.unregister("a") is False
    with pytest.raises(InvalidInput):
        registry.unregister("Not A Name")


def test_missing_file_is_an_empty_registry(registry: AgentRegistry) -> None:
    assert registry.load() == {} and registry.names() == [] and registry.get("a") is None
    assert registry.find_by_token(TOKEN) is None


def test_to_json_and_file_shape(registry: AgentRegistry) -> None:
    registry.register("b", URL, ["S"], TOKEN)
    registry.register("a", "https://h")
    assert AgentEntry("a", URL).to_json() == {"bridge_url": URL, "secrets": []}
    on_disk = json.loads(registry.path.read_text())
    assert list(on_disk) == ["a", "b"]
    assert on_disk == {
        "a": {"bridge_url": "https://h", "secrets": []},
        "b": {"bridge_url": URL, "secrets": ["S"], "token": TOKEN},
    }


def test_repr_never_shows_the_token() -> None:
    assert TOKEN not in repr(AgentEntry("a", URL, (), TOKEN))


def test_reads_see_other_writers(registry: AgentRegistry) -> None:
    other = AgentRegistry(registry.path)
    registry.register("a", URL)
    assert other.names() == ["a"]
    other.register("b", URL)
    assert registry.names() == ["a", "b"]
    os.unlink(registry.path)
    assert registry.load() == {}


def test_registry_for_uses_the_data_dir(tmp_path: Path) -> None:
    settings = Settings.from_env({"IRIS_DATA_DIR": str(tmp_path / "d")})
    assert registry_for(settings).path == (tmp_path / "d").resolve() / "agents.json"


# -- tokens -----------------------------------------------------------------------------------


def test_find_by_token(registry: AgentRegistry) -> None:
    registry.register("a", URL, token=TOKEN + "-a")
    registry.register("b", URL)
    registry.register("c", URL, token=TOKEN + "-c")
    assert registry.find_by_token(TOKEN + "-a") == registry.get("a")
    found = registry.find_by_token(TOKEN + "-c")
    assert found is not None and found.name == "c"
    assert registry.find_by_token(TOKEN) is None
    assert registry.find_by_token("") is None
    assert registry.find_by_token("non-ascii-ünicode") is None  # no TypeError


def test_find_by_token_compares_every_entry(
    registry: AgentRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(5):
        registry.register(f"a{n}", URL, token=f"{TOKEN}-{n}")
    registry.register("no-token", URL)
    calls: list[bytes] = []
    real = registry_module.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(b)
        return real(a, b)

    monkeypatch.setattr(registry_module.hmac, "compare_digest", counting)
    found = registry.find_by_token(f"{TOKEN}-0")  # the first entry: no early exit after it
    assert found is not None and found.name == "a0"
    assert len(calls) == 5


def test_a_token_cannot_be_shared_by_two_agents(registry: AgentRegistry) -> None:
    registry.register("a", URL, token=TOKEN)
    with pytest.raises(InvalidInput) as caught:
        registry.register("b", URL, token=TOKEN)
    assert "'a'" in caught.value.message and TOKEN not in caught.value.message
    registry.register("a", URL, token=TOKEN)  # the owner may re-register with it


# -- file modes -------------------------------------------------------------------------------


def test_files_are_mode_0600_even_with_a_loose_umask(registry: AgentRegistry) -> None:
    old = os.umask(0o000)
    try:
        registry.register("a", URL, token=TOKEN)
    finally:
        os.umask(old)
    assert mode(registry.path) == 0o600
    assert mode(registry.lock_path) == 0o600
    assert registry.lock_path.name == "agents.json.lock"


def test_a_loose_existing_file_is_tightened_on_write(registry: AgentRegistry) -> None:
    registry.path.parent.mkdir(parents=True)
    registry.path.write_text(json.dumps({"a": {"bridge_url": URL, "secrets": []}}))
    registry.path.chmod(0o644)
    registry.lock_path.touch(mode=0o644)
    registry.lock_path.chmod(0o644)
    registry.register("b", URL)
    assert mode(registry.path) == 0o600 and mode(registry.lock_path) == 0o600
    assert registry.names() == ["a", "b"]


def test_no_temp_files_are_left_behind(registry: AgentRegistry) -> None:
    for n in range(5):
        registry.register(f"a{n}", URL)
    registry.unregister("a0")
    assert sorted(p.name for p in registry.path.parent.iterdir()) == [
        "agents.json",
        "agents.json.lock",
    ]


# -- corrupt files ----------------------------------------------------------------------------

CORRUPT = {
    "invalid JSON": (b'{"a": {"bridge_url": ', "not valid JSON"),
    "a JSON list": (b'[{"bridge_url": "http://127.0.0.1:4000"}]', "not list"),
    "a bad URL": (b'{"a": {"bridge_url": "ftp://127.0.0.1"}}', "agent 'a': bridge_url"),
    "an unknown key": (
        b'{"a": {"bridge_url": "http://127.0.0.1:4000", "tokn": "x"}}',
        "agent 'a': unknown key(s) 'tokn'",
    ),
    "a bad agent name": (b'{"A": {"bridge_url": "http://h"}}', "agent 'A': invalid agent name"),
    "secrets not a list": (b'{"a": {"bridge_url": "http://h", "secrets": "S"}}', "agent 'a'"),
    "a bad secret name": (b'{"a": {"bridge_url": "http://h", "secrets": ["1x"]}}', "agent 'a'"),
    "an empty token": (b'{"a": {"bridge_url": "http://h", "token": ""}}', "agent 'a': token"),
    "missing bridge_url": (b'{"a": {"secrets": []}}', "agent 'a': missing bridge_url"),
    "entry not an object": (b'{"a": "http://h"}', "agent 'a': entry must be a JSON object"),
    "duplicate names": (
        b'{"a": {"bridge_url": "http://h"}, "a": {"bridge_url": "http://i"}}',
        "duplicate key 'a'",
    ),
    "not UTF-8": (b'{"a": {"bridge_url": "http://h\xff"}}', "UTF-8"),
    "empty file": (b"", "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_a_corrupt_file_is_reported_and_never_rewritten(registry: AgentRegistry, case: str) -> None:
    content, problem = CORRUPT[case]
    registry.path.parent.mkdir(parents=True)
    registry.path.write_bytes(content)
    before = registry.path.stat()

    for attempt in (
        registry.load,
        registry.names,
        lambda: registry.get("a"),
        lambda: registry.find_by_token(TOKEN),
        lambda: registry.register("b", URL, ["S"], TOKEN),
        lambda: registry.register("a", URL),
        lambda: registry.unregister("a"),
        lambda: registry.unregister("b"),
    ):
        with pytest.raises(RegistryError) as caught:
            attempt()
        assert caught.value.code == "registry_invalid" and caught.value.status == 500
        assert str(registry.path) in caught.value.message
        assert problem in caught.value.message, caught.value.message

    assert registry.path.read_bytes() == content
    assert registry.path.stat().st_ino == before.st_ino  # not even replaced with the same bytes


def test_a_corrupt_file_error_does_not_echo_a_token(registry: AgentRegistry) -> None:
    registry.path.parent.mkdir(parents=True)
    registry.path.write_text(json.dumps({"a": {"bridge_url": "ftp://h", "token": TOKEN}}))
    with pytest.raises(RegistryError) as caught:
        registry.load()
    assert TOKEN not in caught.value.message


def test_an_unreadable_path_is_a_registry_error(registry: AgentRegistry) -> None:
    registry.path.mkdir(parents=True)  # a directory where the file should be
    with pytest.raises(RegistryError) as caught:
        registry.load()
    assert str(registry.path) in caught.value.message
