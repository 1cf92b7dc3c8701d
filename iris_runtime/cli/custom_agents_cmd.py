"""``iris custom-agents``: list the manifests in agents.d, restart one agent, sign one in."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import click
import requests

from iris_runtime.cli.common import load_settings
from iris_runtime.config import Settings, known_api_token
from iris_runtime.custom_agents.listing import listing, read_catalog
from iris_runtime.custom_agents.signin import READY, login_argv, status_of
from iris_runtime.tls import verify_setting


@click.group("custom-agents")
def custom_agents() -> None:
    """Custom agents: relay and ACP agents declared in agents.d (spec 004)."""


@custom_agents.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_agents(as_json: bool) -> None:
    """The loaded manifests (kind, label, shape, status) and the skipped ones, with reasons."""
    shown = listing(read_catalog(load_settings()))
    if as_json:
        click.echo(json.dumps(shown, indent=2))
        return
    for agent in shown["agents"]:
        click.echo(
            f"{agent['kind']:<20} {agent['label']:<24} {agent['shape']:<6} {agent['status']:<14} "
            f"{agent['path']}"
        )
    for skipped in shown["skipped"]:
        click.echo(f"skipped {skipped['path']}: {skipped['reason']}")
    if not shown["agents"] and not shown["skipped"]:
        click.echo("no custom agents (put manifests in agents.d)")


@custom_agents.command()
@click.argument("kind")
def restart(kind: str) -> None:
    """Re-read KIND's manifest in the serving Iris (how an edited file takes effect)."""
    settings = load_settings()
    answer = _api(settings, "POST", f"/custom-agents/{kind}/restart", json={})
    agent = answer.get("agent")
    if agent is None:
        raise click.ClickException(f"{kind} is no longer loaded: {answer.get('reason')}")
    click.echo(f"{kind} restarted: {agent['label']} ({agent['status']})")


@custom_agents.command()
@click.argument("kind")
@click.option("--provider", required=True, help="One of the providers the manifest offers.")
def setup(kind: str, provider: str) -> None:
    """Sign KIND in: run its login command for PROVIDER here, in this terminal."""
    agent = read_catalog(load_settings()).get(kind)
    if agent is None:
        raise click.ClickException(f"no custom agent named {kind!r} is loaded")
    try:
        argv = login_argv(agent.manifest, provider)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    # Interactive by design: stdin, stdout and stderr stay the operator's terminal.
    code = subprocess.call(argv, env=os.environ.copy())
    if code != 0:
        raise click.ClickException(f"the login command exited with {code}")
    click.echo(f"{kind}: signed in" if _signed_in(kind) else f"{kind}: still not signed in")


def _signed_in(kind: str) -> bool:
    agent = read_catalog(load_settings()).get(kind)
    return agent is not None and status_of(agent.manifest) == READY


def _api(settings: Settings, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    url = f"{settings.local_api_url}{path}"
    headers = {"Authorization": f"Bearer {known_api_token(settings)}"}
    verify = verify_setting(settings.tls_cacert)
    try:
        response = requests.request(
            method, url, headers=headers, timeout=30, verify=verify, **kwargs
        )
    except requests.RequestException as exc:
        raise click.ClickException(f"Iris is not reachable at {url}: {exc}") from None
    body: dict[str, Any] = response.json() if response.content else {}
    if response.status_code != 200:
        raise click.ClickException(str(body.get("error") or f"HTTP {response.status_code}"))
    return body
