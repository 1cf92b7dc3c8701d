"""Telegram's ``parse_mode=HTML``, as the Bot API parses it: tags to entities, visible text.

The Bot API accepts a small set of tags (``b strong i em u ins s strike del span.tg-spoiler
tg-spoiler a code pre blockquote tg-emoji``), the entities ``&lt; &gt; &amp; &quot;`` and numeric
ones, and refuses anything else with ``400 Bad Request: can't parse entities: …``. The message
limit (4096) and entity offsets are counted in UTF-16 code units of the *visible* text, after
parsing and after leading and trailing whitespace is trimmed. This parser is deliberately at least
as strict as Telegram's (a bare ``&`` or ``<`` is an error), so text that passes here passes there.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

TAG_ENTITY = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
    "a": "text_link",
    "code": "code",
    "pre": "pre",
    "blockquote": "blockquote",
    "tg-emoji": "custom_emoji",
}
_TAG = re.compile(
    r"<(/?)([A-Za-z][A-Za-z0-9-]*)((?:\s+[A-Za-z-]+(?:\s*=\s*(?:\"[^\"<>]*\"|'[^'<>]*'|[^\s>\"'=<]+))?)*)\s*>"
)
_ATTR = re.compile(r"([A-Za-z-]+)(?:\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s>\"'=<]+)))?")
_ENTITY = re.compile(r"&(lt|gt|amp|quot|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});")


class EntityParseError(ValueError):
    """The text is not valid Telegram HTML; the message is Telegram's error description."""


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units: how Telegram counts message length and entity offsets."""
    return len(text.encode("utf-16-le")) // 2


@dataclass
class Parsed:
    text: str
    entities: list[dict[str, Any]] = field(default_factory=list)

    @property
    def length(self) -> int:
        return utf16_len(self.text)


def _byte_offset(source: str, index: int) -> int:
    return len(source[:index].encode("utf-8"))


def _attrs(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for match in _ATTR.finditer(raw):
        value = next((g for g in match.groups()[1:] if g is not None), "")
        out[match.group(1).lower()] = html.unescape(value)
    return out


def parse_html(source: str) -> Parsed:
    """Parse ``source`` like the Bot API does; raises :class:`EntityParseError` when it would
    refuse it."""
    text: list[str] = []
    length = 0  # UTF-16 units of ``text`` so far
    stack: list[tuple[str, int, dict[str, str]]] = []
    entities: list[dict[str, Any]] = []
    pos = 0
    while pos < len(source):
        char = source[pos]
        if char == "<":
            match = _TAG.match(source, pos)
            if match is None:
                raise EntityParseError(
                    "Bad Request: can't parse entities: Unexpected character at byte offset "
                    f"{_byte_offset(source, pos)}"
                )
            closing, name, raw_attrs = match.group(1), match.group(2).lower(), match.group(3)
            offset = _byte_offset(source, pos)
            if closing:
                if not stack or stack[-1][0] != name:
                    expected = f'"</{stack[-1][0]}>"' if stack else "nothing"
                    raise EntityParseError(
                        "Bad Request: can't parse entities: Unmatched end tag at byte offset "
                        f'{offset}, expected {expected}, found "</{name}>"'
                    )
                tag, start, attrs = stack.pop()
                entity = _entity(tag, start, length - start, attrs, stack)
                if entity is not None:
                    entities.append(entity)
            else:
                if name not in TAG_ENTITY:
                    raise EntityParseError(
                        f'Bad Request: can\'t parse entities: Unsupported start tag "{name}" at '
                        f"byte offset {offset}"
                    )
                attrs = _attrs(raw_attrs)
                if name == "span" and attrs.get("class") != "tg-spoiler":
                    raise EntityParseError(
                        'Bad Request: can\'t parse entities: Tag "span" must have class '
                        f'"tg-spoiler" at byte offset {offset}'
                    )
                if any(t[0] in {"code", "pre"} and name != "code" for t in stack):
                    raise EntityParseError(
                        "Bad Request: can't parse entities: Tag inside code or pre at byte offset "
                        f"{offset}"
                    )
                stack.append((name, length, attrs))
            pos = match.end()
        elif char == "&":
            match = _ENTITY.match(source, pos)
            if match is None:
                raise EntityParseError(
                    "Bad Request: can't parse entities: Unsupported HTML entity at byte offset "
                    f"{_byte_offset(source, pos)}"
                )
            decoded = html.unescape(match.group(0))
            text.append(decoded)
            length += utf16_len(decoded)
            pos = match.end()
        else:
            end = pos
            while end < len(source) and source[end] not in "<&":
                end += 1
            chunk = source[pos:end]
            text.append(chunk)
            length += utf16_len(chunk)
            pos = end
    if stack:
        raise EntityParseError(
            "Bad Request: can't parse entities: Can't find end tag corresponding to start tag "
            f'"{stack[-1][0]}"'
        )
    return _trimmed("".join(text), entities)


def _entity(
    tag: str,
    offset: int,
    length: int,
    attrs: dict[str, str],
    outer: list[tuple[str, int, dict[str, str]]],
) -> dict[str, Any] | None:
    kind = TAG_ENTITY[tag]
    if length == 0:
        return None
    if kind == "code" and outer and outer[-1][0] == "pre":
        language = attrs.get("class", "")
        if language.startswith("language-"):
            outer[-1][2]["language"] = language[len("language-") :]
        return None  # <pre><code class=…> is one pre entity with a language
    entity: dict[str, Any] = {"type": kind, "offset": offset, "length": length}
    if kind == "text_link":
        entity["url"] = attrs.get("href", "")
    if kind == "pre" and attrs.get("language"):
        entity["language"] = attrs["language"]
    return entity


def _trimmed(text: str, entities: list[dict[str, Any]]) -> Parsed:
    """Telegram trims leading and trailing whitespace and shifts or clips entities to match."""
    stripped = text.strip()
    lead = utf16_len(text[: len(text) - len(text.lstrip())])
    total = utf16_len(stripped)
    kept = []
    for entity in sorted(entities, key=lambda e: (e["offset"], -e["length"])):
        start = max(0, entity["offset"] - lead)
        end = min(total, entity["offset"] + entity["length"] - lead)
        if end > start:
            kept.append({**entity, "offset": start, "length": end - start})
    return Parsed(stripped, kept)
