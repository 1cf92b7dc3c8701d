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

import bisect
import html
import re
import unicodedata
from collections.abc import Iterator

Tag = tuple[str, str]  # (name, attribute): ("b", ""), ("a", href), ("pre", language), ...
Piece = tuple[str, tuple[Tag, ...]]  # visible text and its tags, outermost first

TELEGRAM_LIMIT = 4096
MIN_CHUNK = 500
# Lines longer than this are shown as typed (escaped, no inline formatting): Markdown from a
# model never needs one, and a minified JSON blob or a log line must not cost parsing time.
MAX_FORMATTED_LINE = 8192
MAX_LINK = 4096  # a bracketed link longer than this is not a link

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
    if len(line) > MAX_FORMATTED_LINE:
        return [(line, outer)]
    heading = _HEADING.match(line)
    if heading:
        return _inline(heading.group(1), (*outer, BOLD))
    bullet = _BULLET.match(line)
    if bullet:
        return [(bullet.group(1) + "• ", outer), *_inline(bullet.group(2), outer)]
    return _inline(line, outer)


def _is_word(char: str) -> bool:
    return char.isalnum()


_TICKS = re.compile(r"`+")


class _Closers:
    """Where each span marker may close in one line of text, found in one pass per marker, so
    every opener finds its closer by bisection (linear in the line, whatever it holds)."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._positions: dict[str, list[int]] = {}
        self._last_ticks: dict[str, int] = {}

    def _candidates(self, marker: str) -> list[int]:
        found = self._positions.get(marker)
        if found is None:
            text, found = self._text, []
            position = text.find(marker, 1)
            while position != -1:
                after = text[position + 1 : position + 2]
                before = text[position - 1]
                if not before.isspace() and (
                    marker != "_" or not (before == "_" or after == "_" or _is_word(after or " "))
                ):
                    found.append(position)
                position = text.find(marker, position + 1)
            self._positions[marker] = found
        return found

    def closing(self, marker: str, start: int) -> int:
        """Index of the marker closing a span opened just before ``start`` (-1: none): after a
        non-space; for ``_`` also neither next to another ``_`` nor before a word character."""
        candidates = self._candidates(marker)
        index = bisect.bisect_right(candidates, start)
        return candidates[index] if index < len(candidates) else -1

    def ticks(self, ticks: str, start: int) -> int:
        """Where the run ``ticks`` occurs again at or after ``start`` (-1: never)."""
        last = self._last_ticks.get(ticks)
        if last is None:
            last = self._last_ticks[ticks] = self._text.rfind(ticks)
        return self._text.find(ticks, start) if last >= start else -1


def _inline(text: str, tags: tuple[Tag, ...]) -> list[Piece]:
    out: list[Piece] = []
    buffer: list[str] = []
    closers = _Closers(text)
    in_link = any(name == "a" for name, _ in tags)

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
            run = _TICKS.match(text, i)
            assert run is not None
            ticks = run.group()
            end = closers.ticks(ticks, i + len(ticks))
            if end > i + len(ticks):
                code = text[i + len(ticks) : end]
                if len(code) > 2 and code[0] == " " and code[-1] == " ":
                    code = code[1:-1]
                flush()
                # Telegram forbids <code> inside <a>: in a link label it is plain link text.
                out.append((code, tags if in_link else (*tags, CODE)))
                i = end + len(ticks)
            else:
                buffer.append(ticks)
                i += len(ticks)
            continue
        link_start = i + 1 if char == "!" and text.startswith("[", i + 1) else i
        if text.startswith("[", link_start):
            match = _LINK.match(text, link_start, min(n, link_start + MAX_LINK))
            if match:
                flush()
                out.extend(_link(match.group(1), match.group(2), tags))
                i = match.end()
                continue
        span = _span(text, i, tags, closers)
        if span is not None:
            pieces, i = span
            flush()
            out.extend(pieces)
            continue
        buffer.append(char)
        i += 1
    flush()
    return out


def _span(
    text: str, i: int, tags: tuple[Tag, ...], closers: _Closers
) -> tuple[list[Piece], int] | None:
    """A ``**bold**``, ``~~strike~~`` or ``_italic_`` span starting at ``i``, and where it ends.
    A span inside the same formatting (``# **Title**``: a heading is bold already) only loses
    its markers."""
    for marker, tag in (("**", BOLD), ("~~", STRIKE)):
        if text.startswith(marker, i):
            start = i + len(marker)
            if start < len(text) and not text[start].isspace():
                end = closers.closing(marker, start)
                if end != -1:
                    inner = tags if tag in tags else (*tags, tag)
                    return _inline(text[start:end], inner), end + len(marker)
            return None
    if text[i] == "_" and (i == 0 or not _is_word(text[i - 1])):
        start = i + 1
        if start < len(text) and not text[start].isspace() and text[start] != "_":
            end = closers.closing("_", start)
            if end == -1:
                return None
            inner = tags if ITALIC in tags else (*tags, ITALIC)
            return _inline(text[start:end], inner), end + 1
    return None


def _link(label: str, target: str, tags: tuple[Tag, ...]) -> list[Piece]:
    url = target[1:-1] if target.startswith("<") and target.endswith(">") else target
    if _HTTP_URL.fullmatch(url):
        anchor = (*tags, ("a", url))
        return _inline(label, anchor) if label.strip() else [(url, anchor)]
    # A file name, a relative path or a non-web scheme: only the label is worth showing, or,
    # without one (``![](chart.png)``), the target itself as plain text.
    return _inline(label, tags) if label.strip() else [(url, tags)]


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


# -- chunking -------------------------------------------------------------------------------------


def _slice(pieces: list[Piece], offsets: list[int], start: int, end: int) -> list[Piece]:
    """The pieces covering visible characters ``start:end`` (``offsets``: where each begins)."""
    out: list[Piece] = []
    index = max(0, bisect.bisect_right(offsets, start) - 1)
    while index < len(pieces) and offsets[index] < end:
        text, tags = pieces[index]
        position = offsets[index]
        if position + len(text) > start:
            out.append((text[max(0, start - position) : end - position], tags))
        index += 1
    return out


_ZWJ = "\u200d"


def _regional(char: str) -> bool:
    return "\U0001f1e6" <= char <= "\U0001f1ff"


def _extends(char: str) -> bool:
    """A character that belongs to the one before it (combining mark, variation selector, skin
    tone, emoji tag)."""
    return (
        unicodedata.combining(char) != 0
        or "\ufe00" <= char <= "\ufe0f"
        or "\U0001f3fb" <= char <= "\U0001f3ff"
        or "\U000e0020" <= char <= "\U000e007f"
        or unicodedata.category(char) in {"Mn", "Me", "Mc"}
    )


def _breakable(text: str, index: int) -> bool:
    """Whether a cut before ``text[index]`` leaves every emoji and accented letter whole: never
    next to a zero-width joiner, before a combining character or inside a flag's pair."""
    before, after = text[index - 1], text[index]
    if before == _ZWJ or after == _ZWJ or _extends(after):
        return False
    if _regional(before) and _regional(after):
        run = 0
        while index - run - 1 >= 0 and _regional(text[index - run - 1]):
            run += 1
        return run % 2 == 0
    return True


def _cut(text: str, start: int, end: int) -> int:
    """Where to end a chunk that must stop by ``end``: after a paragraph, a line or a word in its
    second half when there is one, else at the last boundary before ``end`` that splits no
    character cluster (an emoji sequence, a flag, a letter and its accents)."""
    floor = start + (end - start) // 2
    for separator in ("\n\n", "\n", " "):
        found = text.rfind(separator, floor, end)
        if found != -1:
            return found + len(separator)
    cut = end
    while cut > floor and not _breakable(text, cut):
        cut -= 1
    return cut if cut > floor else end


def split_pieces(pieces: list[Piece], limit: int = TELEGRAM_LIMIT) -> Iterator[list[Piece]]:
    """Pieces in chunks whose visible text is at most ``limit`` UTF-16 units, never empty."""
    text = "".join(p[0] for p in pieces)
    offsets: list[int] = []
    position = 0
    for piece_text, _ in pieces:
        offsets.append(position)
        position += len(piece_text)
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
            yield _slice(pieces, offsets, start, cut)
        start = cut


def html_chunks(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """The reply as Telegram HTML messages, each within ``limit`` after entity parsing."""
    return [render(chunk) for chunk in split_pieces(parse(markdown), limit)]
