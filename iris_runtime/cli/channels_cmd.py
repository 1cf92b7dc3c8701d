"""``iris channels``: list and edit the channel modes in channels.json (see docs/channels.md)."""

from __future__ import annotations

import json

import click

from iris_runtime.channel_modes.cli import config_json, describe, load, set_rule, unset_rule
from iris_runtime.cli.common import load_settings
from iris_runtime.engine.dispatch import MODES
from iris_runtime.engine.dispatch_config import DEFAULTS_KEY, parse_channels
from iris_runtime.errors import IrisError


@click.group()
def channels() -> None:
    """Channel modes: dm, admin, thread, interactive-thread, leads, passthrough."""


@channels.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_command(as_json: bool) -> None:
    """The modes in channels.json (a serving Iris applies changes without a restart)."""
    try:
        config = load(load_settings())
    except IrisError as exc:
        raise click.ClickException(f"channels.json is not valid: {exc.message}") from None
    click.echo(json.dumps(config_json(config), indent=2) if as_json else describe(config))


@channels.command(name="set")
@click.argument("channel")
@click.argument("mode", type=click.Choice(MODES))
@click.option("--admin", "admins", multiple=True, help="An admin's user id (admin mode; repeat).")
@click.option("--agent", help="The agent every message goes to (passthrough mode).")
def set_command(channel: str, mode: str, admins: tuple[str, ...], agent: str | None) -> None:
    """Give CHANNEL (an Iris channel id, or 'defaults') a MODE."""
    entry: dict[str, object] = {"mode": mode}
    if admins:
        entry["admins"] = list(admins)
    if agent is not None:
        entry["agent"] = agent
    settings = load_settings()
    try:
        # The entry alone first, for an error that names this command's options.
        rule = parse_channels(json.dumps({channel: entry}))
        parsed = rule.defaults if channel == DEFAULTS_KEY else rule.channels[channel]
        assert parsed is not None
        set_rule(settings, channel, parsed)
    except IrisError as exc:
        raise click.ClickException(exc.message) from None
    click.echo(f"{channel}: {mode}")


@channels.command(name="unset")
@click.argument("channel")
def unset_command(channel: str) -> None:
    """Remove CHANNEL's mode: it goes back to its transport's usual behaviour."""
    try:
        removed = unset_rule(load_settings(), channel)
    except IrisError as exc:
        raise click.ClickException(exc.message) from None
    if not removed:
        raise click.ClickException(f"{channel} has no mode in channels.json")
    click.echo(f"{channel}: unset")
