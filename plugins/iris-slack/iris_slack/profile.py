"""What the model is told about Slack: every platform word of the system prompt lives here."""

from __future__ import annotations

from iris_runtime.engine.transport import ChannelInfo, TransportPromptProfile, UserInfo
from iris_slack.text import SLACK_MAX_LENGTH

FORMATTING = """\
Replies are shown in Slack, which renders its own "mrkdwn", not Markdown:
- *bold* uses single asterisks, _italic_ underscores, ~strike~ tildes; **double asterisks** \
and # headings are shown literally, so do not use them.
- `inline code` and ```code blocks``` (no language name after the backticks).
- > at the start of a line quotes it; lists are plain lines starting with "•" or "-" \
(no tables: use a code block to align columns).
- Links: <https://example.com|label> or a bare URL; never [label](url).
- Mention a person as <@USERID> and a channel as <#CHANNELID>, with ids from the directory \
below. Broadcasts such as <!here>, <!channel> and <!everyone> are not available: they are \
shown as plain text.
Replies longer than the limit are split into several messages in the thread; prefer short \
answers and put long material in a file (attach tool)."""

SILENT = (
    "Begin your reply with [SILENT] when no answer is needed (for instance after a scheduled "
    "[EVENT:...] with nothing to report): nothing is posted and the 'thinking' message is "
    "removed. Text after the marker is kept only in your log."
)

ATTACH = (
    "The attach tool uploads a file into the Slack conversation (in the thread you are "
    "answering); mention it by name instead of pasting a local path."
)


def directory(channels: list[ChannelInfo], users: list[UserInfo]) -> str:
    lines = ["Conversations you are in (link one as <#ID>):"]
    lines += [f"- {c.name}: {c.id}" for c in channels] or ["- (none known yet)"]
    lines.append("People in the workspace (mention one as <@ID>):")
    lines += [f"- {u.name}: {u.id}" for u in users] or ["- (none known yet)"]
    return "\n".join(lines)


SLACK_PROFILE = TransportPromptProfile(
    transport_id="slack",
    identity_line="You are Iris, a Slack-connected orchestrator for specialized sub-agents.",
    formatting_section=FORMATTING,
    directory_section=directory,
    silent_note=SILENT,
    attach_note=ATTACH,
    attachments_tag_name="slack_attachments",
    # What the model aims for; the transport still chunks at SLACK_MAX_LENGTH (escaped).
    max_message_chars=SLACK_MAX_LENGTH - 500,
)
