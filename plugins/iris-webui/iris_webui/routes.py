"""All the Web UI's routes on its one blueprint (served on ``IRIS_WEBUI_PORT``).

Each module adds its own routes to :data:`iris_webui.blueprint.blueprint` when it is imported;
this one imports them all, so that importing ``blueprint`` from here gets every route:

- :mod:`iris_webui.blueprint`: the Host check and security headers of every response, the login
  and page-key checks of the JSON API;
- :mod:`iris_webui.pages`: ``/``, ``/login``, ``/logout`` (and the blueprint's ``/static/…``);
- :mod:`iris_webui.json_api`: conversations, agents and files under ``/api/``;
- :mod:`iris_webui.agent_models`: the model picker of ACP agents;
- :mod:`iris_webui.websocket`: ``/ws``, one socket per open conversation.

Only ``iris serve`` with ``IRIS_WEBUI_PORT`` imports this (see ``plugin``): the WebSocket stack
(flask-sock, simple-websocket) is not loaded otherwise.
"""

from __future__ import annotations

from iris_webui import agent_models, json_api, pages, websocket
from iris_webui.blueprint import blueprint

__all__ = ["agent_models", "blueprint", "json_api", "pages", "websocket"]
