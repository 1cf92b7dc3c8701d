"""One-time login links: ``iris serve`` prints one at start (``issue_login_link``, called in the
gunicorn master before it forks), ``iris webui link`` prints a fresh one any time (``cli``).

Each link carries a fresh one-time key that replaces any earlier one; only its digest is stored
(see :mod:`iris_webui.auth`).
"""

from __future__ import annotations

from iris_runtime.config import Settings


def issue_login_link(settings: Settings) -> str | None:
    """The "Web UI: <link>" line ``iris serve`` prints, with a fresh one-time key (only its
    digest is stored); None when the Web UI is off."""
    url = login_url(settings)
    # One line in exactly this shape: people and tests look for "Web UI: <url>".
    return None if url is None else f"Web UI: {url}"


def login_url(settings: Settings) -> str | None:
    """A login link with a fresh one-time key (it replaces any earlier key); None when the Web
    UI is off."""
    if not settings.webui_port:
        return None
    from iris_webui.auth import issue_login_key  # only paid for when the Web UI is on

    key = issue_login_key(settings.data_dir)
    host = settings.api_host
    if host in {"0.0.0.0", "::", ""}:
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.webui_port}/login?key={key}"
