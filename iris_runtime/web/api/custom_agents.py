"""``/custom-agents``: the loaded and skipped manifests, and restarting one agent (spec 004).

Restarting is how an edited or removed manifest takes effect: a loaded file is never re-read
behind the operator's back.
"""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

from iris_runtime.custom_agents.listing import agent_entry, listing
from iris_runtime.custom_agents.service import CustomAgents, service_of
from iris_runtime.errors import IrisError, NotFound
from iris_runtime.runtime import Runtime
from iris_runtime.web.bodies import json_object

blueprint = Blueprint("custom_agents", __name__, url_prefix="/custom-agents")


class CustomAgentsOff(IrisError):
    code = "custom_agents_off"
    status = 503


def _agents() -> CustomAgents:
    runtime: Runtime = current_app.extensions["iris"]
    agents = service_of(runtime.engine)
    if agents is None:
        raise CustomAgentsOff("custom agents are not running in this Iris")
    return agents


@blueprint.get("")
def list_agents() -> Response:
    return jsonify(listing(_agents().catalog))


@blueprint.post("/<kind>/restart")
def restart(kind: str) -> Response:
    json_object()  # an empty body, or {}
    agents = _agents()
    catalog = agents.catalog
    before = catalog.get(kind)
    if before is None:
        raise NotFound(f"no custom agent named {kind[:64]!r} is loaded", code="unknown_agent")
    agent = agents.restart(kind)
    if agent is not None:
        return jsonify({"restarted": kind, "agent": agent_entry(agent)})
    skipped = (s.reason for s in catalog.skipped() if s.path == before.path)
    reason = next(skipped, f"{before.path} is gone")
    return jsonify({"restarted": kind, "agent": None, "reason": reason})
