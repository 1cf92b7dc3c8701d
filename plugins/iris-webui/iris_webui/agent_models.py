"""The Web UI's model picker for ACP agents that offer ``models`` (spec 004, "Models").

``GET /api/sessions/<session>/agents/<kind>/model`` answers ``{"model": id|null, "models":
[{"id", "label"}]}`` (null: the agent's default). ``POST`` the same path with ``{"model": id}`` or
``{"model": "default"}`` sets the conversation's choice through the same code as ``@kind /model``
(:func:`iris_runtime.custom_agents.acp_models.model_command`): it applies from the next message,
and the answer carries that command's reply as ``text``.
"""

from __future__ import annotations

from flask import Response, jsonify, request

from iris_runtime.custom_agents.acp_models import COMMAND, DEFAULT, model_choice, model_command
from iris_runtime.custom_agents.manifest import Manifest
from iris_runtime.custom_agents.service import CustomAgents, service_of
from iris_runtime.errors import InvalidInput, NotFound
from iris_webui.blueprint import api, blueprint, existing_channel, web_transport


def _agent(kind: str) -> tuple[CustomAgents, Manifest]:
    agents = service_of(web_transport().engine)
    loaded = agents.catalog.get(kind) if agents is not None else None
    if agents is None or loaded is None or not loaded.manifest.models:
        raise NotFound(f"no agent {kind[:64]!r} with a model choice", code="unknown_agent")
    return agents, loaded.manifest


@blueprint.get("/api/sessions/<session>/agents/<kind>/model")
@api()
def agent_model(session: str, kind: str) -> Response:
    channel = existing_channel(session)
    agents, manifest = _agent(kind)
    return jsonify(model_choice(agents.chats, manifest, agents.chats.id_for(channel)))


@blueprint.post("/api/sessions/<session>/agents/<kind>/model")
@api(changes=True)
def choose_agent_model(session: str, kind: str) -> Response:
    channel = existing_channel(session)
    agents, manifest = _agent(kind)
    body = request.get_json(silent=True)
    wanted = body.get("model") if isinstance(body, dict) else None
    offered = {m.id for m in manifest.models}
    if not isinstance(wanted, str) or (wanted != DEFAULT and wanted not in offered):
        listing = ", ".join(sorted(offered))
        raise InvalidInput(f'"model" must be one of {listing}, or {DEFAULT}', code="unknown_model")
    chat_id = agents.chats.id_for(channel)
    said = model_command(agents.chats, manifest, chat_id, f"{COMMAND} {wanted}")
    return jsonify({**model_choice(agents.chats, manifest, chat_id), "text": said})
