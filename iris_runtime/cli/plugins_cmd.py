"""``iris plugins``: what is loaded, from where, and which hooks each implements."""

from __future__ import annotations

import json

import click

from iris_runtime.cli.common import load_settings, plugin_host


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def plugins(as_json: bool) -> None:
    """List loaded plugins and their hooks."""
    host = plugin_host(load_settings())
    loaded = host.plugins()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "plugins": [
                        {"name": p.name, "source": p.source, "hooks": list(p.hooks)} for p in loaded
                    ],
                    "skipped": host.skipped,
                    "errors": host.errors,
                },
                indent=2,
            )
        )
    else:
        for info in loaded:
            click.echo(f"{info.name:<20} {info.source:<24} {', '.join(info.hooks)}")
        for name in host.skipped:
            click.echo(f"{name:<20} skipped (not in IRIS_LOAD_PLUGINS)")
        for name, problem in host.errors.items():
            click.echo(f"{name:<20} ERROR {problem}")
    if host.errors:
        raise SystemExit(1)
