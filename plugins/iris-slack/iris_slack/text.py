"""Slack text in and out: escaping, chunking to the platform limit, inbound clean-up, file names.

Slack's message text is mrkdwn in which ``&``, ``<`` and ``>`` are control characters, and the
length Slack enforces is that of the escaped text. Outgoing text is escaped except for the few
``<...>`` forms Iris may use on purpose (a user mention ``<@U…>``, a channel link ``<#C…>``, a
link ``<https://…|label>``); broadcast forms such as ``<!channel>`` or ``<!here>`` are escaped,
so a reply can never ping a whole channel, whatever the model or a user's message put in it.
"""

from __future__ import annotations

import html
import re
import unicodedata

# Slack's advice is to keep message text under 4,000 characters; longer replies are chunked.
SLACK_MAX_LENGTH = 4000
# Re-splitting after msg_too_long halves the budget, down to this floor.
MIN_CHUNK_LENGTH = 1000

_ALLOWED_FORM = re.compile(
    r"<(?:@[UW][A-Z0-9]{2,30}|#[CG][A-Z0-9]{2,30}(?:\|[^<>|\n]{0,200})?"
    r"|(?:https?://|mailto:)[^\s<>|]{1,2000}(?:\|[^<>|\n]{0,500})?)>"
)
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_WIDTH = {"&": 5, "<": 4, ">": 4}


def escape(text: str) -> str:
    """``text`` as Slack message text: control characters escaped outside the allowed forms."""
    out: list[str] = []
    position = 0
    for match in _ALLOWED_FORM.finditer(text):
        out.append(_escape_all(text[position : match.start()]))
        out.append(match.group(0).replace("&", "&amp;"))
        position = match.end()
    out.append(_escape_all(text[position:]))
    return "".join(out)


def _escape_all(segment: str) -> str:
    return segment.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escaped_length(text: str) -> int:
    return len(escape(text))


def _widths(text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Escaped width of every character, and the spans of the allowed forms (never cut)."""
    widths = [_WIDTH.get(ch, 1) for ch in text]
    spans = []
    for match in _ALLOWED_FORM.finditer(text):
        spans.append((match.start(), match.end()))
        for index in range(match.start(), match.end()):
            widths[index] = 5 if text[index] == "&" else 1
    return widths, spans


def split_chunks(text: str, limit: int = SLACK_MAX_LENGTH) -> list[str]:
    """Cut ``text`` into pieces whose escaped length is at most ``limit``.

    Cuts fall on the last newline that leaves the piece at least a quarter full, else on the last
    space, else anywhere (but never inside a mention or link). The newline or space cut at is
    dropped; nothing else is. Blank pieces are left out.
    """
    if limit < 1:
        raise ValueError("limit must be positive")
    out: list[str] = []
    for chunk in _split(text, limit, *_widths(text)):
        if len(escape(chunk)) <= limit:
            out.append(chunk)
        else:  # a cut through an over-long link: budget it as if nothing were allowed
            out.extend(_split(chunk, limit, [_WIDTH.get(ch, 1) for ch in chunk], []))
    return [c for c in out if c.strip()]


def _split(text: str, limit: int, widths: list[int], spans: list[tuple[int, int]]) -> list[str]:
    chunks: list[str] = []
    start, size = 0, len(text)
    while start < size:
        end, budget = start, 0
        while end < size and budget + widths[end] <= limit:
            budget += widths[end]
            end += 1
        end = max(end, start + 1)  # a limit below one escaped character still progresses
        if end >= size:
            chunks.append(text[start:])
            break
        cut, resume = _cut(text, start, end, spans, limit)
        chunks.append(text[start:cut])
        start = resume
    return chunks


def _cut(
    text: str, start: int, end: int, spans: list[tuple[int, int]], limit: int
) -> tuple[int, int]:
    """Where to end a piece that may reach at most ``end``: (cut, where the next piece starts).
    A newline or space inside a mention or link (a label may have spaces) is no place to cut:
    such a span is cut before, whole, unless it alone is longer than the piece."""
    inside = [(a, b) for a, b in spans if a < end and b > start]

    def last(chars: str) -> int:
        floor = start + max(1, (end - start) // 4)
        for index in range(end - 1, floor - 1, -1):
            if text[index] in chars and not any(a < index < b for a, b in inside):
                return index
        return -1

    newline = last("\n")
    if newline >= 0:
        return newline, newline + 1
    space = last(" \t")
    if space >= 0:
        return space, space + 1
    for span_start, span_end in inside:
        if span_start < end < span_end and span_start > start:
            return span_start, span_start
    return end, end


def inbound_text(raw: str, bot_user_id: str | None) -> str:
    """A message as Iris reads it: the leading mention of the bot removed, entities decoded.

    Mentions of other people (``<@U…>``) and links are kept as Slack wrote them; the prompt's
    directory maps the ids to names.
    """
    text = raw.strip()
    if bot_user_id:
        text = re.sub(rf"^(?:<@{re.escape(bot_user_id)}(?:\|[^>]*)?>[\s,:]*)+", "", text)
    return html.unescape(text).strip() if "&" in text else text.strip()


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# A saved file's local name; display names in the prompt have their own, shorter limit.
MAX_FILE_NAME_CHARS = 120


def safe_file_name(name: str, fallback: str = "file") -> str:
    """A harmless local name for a file a user shared: no directories, no dot-dot, no control or
    odd characters, not hidden, at most 120 characters, keeping the extension when it can."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = unicodedata.normalize("NFKD", base).encode("ascii", "ignore").decode("ascii")
    base = _UNSAFE.sub("_", base)
    while ".." in base:
        base = base.replace("..", ".")
    base = base.strip("._-")
    if not base:
        base = fallback
    if len(base) > MAX_FILE_NAME_CHARS:
        stem, dot, ext = base.rpartition(".")
        if dot and 0 < len(ext) <= 10:
            base = stem[: MAX_FILE_NAME_CHARS - len(ext) - 1] + "." + ext
        else:
            base = base[:MAX_FILE_NAME_CHARS]
    return base


def clip_line(text: str, limit: int) -> str:
    """One line (control characters and newlines folded to spaces), at most ``limit`` chars."""
    line = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
