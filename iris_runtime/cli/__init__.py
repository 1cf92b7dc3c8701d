"""The ``iris`` command."""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path

import click

from iris_runtime import __version__
from iris_runtime.cli.common import plugin_host
from iris_runtime.cli.env_file import EnvFileError, env_file_in_argv, load_env_file
from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError

# Built-in subcommands: name -> (module under iris_runtime.cli, attribute). Each is imported
# only when it runs (or for --help): `iris serve` must not carry every other command's imports
# (requests, sqlite3, ...) into the long-lived gunicorn master and, by fork, its worker.
BUILTIN_COMMANDS = {
    "serve": ("serve", "serve"),
    "doctor": ("doctor", "doctor"),
    "plugins": ("plugins_cmd", "plugins"),
    "agents": ("agents_cmd", "agents"),
    "bridge": ("bridge_cmd", "bridge"),
    "secrets": ("secrets_cmd", "secrets"),
    "usage": ("usage_cmd", "usage"),
    "events": ("events_cmd", "events"),
    "custom-agents": ("custom_agents_cmd", "custom_agents"),
    "reach": ("reach_cmd", "reach_group"),
    "channels": ("channels_cmd", "channels"),
    "acp": ("acp_cmd", "acp"),
}


class LazyGroup(click.Group):
    """A group whose built-in subcommands are imported on first use. Plugin commands are added
    the usual way (``add_command``), so a plugin's command of the same name still wins."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(BUILTIN_COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in BUILTIN_COMMANDS and cmd_name not in self.commands:
            module_name, attribute = BUILTIN_COMMANDS[cmd_name]
            module = importlib.import_module(f"iris_runtime.cli.{module_name}")
            self.add_command(getattr(module, attribute), cmd_name)
        return super().get_command(ctx, cmd_name)


def _load_env_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    # main() has loaded it already (before plugin discovery); this covers other entry points
    # (tests invoking the group directly). Loading twice sets the same values.
    if value is not None:
        try:
            load_env_file(value)
        except EnvFileError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


@click.group(cls=LazyGroup)
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
