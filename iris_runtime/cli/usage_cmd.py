"""``iris usage``: tokens and cost per channel and per answering agent, from the logs."""

from __future__ import annotations

import json

import click

from iris_runtime.cli.common import load_settings
from iris_runtime.engine.provider import Usage
from iris_runtime.engine.sessions import LOG_NAME, SessionStore, usage_by_agent
from iris_runtime.engine.usage import total, usage_to_json


def _row(name: str, usage: Usage) -> str:
    tokens = (
        usage.input_tokens
        + usage.output_tokens
        + usage.cache_read_tokens
        + usage.cache_write_tokens
    )
    return (
        f"{name:<40} {usage.input_tokens:>12,} {usage.output_tokens:>10,} "
        f"{usage.cache_read_tokens:>12,} {tokens:>12,} {usage.cost_usd:>10.4f}"
    )


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def usage(as_json: bool) -> None:
    """Print token usage and cost per channel and per agent."""
    settings = load_settings()
    store = SessionStore(settings.data_dir)
    by_channel: dict[str, Usage] = {}
    by_agent: dict[str, Usage] = {}
    for log in sorted(settings.data_dir.glob(f"*/{LOG_NAME}")):
        channel = log.parent.name
        totals = usage_by_agent(store.entries(channel))
        if not totals:
            continue
        by_channel[channel] = total(totals.values())
        for agent, spent in totals.items():
            by_agent[agent] = by_agent.get(agent, Usage()) + spent
    everything = total(by_channel.values())
    if as_json:
        click.echo(
            json.dumps(
                {
                    "total": usage_to_json(everything),
                    "byChannel": {k: usage_to_json(v) for k, v in by_channel.items()},
                    "byAgent": {k: usage_to_json(v) for k, v in by_agent.items()},
                },
                indent=2,
            )
        )
        return
    header = f"{'':<40} {'input':>12} {'output':>10} {'cache read':>12} {'total':>12} {'USD':>10}"
    for title, table in (("Per channel", by_channel), ("Per agent", by_agent)):
        click.echo(f"{title}\n{header}")
        for name, spent in sorted(table.items()):
            click.echo(_row(name, spent))
        click.echo("")
    click.echo(_row("TOTAL", everything))
