"""``iris events``: list, add, remove and fire scheduled events.

These commands write the same files a person would drop into ``events/`` (atomically, so a
running Iris never sees half of one), which is why they work whether or not Iris is running.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from iris_runtime.cli.common import clean_errors, load_settings
from iris_runtime.events.catalog import add_event, fire_event, list_events, remove_event
from iris_runtime.events.files import Folder, choose_folder, folders_on_disk, parse_event_fields
from iris_runtime.events.schedule import SystemClock

_transport_option = click.option(
    "--transport",
    metavar="ID",
    help="Use <ID>/events/ (events for that transport's channels) instead of events/: slack, "
    "telegram, or a transport whose folder a running Iris created.",
)


def _folder(data_dir: Path, transport: str | None) -> Folder:
    # No Iris is needed to manage events, so no transport is running here: the folders a
    # running Iris watches are known from the data dir (see folders_on_disk).
    return choose_folder(folders_on_disk(data_dir), transport)


@click.group()
def events() -> None:
    """Manage scheduled events (the files in the data dir's events/ folders)."""


@events.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@clean_errors
def list_command(as_json: bool) -> None:
    """List every event file, with its next run or the reason it was rejected."""
    settings = load_settings()
    folders = folders_on_disk(settings.data_dir)
    entries = list_events(settings.data_dir, folders, SystemClock().now())
    if as_json:
        click.echo(json.dumps(entries, indent=2, ensure_ascii=False))
        return
    if not entries:
        click.echo(f"no events in {settings.data_dir}/events/", err=True)
        return
    width = max(len(e["id"]) for e in entries)
    for entry in entries:
        click.echo(f"{entry['id']:<{width}}  {_summary(entry)}")


def _summary(entry: dict[str, Any]) -> str:
    if entry["status"] == "rejected":
        return f"REJECTED: {entry['error']}"
    when = entry["schedule"] and f"{entry['schedule']} ({entry['timezone']})"
    return f"{entry['type']:<9}  {entry['channelId']}  next {entry['next']}  {when or ''}".rstrip()


@events.command()
@click.argument("name")
@click.option("--channel", required=True, help="The channel the run happens on.")
@click.option("--text", required=True, help="What Iris is asked to do ('-' reads stdin).")
@click.option("--at", "at", metavar="ISO", help="One-shot: an ISO-8601 time with a UTC offset.")
@click.option("--schedule", metavar="CRON", help="Periodic: a 5-field cron expression.")
@click.option("--timezone", metavar="IANA", help="Periodic: the cron's time zone.")
@_transport_option
@click.option("--replace", is_flag=True, help="Overwrite an existing event of that name.")
@clean_errors
def add(
    name: str,
    channel: str,
    text: str,
    at: str | None,
    schedule: str | None,
    timezone: str | None,
    transport: str | None,
    replace: bool,
) -> None:
    """Add event NAME: immediate, or one-shot (--at), or periodic (--schedule, --timezone)."""
    if at and (schedule or timezone):
        raise click.UsageError("give --at (one-shot) or --schedule (periodic), not both")
    if bool(schedule) != bool(timezone):
        raise click.UsageError(
            "a periodic event needs both --schedule and --timezone (e.g. Europe/Berlin)"
        )
    if text == "-":
        text = sys.stdin.read()
    fields: dict[str, Any] = {"type": "immediate", "channelId": channel, "text": text}
    if at:
        fields.update(type="one-shot", at=at)
    elif schedule:
        fields.update(type="periodic", schedule=schedule, timezone=timezone)
    spec = parse_event_fields(fields)
    data_dir = load_settings().data_dir
    path = add_event(data_dir, _folder(data_dir, transport), name, spec, replace=replace)
    click.echo(f"added {path}")


@events.command(name="rm")
@click.argument("name")
@_transport_option
@clean_errors
def remove(name: str, transport: str | None) -> None:
    """Remove event NAME (it will not run again)."""
    data_dir = load_settings().data_dir
    path = remove_event(data_dir, _folder(data_dir, transport), name)
    click.echo(f"removed {path}")


@events.command()
@click.argument("name")
@_transport_option
@clean_errors
def fire(name: str, transport: str | None) -> None:
    """Run event NAME once now (its own schedule is unchanged)."""
    data_dir = load_settings().data_dir
    path = fire_event(data_dir, _folder(data_dir, transport), name, SystemClock().now())
    click.echo(f"fired {name}: {path}")
