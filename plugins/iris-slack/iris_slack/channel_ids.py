"""Which channel ids are Slack's: imported by the plugin even when Slack is off, so it is cheap
(no Slack SDK)."""

from __future__ import annotations

import re

TRANSPORT_ID = "slack"
# Slack conversation ids: C (channels), G (private channels, group DMs), D (direct messages),
# then capitals and digits with at least one digit (every Slack id has one): all-capital names
# such as GENERAL, DAILY or CRON are other transports' channels, not Slack's.
CHANNEL_ID = re.compile(r"[CDG](?=[A-Z]*[0-9])[A-Z0-9]{2,31}")
