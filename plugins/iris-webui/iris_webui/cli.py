"""``iris webui link``: a fresh one-time login link, for when the one ``iris serve`` printed has
been used or has expired (or another browser needs signing in).

Only the new key's digest is written to ``<data>/run/webui-login.json``, replacing the previous
key; the running server reads that file on every login, so the link works at once, without a
restart. Run it as the user that runs Iris, with the same ``IRIS_DATA_DIR`` and
``IRIS_WEBUI_PORT``.
"""

from __future__ import annotations

import click

from iris_runtime.cli.common import clean_errors, load_settings
from iris_webui.login_link import login_url


@click.group()
def webui() -> None:
    """The Web UI (IRIS_WEBUI_PORT)."""


@webui.command()
@clean_errors
def link() -> None:
    """Print a new one-time login link (valid 10 minutes, single use)."""
    url = login_url(load_settings())
    if url is None:
        raise click.ClickException("the Web UI is off: set IRIS_WEBUI_PORT")
    click.echo(url)  # stdout only: not a log line
