"""The Telegram prompt profile: every Telegram word of the system prompt lives here."""

from __future__ import annotations

from iris_runtime.engine.transport import ChannelInfo, TransportPromptProfile, UserInfo

TRANSPORT_ID = "telegram"
MAX_MESSAGE_CHARS = 4000  # the target; chunking at Telegram's 4096 is the backstop
DIRECTORY_LIMIT = 50

FORMATTING = """\
Your reply is converted from a small Markdown subset to Telegram HTML before it is sent. Exactly \
these are converted:
- **bold** (two asterisks on each side)
- _italic_ (one underscore on each side of words; snake_case names are left alone)
- ~~strikethrough~~ (two tildes on each side)
- `inline code` (backticks); its contents are shown verbatim
- fenced code blocks: a line of three backticks, optionally followed by the language name, the \
code, then a closing line of three backticks; the contents are shown verbatim
- [label](https://example.com): becomes a link, but only for http:// and https:// URLs. A bare \
URL is linked by Telegram anyway, so you rarely need this. Any other bracketed link is reduced \
to its label: never wrap a file name or a path in link syntax (send files with the attach tool)
- a line starting with # (a heading) is shown as a bold line
- a line starting with "- ", "* " or "+ " becomes a "•" bullet; numbered lists stay as typed
- lines starting with > become a quote
- a backslash before punctuation (\\* \\_ \\` \\[) shows that character literally
Everything else is shown exactly as typed: single *asterisks* do NOT make bold or italic, \
__double underscores__ do nothing, tables are not rendered (use short lists instead), and HTML \
tags such as <b> appear as literal text. Write plain, short paragraphs; Telegram is read on \
phones. A message holds at most 4096 characters; longer replies are split into several \
messages."""

SILENT_NOTE = (
    "Begin your reply with [SILENT] when no message should be sent (typically after a scheduled "
    "[EVENT:...] with nothing to report): nothing is posted to the Telegram chat and the "
    '"working" placeholder is removed. Anything after the marker is kept only in the log.'
)

ATTACH_NOTE = (
    "The attach tool sends a file to this Telegram chat as a document (its title becomes the "
    "caption). Photos and documents people send are saved in the chat's attachments folder; "
    "their paths are listed for you."
)


def directory_section(channels: list[ChannelInfo], users: list[UserInfo]) -> str:
    lines = [
        "Telegram channel ids are tg-<chat id> (group chats have negative ids, e.g. "
        "tg--1001234567890). Use these ids for scheduled events (files in telegram/events/)."
    ]
    if channels:
        shown = ", ".join(f"{c.id} = {c.name}" for c in channels[:DIRECTORY_LIMIT])
        lines.append(f"Chats seen since start-up: {shown}.")
    else:
        lines.append("No chats seen since start-up.")
    if users:
        shown = ", ".join(f"{u.id} = {u.name}" for u in users[:DIRECTORY_LIMIT])
        lines.append(f"People seen (Telegram user id = name): {shown}.")
    return "\n".join(lines)


TELEGRAM_PROFILE = TransportPromptProfile(
    transport_id=TRANSPORT_ID,
    identity_line=(
        "You are Iris, a Telegram-connected orchestrator for specialized sub-agents, talking "
        "with people in Telegram chats."
    ),
    formatting_section=FORMATTING,
    directory_section=directory_section,
    silent_note=SILENT_NOTE,
    attach_note=ATTACH_NOTE,
    attachments_tag_name="telegram_attachments",
    max_message_chars=MAX_MESSAGE_CHARS,
)
