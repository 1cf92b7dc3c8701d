"""``iris reach``, also installed as ``wireling``: the reach socket's requests from a script.

``note`` and ``run`` go to ``--chat``, else (inside a turn) the chat named by
``IRONWIRE_CHAT_ID``, the variable the spec's agents read, else Iris's default chat. Errors go to
stderr with a non-zero exit, so a cron job notices.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from iris_runtime.custom_agents.reach_client import ReachError, reach

CHAT_VARIABLE = "IRONWIRE_CHAT_ID"  # spec 004's name, so its scripts run unchanged


def _socket() -> Path:
    for variable in ("IRIS_REACH_SOCKET", "WIRELING_REACH_SOCK"):
        if os.environ.get(variable, "").strip():
            return Path(os.environ[variable].strip())
    from iris_runtime.cli.common import load_settings
    from iris_runtime.custom_agents.settings import CustomAgentSettings

    return CustomAgentSettings.from_settings(load_settings()).reach_socket


def _send(op: str, **fields: Any) -> dict[str, Any]:
    try:
        return reach(_socket(), op, **{k: v for k, v in fields.items() if v is not None})
    except ReachError as exc:
        raise click.ClickException(str(exc)) from None


def _chat(chat: str | None) -> str | None:
    return chat or os.environ.get(CHAT_VARIABLE, "").strip() or None


_chat_option = click.option("--chat", help="The chat's id (default: the turn's, else Iris's).")
_from_option = click.option("--from", "from_", help="Who is speaking: a display name, 1-32 chars.")


@click.group("reach")
def reach_group() -> None:
    """Reach the owner's chats through Iris's reach socket."""


@reach_group.command()
@_chat_option
@_from_option
@click.argument("text", nargs=-1, required=True)
def note(chat: str | None, from_: str | None, text: tuple[str, ...]) -> None:
    """Put TEXT in a chat as a note (no turn)."""
    answer = _send("note", text=" ".join(text), chat=_chat(chat), **{"from": from_})
    click.echo(answer.get("chat_id", ""))


@reach_group.command()
@_chat_option
@_from_option
@click.argument("text", nargs=-1, required=True)
def run(chat: str | None, from_: str | None, text: tuple[str, ...]) -> None:
    """Start a turn with TEXT, as if the owner had written it."""
    answer = _send("run", text=" ".join(text), chat=_chat(chat), **{"from": from_})
    click.echo(answer.get("chat_id", ""))


@reach_group.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def chats(as_json: bool) -> None:
    """List the chats (id and Iris channel)."""
    listed = _send("chats").get("chats", [])
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return
    for chat in listed:
        click.echo(f"{chat.get('chat_id')}  {chat.get('channel')}")


@reach_group.command("chat.new")
def chat_new() -> None:
    """Make a new chat and print its id."""
    click.echo(_send("chat.new").get("chat_id", ""))


def wireling() -> None:
    """The ``wireling`` command: ``iris reach`` under the spec's name."""
    reach_group(prog_name="wireling")
