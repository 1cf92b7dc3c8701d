"""``iris doctor``: the effective configuration (secrets masked) and what would stop Iris."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import click

from iris_runtime import data_layout
from iris_runtime.cli.common import listen_ports, plugin_host, port_problem
from iris_runtime.cli.sandbox_checks import sandbox_checks
from iris_runtime.config import Settings, mask
from iris_runtime.errors import ConfigError, IrisError
from iris_runtime.events.state import DB_NAME, database_problem


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str


def _data_dir_checks(settings: Settings) -> list[Check]:
    path = settings.data_dir
    if not path.exists():
        return [Check("data_dir", "warn", f"{path} does not exist yet (created on first serve)")]
    checks = []
    mode = path.stat().st_mode & 0o777
    if not os.access(path, os.W_OK):
        checks.append(Check("data_dir", "fail", f"{path} is not writable"))
    elif mode & 0o077:
        checks.append(Check("data_dir", "warn", f"{path} is mode {mode:o}; expected 700"))
    else:
        checks.append(Check("data_dir", "ok", f"{path} (mode {mode:o})"))
    checks.extend(_private_file_checks(settings))
    checks.append(_events_check(settings))
    return checks


def _events_check(settings: Settings) -> Check:
    # Iris still starts with a broken state.db, but runs no scheduled events: say so here.
    path = settings.data_dir / DB_NAME
    problem = database_problem(path)
    if problem is None:
        return Check("events", "ok", f"{path}" if path.exists() else "state.db not created yet")
    return Check(
        "events",
        "fail",
        f"{path}: {problem}; scheduled events are disabled until it is repaired or moved "
        "aside (see docs/events.md)",
    )


# Files that hold tokens, keys or who-asked-for-what: anything looser than 0600 is a finding.
PRIVATE_FILES = {
    "token_file": data_layout.API_TOKEN,
    "agents_json": data_layout.AGENTS_JSON,
    "secret_store_key": f"{data_layout.SECRETS_DIR}/store.key",
    "secret_store": f"{data_layout.SECRETS_DIR}/store.enc",
    "vault_accessors": f"{data_layout.SECRETS_DIR}/vault-agents.json",
    "secrets_audit": f"{data_layout.AUDIT_DIR}/secrets.jsonl",
}


def _private_file_checks(settings: Settings) -> list[Check]:
    checks = []
    for name, relative in PRIVATE_FILES.items():
        path = settings.data_dir / relative
        if not path.exists():
            continue
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            checks.append(Check(name, "fail", f"{path} is mode {mode:o}; run chmod 600 {path}"))
        else:
            checks.append(Check(name, "ok", f"{path} (mode {mode:o})"))
    return checks


def _port_checks(settings: Settings) -> list[Check]:
    out = []
    for name, port in listen_ports(settings).items():
        problem = port_problem(settings.api_host, port)
        status, detail = (
            ("warn", f"{problem} (is Iris already running?)") if problem else ("ok", "free")
        )
        out.append(Check(name, status, f"{settings.api_host}:{port} {detail}"))
    return out


def _plugin_checks(settings: Settings, probe_sandbox: bool = False) -> list[Check]:
    host = plugin_host(settings)
    checks = [Check(f"plugin:{n}", "fail", p) for n, p in host.errors.items()]
    names = ", ".join(p.name for p in host.plugins())
    checks.append(Check("plugins", "ok", names))
    providers = host.providers()
    if settings.provider in providers:
        checks.append(Check("provider", "ok", settings.provider))
    else:
        checks.append(
            Check(
                "provider",
                "fail",
                f"{settings.provider!r} is not installed (known: {', '.join(sorted(providers))})",
            )
        )
    checks.extend(_model_checks(settings))
    rows, _ = sandbox_checks(settings, host, probe=probe_sandbox)
    checks.extend(Check(*row) for row in rows)
    backends = sorted(host.secret_backends())
    checks.append(Check("secret_backends", "ok", ", ".join(backends) or "none installed"))
    checks.append(_secret_store_check(settings))
    return checks


def _secret_store_check(settings: Settings) -> Check:
    """The mode, where values come from, and whether that store answers now."""
    from iris_runtime.secrets.selection import broker_for

    prefix = f"mode {settings.secrets_mode}"
    if settings.secret_broker_url and settings.secrets_mode != "env":
        return Check(
            "secrets", "ok", f"{prefix}: resolved by the broker at {settings.secret_broker_url}"
        )
    try:
        broker = broker_for(settings, plugin_host(settings).secret_backends())
        broker.backend.check()
    except IrisError as exc:
        return Check("secrets", "fail", f"{prefix}: {exc.message}")
    return Check("secrets", "ok", f"{prefix}: {broker.backend.describe()}")


KEY_VARIABLES = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def _model_checks(settings: Settings) -> list[Check]:
    """The model resolves in the table, and the provider's key is present (masked)."""
    variable = KEY_VARIABLES.get(settings.provider)
    if variable is None:
        return []
    from iris_runtime.providers.models import is_local_url, resolve_model

    base_url = settings.env.get("IRIS_OPENAI_BASE_URL") or settings.env.get("OPENAI_BASE_URL")
    local = settings.provider == "openai" and is_local_url(base_url)
    checks = []
    try:
        info = resolve_model(settings, settings.provider, base_url)
        checks.append(Check("model", "ok", f"{info.id} (context {info.context_window:,})"))
    except ConfigError as exc:
        checks.append(Check("model", "fail", exc.message))
    if settings.secret_broker_url and settings.secrets_mode != "env":
        checks.append(_broker_key_check(settings, variable))
        return checks
    key = settings.env.get(variable, "")
    if key:
        checks.append(Check("api_key", "ok", f"{variable} {mask(key)}"))
    elif not local:
        checks.append(Check("api_key", "warn", f"{variable} is not set; runs will fail"))
    return checks


def _broker_key_check(settings: Settings, variable: str) -> Check:
    """A sub-agent's key lives with its parent's broker: ask for it, as a run would."""
    from iris_runtime.providers.keys import broker_client

    try:
        key = broker_client(settings).get(variable)
    except IrisError as exc:
        return Check("api_key", "fail", exc.message)
    return Check("api_key", "ok", f"{variable} {mask(key)} from the secret broker")


def run_checks(settings: Settings, *, probe_sandbox: bool = False) -> list[Check]:
    token_state = (
        "set"
        if settings.api_token
        else (
            "in token file" if settings.token_file.exists() else "not set (created on first serve)"
        )
    )
    return [
        Check("api_token", "ok", token_state),
        *_data_dir_checks(settings),
        *_port_checks(settings),
        *_plugin_checks(settings, probe_sandbox),
        _spawn_check(settings),
        _session_agents_check(settings),
        _custom_agents_check(settings),
        _channels_check(settings),
    ]


def _channels_check(settings: Settings) -> Check:
    """channels.json: the channel modes a serving Iris would apply, or why it would not."""
    from iris_runtime.channel_modes.cli import channels_summary

    status, detail = channels_summary(settings)
    return Check("channels", status, detail)


def _session_agents_check(settings: Settings) -> Check:
    """session-agents.json: the agent ids and sub-agent settings Iris would run with."""
    from iris_runtime.session_agents.config import load
    from iris_runtime.session_agents.profiles import ProfileError, load_profiles
    from iris_runtime.session_agents.setup import ModelCatalog

    config = load(settings.data_dir, ModelCatalog(settings).knows)
    if config.problem:
        return Check(
            "session_agents", "fail", f"{config.problem}; Iris runs with the defaults (main only)"
        )
    for entry in config.agents.values():
        try:
            load_profiles(entry.directory)
        except ProfileError as exc:
            return Check("session_agents", "fail", f"agent {entry.id!r}: {exc}")
    lane = config.max_concurrent or settings.lane_subagent
    archive = config.archive_after_minutes
    archived = f"archived after {archive:g} min" if archive else "never archived"
    return Check(
        "session_agents",
        "ok",
        f"agent ids {', '.join(sorted(config.agents))}; {lane} sub-agents at once; {archived}",
    )


def _custom_agents_check(settings: Settings) -> Check:
    """The manifests in agents.d: which load, which are skipped and why, which need sign-in."""
    from iris_runtime.custom_agents.listing import doctor_summary

    try:
        status, detail = doctor_summary(settings)
    except ConfigError as exc:
        return Check("custom_agents", "fail", exc.message)
    return Check("custom_agents", status, detail)


def _spawn_check(settings: Settings) -> Check:
    """Where ``iris agents spawn`` would put agents and how it would run them."""
    from iris_runtime.agents.spawn_config import SpawnConfig
    from iris_runtime.provision.supervised_child import backoff_from
    from iris_runtime.provision.systemd import systemd_running

    try:
        config = SpawnConfig.from_settings(settings)
        backoff_from(settings.env)
    except ConfigError as exc:
        return Check("spawn", "fail", exc.message)
    manager = config.service_manager
    if manager == "auto":
        manager = "systemd" if systemd_running() else "process"
    detail = f"agents in {config.agents_dir}, bridge ports {config.ports}, run by {manager}"
    if not (config.repo_dir / "agents" / "scaffold" / "CONSTITUTION.md").is_file():
        return Check(
            "spawn",
            "warn",
            f"{detail}; no agent scaffold in {config.repo_dir}: set IRIS_REPO_DIR to the Iris "
            "checkout to spawn agents",
        )
    return Check("spawn", "ok", detail)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--sandbox",
    "probe_sandbox",
    is_flag=True,
    help="Also run the boundary probe inside the sandbox level and show what it sees.",
)
def doctor(as_json: bool, probe_sandbox: bool) -> None:
    """Show the effective configuration and check the installation."""
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        raise click.ClickException(f"configuration error: {exc.message}") from None
    checks = run_checks(settings, probe_sandbox=probe_sandbox)
    if as_json:
        click.echo(
            json.dumps(
                {"settings": settings.masked(), "checks": [c.__dict__ for c in checks]}, indent=2
            )
        )
    else:
        click.echo("Configuration:")
        for key, value in settings.masked().items():
            click.echo(f"  {key:<24} {value}")
        click.echo("Checks:")
        for check in checks:
            click.echo(f"  [{check.status:>4}] {check.name:<18} {check.detail}")
    if any(c.status == "fail" for c in checks):
        raise SystemExit(1)
