"""Which channel ids are Slack's: imported by the plugin even when Slack is off, so it is cheap
(no Slack SDK)."""

from __future__ import annotations

import re

TRANSPORT_ID = "slack"
# Slack conversation ids: C (channels), G (private channels, group DMs), D (direct messages),
# then capitals and digits with at least one digit (every Slack id has one): all-capital names
# such as GENERAL, DAILY or CRON are other transports' channels, not Slack's.
CHANNEL_ID = re.compile(r"[CDG](?=[A-Z]*[0-9])[A-Z0-9]{2,31}")
# A Slack message ts: a thread's id in a conversation key.
TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")
# A thread's own conversation in a channel with a mode is ``<channel id>@<thread ts>``: claimed
# whatever follows the ``@`` (a malformed one is refused, never run headless by the bridge).
CONVERSATION_CLAIM = re.compile(rf"{CHANNEL_ID.pattern}(?:@.*)?", re.DOTALL)
CONVERSATION_ID = re.compile(rf"{CHANNEL_ID.pattern}(?:@{TS.pattern})?")


def mentions(text: str, bot_user_id: str | None) -> bool:
    """Whether ``text`` mentions the bot: ``<@U…>`` or the legacy ``<@U…|name>``."""
    if not bot_user_id:
        return False
    return re.search(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>", text) is not None
