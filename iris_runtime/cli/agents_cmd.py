"""``iris agents``: register, list and remove sub-agents (``agents.json`` in the data dir).

Tokens are read from stdin only (``--token-stdin``), never from arguments: argv is visible to
every user on the machine through ``ps`` and ``/proc``. Every output masks them.
"""

from __future__ import annotations

import json
import sys

import click

from iris_runtime.agents.registry import AgentEntry, AgentRegistry, registry_for
from iris_runtime.cli.common import clean_errors, load_settings
from iris_runtime.config import mask


def _registry() -> AgentRegistry:
    return registry_for(load_settings())


def _public(entry: AgentEntry) -> dict[str, object]:
    return {
        "name": entry.name,
        "bridge_url": entry.bridge_url,
        "secrets": list(entry.secrets),
        "token": mask(entry.token) if entry.token is not None else None,
    }


def _read_token() -> str:
    stream = sys.stdin
    if stream is None:
        raise click.ClickException("--token-stdin: stdin is closed")
    if stream.isatty():
        value: str = click.prompt("Token", hide_input=True, err=True)
    else:
        value = stream.readline()
    token = value.strip()
    if not token:
        raise click.ClickException("--token-stdin: no token on stdin (expected one line)")
    return token


@click.group()
def agents() -> None:
    """Manage the sub-agents this Iris can reach."""


@agents.command()
@click.argument("name")
@click.argument("bridge_url")
@click.option(
    "--secret", "secret_names", multiple=True, metavar="NAME", help="A secret the agent may use."
)
@click.option("--secrets-csv", default="", metavar="A,B", help="Secret names, comma-separated.")
@click.option("--token-stdin", is_flag=True, help="Read the agent's token from stdin (one line).")
@click.option(
    "--replace-secrets",
    is_flag=True,
    help="Replace the agent's secret list instead of adding to it.",
)
@clean_errors
def register(
    name: str,
    bridge_url: str,
    secret_names: tuple[str, ...],
    secrets_csv: str,
    token_stdin: bool,
    replace_secrets: bool,
) -> None:
    """Register NAME at BRIDGE_URL, or update it (secrets are merged, the token kept)."""
    names = [*secret_names, *(s.strip() for s in secrets_csv.split(",") if s.strip())]
    token = _read_token() if token_stdin else None
    registry = _registry()
    entry = registry.register(name, bridge_url, names, token, merge_secrets=not replace_secrets)
    click.echo(f"registered {entry.name} in {registry.path}")
    _print_entry(entry)


@agents.command()
@click.argument("name")
@clean_errors
def unregister(name: str) -> None:
    """Remove NAME from the registry."""
    registry = _registry()
    if not registry.unregister(name):
        raise click.ClickException(f"no agent named {name!r} in {registry.path}")
    click.echo(f"unregistered {name}")


@agents.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@clean_errors
def list_agents(as_json: bool) -> None:
    """List registered agents (tokens masked)."""
    registry = _registry()
    entries = list(registry.load().values())
    if as_json:
        click.echo(json.dumps([_public(e) for e in entries], indent=2))
        return
    if not entries:
        click.echo(f"no agents registered ({registry.path})", err=True)
        return
    width = max(len(e.name) for e in entries)
    for entry in entries:
        token = mask(entry.token) if entry.token is not None else "-"
        secrets = ",".join(entry.secrets) or "-"
        click.echo(f"{entry.name:<{width}}  {entry.bridge_url}  secrets={secrets}  token={token}")


def _print_entry(entry: AgentEntry) -> None:
    public = _public(entry)
    click.echo(f"  bridge_url  {public['bridge_url']}")
    click.echo(f"  secrets     {', '.join(entry.secrets) or '-'}")
    click.echo(f"  token       {public['token'] or '-'}")
