"""The agents a passthrough channel may name: registered bridge sub-agents and custom agents
(checked by ``iris channels set`` for the entry it writes, and warned about by ``iris doctor``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from iris_runtime.agents.registry import registry_for
from iris_runtime.config import Settings
from iris_runtime.errors import IrisError

log = logging.getLogger(__name__)


def bridge_names(settings: Settings) -> list[str]:
    try:
        return registry_for(settings).names()
    except IrisError as exc:  # an unreadable agents.json names nobody; doctor says why
        log.error("agents.json is unreadable: %s", exc.message)
        return []


def offline_agent_names(settings: Settings) -> Callable[[], Collection[str]]:
    """Names as the CLI and ``iris doctor`` see them: agents.json and agents.d read from disk."""

    def names() -> Collection[str]:
        from iris_runtime.custom_agents.listing import read_catalog

        try:
            kinds: Collection[str] = read_catalog(settings).kinds()
        except IrisError as exc:
            log.error("agents.d is unreadable: %s", exc.message)
            kinds = ()
        return {*bridge_names(settings), *kinds}

    return names
