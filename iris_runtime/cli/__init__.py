"""The ``iris`` command."""

from __future__ import annotations

import logging
import sys

import click

from iris_runtime import __version__
from iris_runtime.cli.agents_cmd import agents
from iris_runtime.cli.bridge_cmd import bridge
from iris_runtime.cli.common import plugin_host
from iris_runtime.cli.doctor import doctor
from iris_runtime.cli.events_cmd import events
from iris_runtime.cli.plugins_cmd import plugins
from iris_runtime.cli.secrets_cmd import secrets
from iris_runtime.cli.serve import serve
from iris_runtime.cli.usage_cmd import usage
from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError


@click.group()
@click.version_option(__version__, prog_name="iris")
def cli() -> None:
    """Iris: a self-hosted AI agent orchestrator."""


cli.add_command(serve)
cli.add_command(doctor)
cli.add_command(plugins)
cli.add_command(agents)
cli.add_command(bridge)
cli.add_command(secrets)
cli.add_command(usage)
cli.add_command(events)


def _add_plugin_commands() -> None:
    try:
        host = plugin_host(Settings.from_env())
    except ConfigError:
        return  # the subcommand being run reports configuration errors itself
    try:
        host.add_commands(cli)
    except Exception:
        # A broken plugin must not take down `iris doctor` and `iris plugins`, which diagnose it.
        logging.getLogger(__name__).exception("plugin commands unavailable")


def main() -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    _add_plugin_commands()
    cli(prog_name="iris")
