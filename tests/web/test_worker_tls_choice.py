"""How the worker decides TLS: per accepted connection, by the address it arrived on, and
closed (an error) when it cannot tell which ports speak TLS."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from iris_runtime.tls import is_loopback, url_for
from iris_runtime.web.worker import IrisWorker


def test_a_worker_whose_app_has_no_settings_fails_closed() -> None:
    worker = IrisWorker.__new__(IrisWorker)
    worker.wsgi = SimpleNamespace()  # no runtime, no settings
    with pytest.raises(RuntimeError, match="which ports speak TLS"):
        _ = worker.tls_by_port


def test_a_connection_on_loopback_is_plain_even_on_a_tls_port(tmp_path: Path) -> None:
    worker = IrisWorker.__new__(IrisWorker)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        context = object()
        worker.__dict__["tls_by_port"] = {port: context}
        with socket.create_connection(("127.0.0.1", port)) as _client:
            accepted, _ = listener.accept()
            with accepted:
                assert worker._tls_for(listener, accepted) is None


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.1", False),
        ("::ffff:192.0.2.1", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_url_for_brackets_ipv6_once() -> None:
    assert url_for("https", "2001:db8::1", 4000) == "https://[2001:db8::1]:4000"
    assert url_for("https", "[2001:db8::1]", 4000) == "https://[2001:db8::1]:4000"
    assert url_for("http", "127.0.0.1", 4000) == "http://127.0.0.1:4000"
