"""The ``slack`` plugin: registers the Slack transport when its two tokens are configured.

With neither ``IRIS_SLACK_APP_TOKEN`` nor ``IRIS_SLACK_BOT_TOKEN`` set (nor their ``_FILE``
forms) it registers no transport, imports no Slack code, connects nowhere and logs nothing; it
still declares which channel ids are Slack's, so they are refused while Slack is off instead of
being taken by the bridge. One token without the other is a configuration error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from iris_runtime import hookimpl
from iris_runtime.config import Settings
from iris_runtime.engine.transport import ChannelShape
from iris_slack.channel_ids import CONVERSATION_CLAIM, CONVERSATION_ID, TRANSPORT_ID
from iris_slack.config import SlackConfig

if TYPE_CHECKING:
    from iris_slack.transport import SlackTransport


@hookimpl
def register_transports(register: Callable[..., None], settings: Settings) -> None:
    config = SlackConfig.from_env(settings.env)
    if config is None:
        return

    def build(engine: Any) -> SlackTransport:
        from iris_slack.transport import SlackTransport  # only when Slack is configured

        return SlackTransport(engine, config)

    register(build)


@hookimpl
def register_channel_shapes(register: Callable[[ChannelShape], None]) -> None:
    # Configured or not: a Slack id is never the bridge's, so it is refused while Slack is off.
    # A thread's conversation (C…@<ts>) too: with Slack off, or a malformed ts, it is refused.
    register(
        ChannelShape(
            TRANSPORT_ID,
            claims=CONVERSATION_CLAIM,
            valid=CONVERSATION_ID,
            rule="a Slack channel id, or <channel id>@<thread ts> for a thread's conversation",
        )
    )
