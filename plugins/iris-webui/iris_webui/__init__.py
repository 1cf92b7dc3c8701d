"""Iris in the browser: a transport plugin serving a chat page and one WebSocket per conversation.

Set ``IRIS_WEBUI_PORT`` and ``iris serve`` serves the Web UI on that port and prints a one-time
login link; leave it unset and the plugin registers no transport and serves nothing. Each browser
conversation is a ``WEBUI-<id>`` channel with its durable log, like any other channel.
"""

__version__ = "0.1.0"
