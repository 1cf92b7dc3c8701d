"""The ``iris`` command."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from iris_runtime import __version__
from iris_runtime.cli.agents_cmd import agents
from iris_runtime.cli.bridge_cmd import bridge
from iris_runtime.cli.common import plugin_host
from iris_runtime.cli.doctor import doctor
from iris_runtime.cli.env_file import EnvFileError, env_file_in_argv, load_env_file
from iris_runtime.cli.events_cmd import events
from iris_runtime.cli.plugins_cmd import plugins
from iris_runtime.cli.secrets_cmd import secrets
from iris_runtime.cli.serve import serve
from iris_runtime.cli.usage_cmd import usage
from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError


def _load_env_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    # main() has loaded it already (before plugin discovery); this covers other entry points
    # (tests invoking the group directly). Loading twice sets the same values.
    if value is not None:
        try:
            load_env_file(value)
        except EnvFileError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


@click.group()
@click.version_option(__version__, prog_name="iris")
@click.option(
    "--env-file",
    type=click.Path(path_type=Path),
    callback=_load_env_file,
    expose_value=False,
    metavar="PATH",
    help="Read KEY=VALUE settings from PATH first (values override the environment, as "
    "systemd's EnvironmentFile= does), e.g. the service's /iris/.env.",
)
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
    env_file = env_file_in_argv(sys.argv[1:])
    if env_file is not None:
        try:
            load_env_file(env_file)
        except EnvFileError as exc:
            click.echo(f"Error: {exc}", err=True)
            sys.exit(2)
    _add_plugin_commands()
    cli(prog_name="iris")
