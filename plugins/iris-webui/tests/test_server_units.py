"""The small pieces that need no server: login keys, login sessions, file names, channel ids."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from iris_webui.auth import (
    LoginSessions,
    PasswordGate,
    consume_login_key,
    issue_login_key,
    login_file,
)
from iris_webui.history import list_sessions
from iris_webui.uploads import channel_of, safe_name, session_of

from iris_runtime.engine.sessions import LOG_NAME
from iris_runtime.errors import InvalidInput


def test_a_login_key_is_stored_as_a_digest_and_works_once(tmp_path: Path) -> None:
    key = issue_login_key(tmp_path)
    path = login_file(tmp_path)
    assert key not in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert consume_login_key(tmp_path, "wrong") == "invalid_key"
    assert consume_login_key(tmp_path, key) is None
    assert consume_login_key(tmp_path, key) == "used_key"
    newer = issue_login_key(tmp_path)  # a restart's new link replaces the old one
    assert consume_login_key(tmp_path, key) == "invalid_key"
    assert consume_login_key(tmp_path, newer) is None


def test_an_expired_key_is_refused(tmp_path: Path) -> None:
    key = issue_login_key(tmp_path, ttl=-1)
    assert consume_login_key(tmp_path, key) == "expired_key"
    assert json.loads(login_file(tmp_path).read_text())["used"] is False
    assert consume_login_key(tmp_path / "nowhere", key) == "invalid_key"


def test_login_sessions_persist_as_digests(tmp_path: Path) -> None:
    sessions = LoginSessions(tmp_path)
    token, page_key = sessions.create()
    stored = tmp_path / "webui" / "sessions.json"
    assert token not in stored.read_text() and page_key not in stored.read_text()
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    reread = LoginSessions(tmp_path)  # a restart reads them back
    assert reread.valid(token) and reread.authorised(token, page_key)
    assert not sessions.valid("x" + token) and not sessions.valid(None)
    # The cookie alone authorises nothing: the page key must come with it, and match.
    assert not sessions.authorised(token, None) and not sessions.authorised(token, "x" + page_key)
    other, other_key = sessions.create()
    assert not sessions.authorised(token, other_key) and sessions.authorised(other, other_key)
    sessions.revoke(token)
    assert not LoginSessions(tmp_path).valid(token)
    assert not LoginSessions(tmp_path).authorised(token, page_key)


def test_the_password_gate_counts_failures_per_address_and_overall() -> None:
    gate = PasswordGate("s3cret")
    assert gate.enabled and not PasswordGate(None).enabled
    for _ in range(5):
        assert gate.attempt("10.0.0.1", "guess") == "invalid_password"
    # Blocked even with the right password: a sixth guess is not compared at all.
    assert gate.attempt("10.0.0.1", "s3cret") == "rate_limited"
    assert gate.attempt("10.0.0.2", "s3cret") is None
    assert PasswordGate(None).attempt("10.0.0.2", "") == "password_disabled"

    # Many addresses together: the overall cap (20 a minute) stops them all.
    spread = PasswordGate("s3cret")
    answers = [spread.attempt(f"10.0.1.{n}", "guess") for n in range(25)]
    assert answers == ["invalid_password"] * 20 + ["rate_limited"] * 5
    assert spread.attempt("10.0.2.1", "s3cret") == "rate_limited"
    assert spread.attempt("10.0.2.1", "\ud800") == "rate_limited"  # no crash on odd text


@pytest.mark.parametrize(
    ("hostile", "safe"),
    [
        ("../../etc/passwd", "passwd"),
        ("..\\..\\win.ini", "win.ini"),
        (".bashrc", "bashrc"),
        ("a\x00b\nc.txt", "a_b_c.txt"),
        ("..", "file"),
        ("", "file"),
        ("résumé (final).pdf", "résumé (final).pdf"),
        ("x" * 300 + ".txt", "x" * 176 + ".txt"),
        # Capped in UTF-8 bytes (180): 95 Cyrillic letters are 190 bytes, cut to 176 + ".txt".
        ("я" * 95 + ".txt", "я" * 88 + ".txt"),
        ("я" * 80 + ".txt", "я" * 80 + ".txt"),
    ],
)
def test_file_names_are_neutralised(hostile: str, safe: str) -> None:
    assert safe_name(hostile) == safe


def test_channels_are_webui_prefixed_session_ids() -> None:
    assert channel_of("abc_D-9") == "WEBUI-abc_D-9"
    assert session_of("WEBUI-abc_D-9") == "abc_D-9"
    for bad in ("", "a/b", "a.b", "x" * 65, "../x"):
        with pytest.raises(InvalidInput):
            channel_of(bad)
    for foreign in ("tg-123", "WEBUI-", "WEBUI-a.b", "webui-abc", "SESSION-x"):
        assert session_of(foreign) is None


def test_a_session_title_is_its_first_user_message_once_logged(tmp_path: Path) -> None:
    log = tmp_path / channel_of("titles-1") / LOG_NAME
    log.parent.mkdir()
    log.write_text(json.dumps({"type": "marker", "marker": "reset"}) + "\n")
    assert [s["title"] for s in list_sessions(tmp_path)] == [""]  # no message yet: not cached

    def say(text: str) -> None:
        with log.open("a") as handle:
            handle.write(json.dumps({"type": "message", "role": "user", "text": text}) + "\n")

    say("plan  the\nlaunch")
    assert [s["title"] for s in list_sessions(tmp_path)] == ["plan the launch"]
    say("something else")
    assert [s["title"] for s in list_sessions(tmp_path)] == ["plan the launch"]
