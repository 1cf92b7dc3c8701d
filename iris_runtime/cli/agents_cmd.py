"""``iris agents``: register, list and remove sub-agents (``agents.json`` in the data dir).

Tokens are read from stdin only (``--token-stdin``), never from arguments: argv is visible to
every user on the machine through ``ps`` and ``/proc``. Every output masks them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from iris_runtime.agents.registry import AgentEntry, AgentRegistry, registry_for
from iris_runtime.cli.common import clean_errors, load_settings, plugin_host
from iris_runtime.config import Settings, mask
from iris_runtime.errors import IrisError
from iris_runtime.secrets.selection import backend_name

if TYPE_CHECKING:
    from iris_runtime.secrets.vault_identity import AgentVaultIdentity


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
@click.option(
    "--vault-token",
    is_flag=True,
    help="Also issue the agent its own Vault token, limited to its secrets (vault backend). "
    "Prints a single-use wrapping token on stdout.",
)
@click.option(
    "--vault-wrap-ttl",
    default="5m",
    show_default=True,
    metavar="TTL",
    help="How long the wrapping token can be unwrapped.",
)
@clean_errors
def register(
    name: str,
    bridge_url: str,
    secret_names: tuple[str, ...],
    secrets_csv: str,
    token_stdin: bool,
    replace_secrets: bool,
    vault_token: bool,
    vault_wrap_ttl: str,
) -> None:
    """Register NAME at BRIDGE_URL, or update it (secrets are merged, the token kept)."""
    names = [*secret_names, *(s.strip() for s in secrets_csv.split(",") if s.strip())]
    token = _read_token() if token_stdin else None
    settings = load_settings()
    identity = _vault_identity(settings, required=vault_token)
    registry = registry_for(settings)
    previous = registry.get(name)
    entry = registry.register(name, bridge_url, names, token, merge_secrets=not replace_secrets)
    click.echo(f"registered {entry.name} in {registry.path}", err=vault_token)
    _print_entry(entry, err=vault_token)
    if identity is None:
        return
    try:
        if vault_token:
            issued = identity.provision(entry.name, entry.secrets, wrap_ttl=vault_wrap_ttl)
        else:
            identity.update_policy(entry.name, entry.secrets)  # its policy follows its list
            return
    except IrisError:
        _restore(registry, entry.name, previous)  # all or nothing: no agent without its token
        raise
    click.echo(
        f"Vault token issued (accessor {issued.accessor}). Give the agent the single-use "
        f"wrapping token below; it unwraps it once within {vault_wrap_ttl}:",
        err=True,
    )
    click.echo(issued.wrapping_token or "")


def _vault_identity(settings: Settings, *, required: bool) -> AgentVaultIdentity | None:
    """The per-agent Vault identity manager when the broker uses Vault, else None."""
    if backend_name(settings) != "vault":
        if required:
            raise click.ClickException(
                "--vault-token needs the vault backend (IRIS_SECRET_BACKEND=vault or "
                "IRIS_SECRETS_MODE=proxy)"
            )
        return None
    from iris_runtime.secrets.vault_identity import AgentVaultIdentity

    return AgentVaultIdentity(settings)


def _restore(registry: AgentRegistry, name: str, previous: AgentEntry | None) -> None:
    if previous is None:
        registry.unregister(name)
    else:
        registry.register(
            name, previous.bridge_url, previous.secrets, previous.token, merge_secrets=False
        )


@agents.command()
@click.argument("name")
@clean_errors
def unregister(name: str) -> None:
    """Remove NAME from the registry, revoking its Vault token first if it has one."""
    settings = load_settings()
    registry = registry_for(settings)
    identity = _vault_identity(settings, required=False)
    if identity is not None and identity.revoke(name):
        click.echo(f"revoked {name}'s Vault token and policy")
    if not registry.unregister(name):
        raise click.ClickException(f"no agent named {name!r} in {registry.path}")
    click.echo(f"unregistered {name}")


@agents.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@clean_errors
def list_agents(as_json: bool) -> None:
    """List registered agents (tokens masked)."""
    settings = load_settings()
    registry = registry_for(settings)
    entries = list(registry.load().values())
    states = _run_states(settings, [e.name for e in entries])
    if as_json:
        click.echo(json.dumps([{**_public(e), "run": states[e.name]} for e in entries], indent=2))
        return
    if not entries:
        click.echo(f"no agents registered ({registry.path})", err=True)
        return
    width = max(len(e.name) for e in entries)
    for entry in entries:
        token = mask(entry.token) if entry.token is not None else "-"
        secrets = ",".join(entry.secrets) or "-"
        run = states[entry.name]
        where = f"  {run['manager']}:{run['state']}" if run else ""
        click.echo(
            f"{entry.name:<{width}}  {entry.bridge_url}  secrets={secrets}  token={token}{where}"
        )


def _run_states(settings: Settings, names: list[str]) -> dict[str, dict[str, object] | None]:
    """How each spawned agent runs; a listing never fails because one backend cannot answer."""
    from iris_runtime.agents.spawn import Spawner

    try:
        spawner = Spawner(settings)
    except IrisError:
        return dict.fromkeys(names)
    states: dict[str, dict[str, object] | None] = {}
    for name in names:
        try:
            states[name] = spawner.state(name)
        except (IrisError, OSError, subprocess.SubprocessError):
            states[name] = {"manager": "unknown", "state": "unknown"}
    return states


def _print_entry(entry: AgentEntry, *, err: bool = False) -> None:
    public = _public(entry)
    click.echo(f"  bridge_url  {public['bridge_url']}", err=err)
    click.echo(f"  secrets     {', '.join(entry.secrets) or '-'}", err=err)
    click.echo(f"  token       {public['token'] or '-'}", err=err)


def _roll_back_on_termination() -> None:
    """SIGTERM and SIGHUP (a tool timeout, a closed terminal) take the Ctrl-C path, so a spawn
    undoes what it did. Further signals are ignored until the undo has finished."""

    def interrupt(signum: int, frame: object) -> None:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


def _show_progress(line: str) -> None:
    click.echo(f"  {line}", err=True)


def _env_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--env")
        out[name] = value
    return out


def _known_level(configured: str) -> str:
    """The level is one this installation has; whether it can run is the agent's own start-up
    probe's to say (a level that cannot stops the agent, and so the spawn, with the reason)."""
    from iris_runtime.tools.sandbox import split_level

    levels = plugin_host(load_settings()).sandboxes()
    if split_level(configured)[0] not in levels:
        known = ", ".join(sorted(levels))
        raise click.BadParameter(f"{configured!r} is not installed (known: {known})")
    return configured


F = TypeVar("F", bound=Callable[..., Any])

_AGENT_OPTIONS = (
    click.option("--skill", "skills", multiple=True, metavar="SKILL", help="Attach a skill."),
    click.option(
        "--mode",
        type=click.Choice(["service", "docker"]),
        default="service",
        show_default=True,
        help="A service on this host, or a Docker container through Terraform.",
    ),
    click.option(
        "--model", help="The agent's model (default: IRIS_SUBAGENT_MODEL, then IRIS_MODEL)."
    ),
    click.option(
        "--sandbox",
        default="host",
        show_default=True,
        metavar="LEVEL",
        help="The agent's sandbox level for its bash and file tools (its IRIS_SANDBOX): host, "
        "namespace[:net], gvisor[:ptrace|:kvm], docker:<container>, firecracker[:net].",
    ),
)


def _agent_options(command: F) -> F:
    """What an agent is made of (skills, mode, model): spawn and ensure take the same options."""
    for option in reversed(_AGENT_OPTIONS):
        command = option(command)
    return command


@agents.command()
@click.argument("name")
@_agent_options
@click.option(
    "--constitution",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Your own CONSTITUTION.md (placeholders like {{AGENT_NAME}} are filled in).",
)
@click.option(
    "--unique-token",
    is_flag=True,
    help="Docker mode: give the container its own API token (implied by store/proxy secrets). "
    "Service agents always get their own.",
)
@click.option(
    "--service-manager",
    type=click.Choice(["systemd", "process"]),
    help="Override the automatic choice (systemd when it runs as PID 1, else Iris's supervisor).",
)
@click.option("--env", "env_pairs", multiple=True, metavar="NAME=VALUE", help="A plain setting.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@clean_errors
def spawn(
    name: str,
    skills: tuple[str, ...],
    mode: str,
    model: str | None,
    sandbox: str,
    constitution: Path | None,
    unique_token: bool,
    service_manager: str | None,
    env_pairs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Create, register and start the sub-agent NAME; wait until it answers.

    Everything is undone when a step fails (or on Ctrl-C): no unit, container, registration or
    port is left behind.
    """
    from iris_runtime.agents.spawn import Spawner, SpawnRequest

    _roll_back_on_termination()
    settings = load_settings()
    spawner = Spawner(
        settings, plugin_skills=plugin_host(settings).skills(), progress=_show_progress
    )
    click.echo(f"spawning {name} ({mode})", err=True)
    result = spawner.spawn(
        SpawnRequest(
            name=name,
            skills=skills,
            mode=mode,
            model=model,
            constitution=constitution,
            unique_token=unique_token,
            service_manager=service_manager,
            extra_env=_env_pairs(env_pairs),
            sandbox=_known_level(sandbox),
        )
    )
    summary = {
        **_public(result.entry),
        "manager": result.record.manager,
        "api_port": result.record.api_port,
        "home": str(result.home),
        "skills": list(result.record.skills),
        "seconds": round(result.seconds, 2),
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(f"spawned {name}: {result.entry.bridge_url} ({result.record.manager})")


@agents.command()
@click.argument("name")
@_agent_options
@click.option("--unique-token", is_flag=True, help="Docker mode: its own API token (see spawn).")
@click.option(
    "--service-manager",
    type=click.Choice(["systemd", "process"]),
    help="Override the automatic choice; compared with the agent's when given.",
)
@click.option(
    "--state",
    type=click.Choice(["present", "absent"]),
    default="present",
    show_default=True,
    help="Whether the agent should exist.",
)
@click.option("--check", is_flag=True, help="Only report what would change; change nothing.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print one line: {"name", "changed", "action", "differences", "check"}.',
)
@clean_errors
def ensure(
    name: str,
    skills: tuple[str, ...],
    mode: str,
    model: str | None,
    sandbox: str,
    unique_token: bool,
    service_manager: str | None,
    state: str,
    check: bool,
    as_json: bool,
) -> None:
    """Make the sub-agent NAME exist with these settings and run (or not exist, with
    --state absent), changing only what differs: spawn it, start it, replace it (remove, home
    archived, then spawn) or remove it. Safe to run again: an agent that already matches is left
    alone. Action: created, unchanged, started, replaced, removed or absent."""
    from iris_runtime.agents.ensure import Declaration, Ensurer
    from iris_runtime.agents.spawn import Spawner

    if not check:
        _roll_back_on_termination()
    settings = load_settings()
    spawner = Spawner(
        settings, plugin_skills=plugin_host(settings).skills(), progress=_show_progress
    )
    declaration = Declaration(
        name=name,
        skills=skills,
        mode=mode,
        model=model or None,
        unique_token=unique_token,
        service_manager=service_manager,
        state=state,
        sandbox=_known_level(sandbox),
    )
    ensurer = Ensurer(spawner)
    outcome = ensurer.plan(declaration) if check else ensurer.apply(declaration)
    verb = f"would be {outcome.action}" if check and outcome.changed else outcome.action
    reasons = f": {'; '.join(outcome.differences)}" if outcome.differences else ""
    click.echo(f"{outcome.name}: {verb}{reasons}", err=as_json)
    if as_json:
        click.echo(json.dumps(outcome.to_json()))


@agents.command()
@click.argument("name")
@click.option("--purge", is_flag=True, help="Delete its home too (default: keep it archived).")
@clean_errors
def remove(name: str, purge: bool) -> None:
    """Stop and remove the spawned agent NAME (unit, process or container, registration, Vault
    token). Its home is kept under <agents dir>/.removed unless --purge."""
    from iris_runtime.agents.spawn import Spawner

    _roll_back_on_termination()
    settings = load_settings()
    Spawner(settings, progress=_show_progress).remove(name, purge=purge)
    click.echo(f"removed {name}")
