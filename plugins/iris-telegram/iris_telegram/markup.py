"""The model's Markdown subset → Telegram HTML, split into messages Telegram accepts.

The reply is parsed into *pieces* (visible text + the formatting around it), so formatting is
structure and every character of text is escaped on output: no input can inject markup. Chunking
works on the visible text, which is what Telegram's 4096 limit counts (UTF-16 code units after
entity parsing), and each chunk is rendered on its own, with every tag it needs opened and closed
inside it: a chunk boundary never falls inside a tag or an entity.

Converted (the prompt profile tells the model exactly this):

- ``**bold**``, ``_italic_`` (underscores at word edges, so ``snake_case`` stays), ``~~strike~~``
- `` `code` `` and fenced blocks (````` ```lang ````` … `````` ``` ``````), contents verbatim
- ``[label](https://…)`` → a link; any other bracketed link (a file name, a relative path, a
  ``javascript:`` URL) is reduced to its label; ``![alt](…)`` the same
- ``# heading`` → a bold line; ``- item`` / ``* item`` / ``+ item`` → ``• item``; ``> quote`` lines
  → a quote
- ``\\*`` and friends: a backslash makes the next punctuation character literal

Everything else (single ``*asterisks*``, ``__double underscores__``, tables, raw HTML) is shown as
typed.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

Tag = tuple[str, str]  # (name, attribute): ("b", ""), ("a", href), ("pre", language), ...
Piece = tuple[str, tuple[Tag, ...]]  # visible text and its tags, outermost first

TELEGRAM_LIMIT = 4096
MIN_CHUNK = 500

BOLD: Tag = ("b", "")
ITALIC: Tag = ("i", "")
STRIKE: Tag = ("s", "")
CODE: Tag = ("code", "")
QUOTE: Tag = ("blockquote", "")

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_QUOTE_LINE = re.compile(r"^ {0,3}>\s?(.*)$")
_LINK = re.compile(
    r"\[([^\[\]\n]*)\]\(\s*(<[^<>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+\"[^\"\n]*\")?\s*\)"
)
_HTTP_URL = re.compile(r"https?://[^\s<>\x00-\x1f\x7f]+", re.IGNORECASE)
_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]{1,32}")
_ESCAPABLE = frozenset("\\`*_{}[]()#+-.!~>|<&")


def utf16_len(text: str) -> int:
    """Telegram counts message length in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def escape(text: str) -> str:
    """Text safe to put between Telegram HTML tags."""
    return html.escape(text, quote=False)


# -- parsing --------------------------------------------------------------------------------------


def parse(markdown: str) -> list[Piece]:
    """The reply as pieces of visible text with their formatting."""
    lines = markdown.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[Piece] = []
    index = 0
    first = True
    while index < len(lines):
        line = lines[index]
        if not first:
            out.append(("\n", ()))
        first = False
        fence = _FENCE_OPEN.match(line)
        if fence:
            index = _fenced_block(lines, index, fence, out)
            continue
        quote = _QUOTE_LINE.match(line)
        if quote:
            out.extend(_line(quote.group(1), (QUOTE,)))
            while index + 1 < len(lines) and _QUOTE_LINE.match(lines[index + 1]):
                index += 1
                out.append(("\n", (QUOTE,)))
                more = _QUOTE_LINE.match(lines[index])
                assert more is not None
                out.extend(_line(more.group(1), (QUOTE,)))
        else:
            out.extend(_line(line, ()))
        index += 1
    return [p for p in out if p[0]]


def _fenced_block(lines: list[str], index: int, fence: re.Match[str], out: list[Piece]) -> int:
    """Append a fenced code block (unclosed: to the end) and return the index after it."""
    marker = fence.group(1)
    language = fence.group(2) if _LANGUAGE.fullmatch(fence.group(2) or "") else ""
    body: list[str] = []
    index += 1
    while index < len(lines):
        stripped = lines[index].strip()
        if stripped.startswith(marker[0] * len(marker)) and not stripped.strip(marker[0]):
            index += 1
            break
        body.append(lines[index])
        index += 1
    out.append(("\n".join(body) or " ", (("pre", language),)))
    return index


def _line(line: str, outer: tuple[Tag, ...]) -> list[Piece]:
    heading = _HEADING.match(line)
    if heading:
        return _inline(heading.group(1), (*outer, BOLD))
    bullet = _BULLET.match(line)
    if bullet:
        return [(bullet.group(1) + "• ", outer), *_inline(bullet.group(2), outer)]
    return _inline(line, outer)


def _is_word(char: str) -> bool:
    return char.isalnum()


def _closing(text: str, marker: str, start: int) -> int:
    """Index of the marker closing a span opened just before ``start`` (-1: none)."""
    position = start
    while True:
        found = text.find(marker, position)
        if found == -1:
            return -1
        if found > start and not text[found - 1].isspace():
            return found
        position = found + 1


def _inline(text: str, tags: tuple[Tag, ...]) -> list[Piece]:
    out: list[Piece] = []
    buffer: list[str] = []

    def flush() -> None:
        if buffer:
            out.append(("".join(buffer), tags))
            buffer.clear()

    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == "\\" and i + 1 < n and text[i + 1] in _ESCAPABLE:
            buffer.append(text[i + 1])
            i += 2
            continue
        if char == "`":
            rest = text[i:]
            ticks = rest[: len(rest) - len(rest.lstrip("`"))]
            end = text.find(ticks, i + len(ticks))
            if end > i + len(ticks):
                code = text[i + len(ticks) : end]
                if len(code) > 2 and code[0] == " " and code[-1] == " ":
                    code = code[1:-1]
                flush()
                out.append((code, (*tags, CODE)))
                i = end + len(ticks)
            else:
                buffer.append(ticks)
                i += len(ticks)
            continue
        link_start = i + 1 if char == "!" and text.startswith("[", i + 1) else i
        if text.startswith("[", link_start):
            match = _LINK.match(text, link_start)
            if match:
                flush()
                out.extend(_link(match.group(1), match.group(2), tags))
                i = match.end()
                continue
        span = _span(text, i, tags)
        if span is not None:
            pieces, i = span
            flush()
            out.extend(pieces)
            continue
        buffer.append(char)
        i += 1
    flush()
    return out


def _span(text: str, i: int, tags: tuple[Tag, ...]) -> tuple[list[Piece], int] | None:
    """A ``**bold**``, ``~~strike~~`` or ``_italic_`` span starting at ``i``, and where it ends."""
    for marker, tag in (("**", BOLD), ("~~", STRIKE)):
        if text.startswith(marker, i):
            start = i + len(marker)
            if start < len(text) and not text[start].isspace() and tag not in tags:
                end = _closing(text, marker, start)
                if end != -1:
                    return _inline(text[start:end], (*tags, tag)), end + len(marker)
            return None
    if text[i] == "_" and (i == 0 or not _is_word(text[i - 1])) and ITALIC not in tags:
        start = i + 1
        if start < len(text) and not text[start].isspace() and text[start] != "_":
            position = start
            while True:
                end = _closing(text, "_", position)
                if end == -1:
                    return None
                after = text[end + 1] if end + 1 < len(text) else ""
                if not _is_word(after) and after != "_":
                    return _inline(text[start:end], (*tags, ITALIC)), end + 1
                position = end + 1
    return None


def _link(label: str, target: str, tags: tuple[Tag, ...]) -> list[Piece]:
    url = target[1:-1] if target.startswith("<") and target.endswith(">") else target
    if _HTTP_URL.fullmatch(url):
        anchor = (*tags, ("a", url))
        return _inline(label, anchor) if label.strip() else [(url, anchor)]
    # A file name, a relative path or a non-web scheme: only the label is worth showing.
    return _inline(label, tags)


# -- rendering ------------------------------------------------------------------------------------


def _open(tag: Tag) -> str:
    name, value = tag
    if name == "a":
        return f'<a href="{html.escape(value, quote=True)}">'
    if name == "pre":
        return f'<pre><code class="language-{value}">' if value else "<pre>"
    return f"<{name}>"


def _close(tag: Tag) -> str:
    name, value = tag
    if name == "pre":
        return "</code></pre>" if value else "</pre>"
    return f"</{name}>"


def render(pieces: list[Piece]) -> str:
    """Telegram HTML for pieces: tags opened and closed as the formatting changes."""
    out: list[str] = []
    stack: tuple[Tag, ...] = ()
    for text, tags in pieces:
        if not text:
            continue
        common = 0
        while common < min(len(stack), len(tags)) and stack[common] == tags[common]:
            common += 1
        out.extend(_close(tag) for tag in reversed(stack[common:]))
        out.extend(_open(tag) for tag in tags[common:])
        stack = tags
        out.append(escape(text))
    out.extend(_close(tag) for tag in reversed(stack))
    return "".join(out)


def to_telegram_html(markdown: str) -> str:
    """The whole reply as one Telegram HTML string (no length limit applied)."""
    return render(parse(markdown))


# -- chunking -------------------------------------------------------------------------------------


def _slice(pieces: list[Piece], start: int, end: int) -> list[Piece]:
    """The pieces covering visible characters ``start:end``."""
    out: list[Piece] = []
    position = 0
    for text, tags in pieces:
        following = position + len(text)
        if following > start and position < end:
            out.append((text[max(0, start - position) : end - position], tags))
        position = following
        if position >= end:
            break
    return out


def _cut(text: str, start: int, end: int) -> int:
    """Where to end a chunk that must stop by ``end``: after a paragraph, a line or a word in its
    second half when there is one, else at ``end``."""
    floor = start + (end - start) // 2
    for separator in ("\n\n", "\n", " "):
        found = text.rfind(separator, floor, end)
        if found != -1:
            return found + len(separator)
    return end


def split_pieces(pieces: list[Piece], limit: int = TELEGRAM_LIMIT) -> Iterator[list[Piece]]:
    """Pieces in chunks whose visible text is at most ``limit`` UTF-16 units, never empty."""
    text = "".join(p[0] for p in pieces)
    start, n = 0, len(text)
    while start < n:
        while start < n and text[start] == "\n":
            start += 1
        if start >= n:
            break
        end, units = start, 0
        while end < n:
            width = 2 if ord(text[end]) > 0xFFFF else 1
            if units + width > limit:
                break
            units += width
            end += 1
        cut = n if end >= n else _cut(text, start, end)
        if text[start:cut].strip():
            yield _slice(pieces, start, cut)
        start = cut


def html_chunks(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """The reply as Telegram HTML messages, each within ``limit`` after entity parsing."""
    return [render(chunk) for chunk in split_pieces(parse(markdown), limit)]


def plain_chunks(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Unformatted text in chunks of at most ``limit`` UTF-16 units (sent without parse_mode)."""
    return ["".join(p[0] for p in chunk) for chunk in split_pieces([(text, ())], limit)]
