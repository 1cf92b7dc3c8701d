"""Loaded and skipped manifests as the API, the CLI, ``iris doctor`` and the Web UI show them.

The shape behind an agent is listed for operators; the Web UI's picker shows only the label
and whether the agent is ready, as the spec asks (nothing marks relay from ACP there).
"""

from __future__ import annotations

from typing import Any

from iris_runtime.custom_agents.catalog import Catalog, LoadedAgent
from iris_runtime.custom_agents.signin import status_of


def agent_entry(agent: LoadedAgent) -> dict[str, Any]:
    manifest = agent.manifest
    entry: dict[str, Any] = {
        "kind": manifest.kind,
        "label": manifest.label,
        "shape": manifest.shape,
        "status": status_of(manifest),
        "path": str(agent.path),
        "commands": [
            {"name": c.name, "description": c.description, **({"argHint": c.arg_hint} if c.arg_hint else {})}
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
