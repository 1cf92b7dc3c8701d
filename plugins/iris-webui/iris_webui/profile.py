"""The Web UI prompt profile: every Web UI word of the system prompt lives here."""

from __future__ import annotations

from iris_runtime.engine.transport import ChannelInfo, TransportPromptProfile, UserInfo

TRANSPORT_ID = "webui"
CHANNEL_PREFIX = "WEBUI-"
MAX_MESSAGE_CHARS = 20_000  # a browser scrolls; this only keeps answers readable
DIRECTORY_LIMIT = 30

FORMATTING = """\
Your reply is rendered as Markdown in a browser: **bold**, _italic_, `inline code`, fenced code \
blocks (with an optional language name), [links](https://example.com) (http and https only), \
headings, bulleted and numbered lists, > quotes and tables. Raw HTML is shown as literal text, \
never rendered. Replies may be long, but prefer short paragraphs and lists."""

SILENT_NOTE = (
    "Begin your reply with [SILENT] when nothing should be shown (typically after a scheduled "
    "[EVENT:...] with nothing to report): the browser shows no message. Anything after the "
    "marker is kept only in the log."
)

ATTACH_NOTE = (
    "The attach tool offers a file to the person in the browser as a download. Files they "
    "upload are saved in the conversation's attachments folder; their paths are listed for you."
)


def directory_section(channels: list[ChannelInfo], users: list[UserInfo]) -> str:
    lines = [
        "Web UI conversations are channels named WEBUI-<id>; use these ids for scheduled events."
    ]
    if channels:
        shown = ", ".join(f"{c.id} = {c.name}" for c in channels[:DIRECTORY_LIMIT])
        lines.append(f"Recent conversations (id = title): {shown}.")
    return "\n".join(lines)


WEBUI_PROFILE = TransportPromptProfile(
    transport_id=TRANSPORT_ID,
    identity_line=(
        "You are Iris, an orchestrator for specialized sub-agents, talking with the person who "
        "runs you through the Iris Web UI, a chat page in their browser."
    ),
    formatting_section=FORMATTING,
    directory_section=directory_section,
    silent_note=SILENT_NOTE,
    attach_note=ATTACH_NOTE,
    attachments_tag_name="webui_attachments",
    max_message_chars=MAX_MESSAGE_CHARS,
)
