"""The ``iris`` command."""

from __future__ import annotations

import contextlib
import logging
import sys

import click

from iris_runtime import __version__
from iris_runtime.cli.doctor import doctor
from iris_runtime.cli.plugins_cmd import plugins
from iris_runtime.cli.serve import serve
from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError


@click.group()
@click.version_option(__version__, prog_name="iris")
def cli() -> None:
    """Iris: a self-hosted AI agent orchestrator."""


cli.add_command(serve)
cli.add_command(doctor)
cli.add_command(plugins)


def _add_plugin_commands() -> None:
    from iris_runtime.plugins import PluginHost

    # With a broken configuration the subcommand being run reports the error itself.
    with contextlib.suppress(ConfigError):
        PluginHost(Settings.from_env()).add_commands(cli)


def main() -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    _add_plugin_commands()
    cli(prog_name="iris")
