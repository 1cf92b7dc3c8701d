"""Loaded and skipped manifests as the API, the CLI, ``iris doctor`` and the Web UI show them.

The shape behind an agent is listed for operators; the Web UI's picker shows only the label
and whether the agent is ready, as the spec asks (nothing marks relay from ACP there).
"""

from __future__ import annotations

import os
from typing import Any

from iris_runtime.config import Settings
from iris_runtime.custom_agents.catalog import Catalog, LoadedAgent
from iris_runtime.custom_agents.settings import CustomAgentSettings
from iris_runtime.custom_agents.signin import READY, status_of


def agent_entry(agent: LoadedAgent) -> dict[str, Any]:
    manifest = agent.manifest
    entry: dict[str, Any] = {
        "kind": manifest.kind,
        "label": manifest.label,
        "shape": manifest.shape,
        "status": status_of(manifest),
        "path": str(agent.path),
        "commands": [
            {
                "name": c.name,
                "description": c.description,
                **({"argHint": c.arg_hint} if c.arg_hint else {}),
            }
            for c in manifest.commands
        ],
    }
    if manifest.setup is not None:
        entry["providers"] = [
            {"id": p.id, "label": p.label, "note": p.note} for p in manifest.setup.providers
        ]
    return entry


def listing(catalog: Catalog) -> dict[str, Any]:
    return {
        "agents": [agent_entry(a) for a in catalog.loaded()],
        "skipped": [{"path": str(s.path), "reason": s.reason} for s in catalog.skipped()],
    }


def read_catalog(settings: Settings) -> Catalog:
    """agents.d read once, the way a serving Iris reads it at start-up (for the CLI)."""
    from iris_runtime.custom_agents.service import bridge_names_for

    catalog = Catalog(
        CustomAgentSettings.from_settings(settings).manifests_dir, bridge_names_for(settings)
    )
    catalog.scan()
    return catalog


MAX_SOCKET_PATH = 107  # bytes in sun_path, less its terminating NUL (Linux)


def doctor_summary(settings: Settings) -> tuple[str, str]:
    """``(ok|warn, detail)`` for ``iris doctor``: a skipped file, a signed-out agent or a reach
    socket path no unix socket can have (agents could not reply) warns."""
    catalog = read_catalog(settings)
    shown = listing(catalog)
    parts = [f"{a['kind']} ({a['status'].replace('_', ' ')})" for a in shown["agents"]] or [
        "none loaded"
    ]
    parts += [f"skipped {s['path']}: {s['reason']}" for s in shown["skipped"]]
    socket_path = CustomAgentSettings.from_settings(settings).reach_socket
    if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH:
        parts.append(f"the reach socket path is too long for a unix socket: {socket_path}")
        return "warn", "; ".join(parts)
    parts.append(f"reach socket {socket_path}")
    troubled = shown["skipped"] or any(a["status"] != READY for a in shown["agents"])
    return ("warn" if troubled else "ok"), "; ".join(parts)
