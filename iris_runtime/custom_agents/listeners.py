"""Where custom agents reach a serving Iris: the reach socket and, when configured, the relay
inbound port.

Both are started after the service they serve (:class:`~.service.CustomAgents`) and stopped
with it. Neither failing to listen is fatal: Iris serves on, her custom agents just cannot reply
until it is fixed.
"""

from __future__ import annotations

import logging

from iris_runtime.custom_agents.inbound import RelayInbound
from iris_runtime.custom_agents.reach import ReachServer
from iris_runtime.custom_agents.service import CustomAgents
from iris_runtime.errors import ConfigError

log = logging.getLogger(__name__)


def start_listeners(agents: CustomAgents) -> None:
    config = agents.config
    reach = ReachServer(agents, config.reach_socket, config.reach_group, config.silence_seconds)
    try:
        reach.start()
    except (OSError, ConfigError) as exc:
        # A unix socket path may be at most 107 bytes; set IRIS_REACH_SOCKET.
        log.error("the reach socket cannot listen on %s: %s", reach.path, exc)
    else:
        agents.on_stop(reach.stop)
    if config.relay_inbound_port is not None:
        port = config.relay_inbound_port
        try:
            inbound = RelayInbound(agents, port)
        except OSError as exc:
            log.error("the relay inbound cannot listen on 127.0.0.1:%d: %s", port, exc)
        else:
            inbound.start()
            agents.on_stop(inbound.stop)
