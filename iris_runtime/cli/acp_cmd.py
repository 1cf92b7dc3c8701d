"""``iris acp``: Iris as an ACP agent on stdio, for an editor (Zed, JetBrains, any ACP client)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError


@click.command("acp")
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The Iris data folder whose sessions, memory and skills to use (default: IRIS_DATA_DIR).",
)
@click.option(
    "--ask-permission",
    is_flag=True,
    envvar="IRIS_ACP_ASK_PERMISSION",
    help="Ask the editor before every bash, write or edit tool call (IRIS_ACP_ASK_PERMISSION=1).",
)
@click.option("--verbose", is_flag=True, help="Log at debug level (on stderr).")
def acp(data_dir: Path | None, ask_permission: bool, verbose: bool) -> None:
    """Speak the Agent Client Protocol on stdin/stdout; logs go to stderr."""
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if data_dir is not None:
        os.environ["IRIS_DATA_DIR"] = str(data_dir.expanduser().resolve())
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        raise click.ClickException(exc.message) from None
    from iris_runtime.acp.stdio import serve_stdio

    serve_stdio(settings, ask_permission=ask_permission)
