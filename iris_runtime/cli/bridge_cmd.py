"""``iris bridge recover``: fetch a sub-agent's reply from its job log by hand.

For when Iris restarted mid-request: the sub-agent finished anyway and its reply waits in
``bridge-jobs/<requestId>.jsonl`` on its side. The request carries the token Iris holds for the
agent (its ``agents.json`` token, else the API token), in a header and nowhere else.
"""

from __future__ import annotations

import json

import click
import requests

from iris_runtime.agents.registry import registry_for
from iris_runtime.bridge.protocol import bearer_header, validate_request_id
from iris_runtime.cli.common import load_settings
from iris_runtime.config import known_api_token
from iris_runtime.errors import IrisError
from iris_runtime.tls import plain_http_refusal, verify_setting


@click.group()
def bridge() -> None:
    """Talk to sub-agents' bridges."""


@bridge.command()
@click.argument("agent")
@click.argument("request_id")
@click.option("--since", default=0, show_default=True, help="Only events after this seq.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw job-log answer.")
def recover(agent: str, request_id: str, since: int, as_json: bool) -> None:
    """Print the reply to REQUEST_ID from AGENT's job log (exit 2 while it is still running)."""
    try:
        validate_request_id(request_id)
        settings = load_settings()
        entry = registry_for(settings).get(agent)
    except IrisError as exc:
        raise click.ClickException(exc.message) from None
    if entry is None:
        raise click.ClickException(f"no agent named {agent!r} in agents.json")
    # The same rules as Iris's own calls (iris_runtime.tls): no token over plain HTTP to another
    # host, and an https:// bridge verified against IRIS_TLS_CACERT.
    refusal = plain_http_refusal(
        entry.bridge_url, f"{agent}'s bridge_url", insecure=settings.insecure_http
    )
    if refusal:
        raise click.ClickException(refusal)
    url = f"{entry.bridge_url.rstrip('/')}/bridge/jobs/{request_id}"
    token = entry.token or known_api_token(settings)
    headers = bearer_header(token)
    try:
        response = requests.get(
            url,
            params={"since": since},
            headers=headers,
            timeout=30,
            verify=verify_setting(settings.tls_cacert),
        )
    except requests.exceptions.SSLError:
        raise click.ClickException(
            f"{agent} at {entry.bridge_url} failed TLS verification: its certificate is not "
            "signed by a CA Iris trusts (IRIS_TLS_CACERT) or does not name that host"
        ) from None
    except requests.RequestException as exc:
        raise click.ClickException(f"{agent} is unreachable at {entry.bridge_url}: {exc}") from None
    if response.status_code == 401:
        raise click.ClickException(
            f"{agent} refused the token: register its own with `iris agents register {agent} "
            "URL --token-stdin`, or set the API token it shares (IRIS_API_TOKEN)"
        )
    if response.status_code == 404:
        raise click.ClickException(f"{agent} has no job {request_id!r} (expired or never sent)")
    if response.status_code != 200:
        raise click.ClickException(
            f"{agent} answered HTTP {response.status_code}: {response.text[:200]}"
        )
    body = response.json()
    if as_json:
        click.echo(json.dumps(body, indent=2))
    events = body.get("events", [])
    for event in events:
        if event.get("type") == "final" and not as_json:
            click.echo(event.get("text", ""))
        elif event.get("type") == "error":
            raise click.ClickException(
                f"{agent} failed: {event.get('error')} ({event.get('code')})"
            )
    if not body.get("done"):
        last = next((e.get("text") for e in reversed(events) if e.get("type") == "status"), None)
        click.echo(f"still running{f' (last status: {last})' if last else ''}", err=True)
        raise SystemExit(2)
