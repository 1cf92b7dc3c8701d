"""``iris secrets``: manage the secret store and read its audit trail.

Values are read from stdin or typed at a hidden prompt, never taken from arguments: argv is
visible to every user on the machine. The commands go through the same broker as the HTTP API,
as the unrestricted caller ``iris``, so every change leaves an audit line.
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import datetime

import click

from iris_runtime.cli.common import clean_errors, load_settings, plugin_host
from iris_runtime.runtime import prepare_data_dir
from iris_runtime.secrets.audit import DECISIONS, AuditRecord
from iris_runtime.secrets.broker import IRIS_CALLER, SecretBroker
from iris_runtime.secrets.selection import broker_for


def _broker() -> SecretBroker:
    settings = load_settings()
    prepare_data_dir(settings)
    return broker_for(settings, plugin_host(settings).secret_backends())


def _request_id() -> str:
    return f"cli-{uuid.uuid4().hex[:16]}"


def _read_value() -> str:
    stream = sys.stdin
    if stream is None:
        raise click.ClickException("no value: stdin is closed")
    if stream.isatty():
        value: str = click.prompt(
            "Value", hide_input=True, confirmation_prompt=True, err=True, show_default=False
        )
        return value
    value = stream.read()
    # `echo value | iris secrets set NAME` adds one newline that is not part of the secret.
    if value.endswith("\n"):
        value = value[:-1]
        if value.endswith("\r"):
            value = value[:-1]
    if not value:
        raise click.ClickException("no value on stdin")
    return value


@click.group()
def secrets() -> None:
    """Set, read, list and remove secrets; read the audit log."""


@secrets.command(name="set")
@click.argument("name")
@clean_errors
def set_secret(name: str) -> None:
    """Store NAME; the value comes from stdin, or a hidden prompt on a terminal."""
    _broker().put(IRIS_CALLER, name, _read_value(), _request_id())
    click.echo(f"stored {name}", err=True)


@secrets.command(name="get")
@click.argument("name")
@clean_errors
def get_secret(name: str) -> None:
    """Print NAME's value on stdout."""
    click.echo(_broker().read(IRIS_CALLER, name, _request_id()))


@secrets.command(name="rm")
@click.argument("name")
@clean_errors
def remove_secret(name: str) -> None:
    """Delete NAME from the store."""
    _broker().delete(IRIS_CALLER, name, _request_id())
    click.echo(f"removed {name}", err=True)


@secrets.command(name="ls")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@clean_errors
def list_secrets(as_json: bool) -> None:
    """List the names in the store (never values)."""
    names = _broker().names(IRIS_CALLER, _request_id())
    if as_json:
        click.echo(json.dumps(names))
        return
    for name in names:
        click.echo(name)


@secrets.command(name="audit")
@click.option("--caller", help="Only requests by this caller (iris or an agent name).")
@click.option("--name", "secret", help="Only requests for this secret.")
@click.option("--decision", type=click.Choice(DECISIONS), help="Only this decision.")
@click.option("--since", type=click.DateTime(), help="Only requests at or after this time (UTC).")
@click.option("--limit", type=click.IntRange(min=1), help="Only the last N matching lines.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, as stored.")
@clean_errors
def audit(
    caller: str | None,
    secret: str | None,
    decision: str | None,
    since: datetime | None,
    limit: int | None,
    as_json: bool,
) -> None:
    """Show who asked for which secret, and what they got (never values)."""
    floor = since.strftime("%Y-%m-%dT%H:%M:%S") if since else None
    matches = [
        record
        for record in _broker().audit.records()
        if (caller is None or record.caller == caller)
        and (secret is None or record.name == secret)
        and (decision is None or record.decision == decision)
        and (floor is None or record.time >= floor)
    ]
    for record in matches[-limit:] if limit else matches:
        click.echo(_audit_line(record, as_json))


def _audit_line(record: AuditRecord, as_json: bool) -> str:
    if as_json:
        return json.dumps(record.__dict__)
    return (
        f"{record.time}  {record.caller:<16} {record.action:<6} {record.name:<32} "
        f"{record.decision:<15} {record.request_id}"
    )
