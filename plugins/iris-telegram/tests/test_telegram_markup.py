"""Markdown subset → Telegram HTML, checked with the fake Bot API's own HTML parser (as strict as
Telegram's): formatting, links, escaping of every injection attempt, and chunking measured
after entity parsing."""

from __future__ import annotations

import random

import pytest
from iris_telegram import markup
from iris_telegram.markup import html_chunks, parse, render

from iris_runtime.testing.fake_telegram import MESSAGE_LIMIT, parse_html, utf16_len


def to_telegram_html(markdown: str) -> str:
    """The whole reply as one HTML string (the sender's path, without the length limit)."""
    return render(parse(markdown))


@pytest.mark.parametrize(
    ("markdown", "html"),
    [
        ("plain text", "plain text"),
        ("**bold** and _italic_ and ~~gone~~", "<b>bold</b> and <i>italic</i> and <s>gone</s>"),
        ("**bold _and italic_**", "<b>bold <i>and italic</i></b>"),
        ("snake_case_name and file_1_2.txt stay", "snake_case_name and file_1_2.txt stay"),
        ("single *asterisks* stay", "single *asterisks* stay"),
        ("__dunder__ stays", "__dunder__ stays"),
        ("`a < b && c`", "<code>a &lt; b &amp;&amp; c</code>"),
        ("``code with ` inside``", "<code>code with ` inside</code>"),
        ("run `ls -l` then ``a`b``", "run <code>ls -l</code> then <code>a`b</code>"),
        (
            "```python\nif a < b:\n    print('**no**')\n```",
            "<pre><code class=\"language-python\">if a &lt; b:\n    print('**no**')</code></pre>",
        ),
        ("```\nplain <pre>\n```", "<pre>plain &lt;pre&gt;</pre>"),
        ("```js\nunclosed fence", '<pre><code class="language-js">unclosed fence</code></pre>'),
        ("[the docs](https://example.com/a_b?x=1&y=2)",
         '<a href="https://example.com/a_b?x=1&amp;y=2">the docs</a>'),
        ("[**bold** link](http://e.com)", '<a href="http://e.com"><b>bold</b> link</a>'),
        ("[report.pdf](report.pdf)", "report.pdf"),
        ("[report](attachments/report.pdf) is attached", "report is attached"),
        ("[click](javascript:alert(1))", "click"),
        ("[x](file:///etc/passwd)", "x"),
        ("![chart](https://example.com/c.png)", '<a href="https://example.com/c.png">chart</a>'),
        ("[](https://example.com)", '<a href="https://example.com">https://example.com</a>'),
        ('[q](https://e.com/"onmouseover="x)', '<a href="https://e.com/&quot;onmouseover=&quot;x">q</a>'),
        ("# Title\n## Sub", "<b>Title</b>\n<b>Sub</b>"),
        ("- one\n* two\n  + three", "• one\n• two\n  • three"),
        ("> quoted **line**\n> second\nafter",
         "<blockquote>quoted <b>line</b>\nsecond</blockquote>\nafter"),
        (r"\*not italic\* and \_x\_", "*not italic* and _x_"),
        ("**unclosed bold and _unclosed italic", "**unclosed bold and _unclosed italic"),
        ("a & b < c > d", "a &amp; b &lt; c &gt; d"),
        ("# **Title**", "<b>Title</b>"),
        ("[`code`](https://e.com)", '<a href="https://e.com">code</a>'),
        ("[see `x` here](https://e.com)", '<a href="https://e.com">see x here</a>'),
        ("_a_b_ and _c_", "<i>a_b</i> and <i>c</i>"),
        ("x _a_ _b", "x <i>a</i> _b"),
    ],
)  # fmt: skip
def test_conversion(markdown: str, html: str) -> None:
    assert to_telegram_html(markdown) == html
    parse_html(html)  # Telegram would accept it


@pytest.mark.parametrize(
    "attack",
    [
        "<b>bold?</b>",
        '<a href="https://evil.example">click</a>',
        "<script>alert(1)</script>",
        "&lt;b&gt; already escaped &amp; entities &#60;",
        "</i></b></code></pre>",
        "<pre><code>",
        '[x](https://ok.example"><b>boom</b>)',
        "``` <b>\n</pre><b>\n```",
        "**</b>**",
        "`</code><b>`",
        "<tg-spoiler>hidden</tg-spoiler>",
        "a\x00b\x1bc",
    ],
)
def test_no_input_injects_markup(attack: str) -> None:
    parsed = parse_html(to_telegram_html(attack))
    assert all(e["type"] in {"code", "pre", "bold", "text_link"} for e in parsed.entities)
    injected = [e for e in parsed.entities if e["type"] == "text_link"]
    assert all(e["url"].startswith("https://ok.example") for e in injected)
    if "](" in attack:  # a link whose URL is not a plain web URL is reduced to its label
        assert parsed.text == "x"
        return
    for fragment in ("<b>", "</b>", "<script>", "&lt;b&gt;"):
        if fragment in attack:
            assert fragment in parsed.text, "markup in the input is shown as typed"


def test_entities_land_on_the_right_text() -> None:
    parsed = parse_html(to_telegram_html("see **this** and [docs](https://d.example) now"))
    assert parsed.text == "see this and docs now"
    assert parsed.entities == [
        {"type": "bold", "offset": 4, "length": 4},
        {"type": "text_link", "offset": 13, "length": 4, "url": "https://d.example"},
    ]


def _visible(chunks: list[str]) -> list[str]:
    return [parse_html(chunk).text for chunk in chunks]


def test_a_short_reply_is_one_chunk() -> None:
    assert html_chunks("hello **there**") == ["hello <b>there</b>"]
    assert html_chunks("") == []
    assert html_chunks("\n\n  \n") == []


def test_the_limit_counts_visible_text_not_html() -> None:
    # 4000 visible characters, ~20,000 characters of HTML source: still one message.
    reply = "<&>" * 1000 + "**" + "x" * 1000 + "**"
    [chunk] = html_chunks(reply)
    assert len(chunk) > MESSAGE_LIMIT
    assert utf16_len(parse_html(chunk).text) == 4000


def test_a_100_kb_reply_is_chunked_within_the_limit_and_nothing_is_lost() -> None:
    rng = random.Random(8)  # noqa: S311 (test data)
    paragraphs = []
    for index in range(400):
        words = " ".join(
            rng.choice(["alpha", "**beta**", "_gamma_", "`d<e>`", "&"]) for _ in range(40)
        )
        paragraphs.append(f"{index}: {words}")
    paragraphs.insert(
        200, "```\n" + "\n".join(f"line {i} <tag> & more" for i in range(300)) + "\n```"
    )
    reply = "\n\n".join(paragraphs)
    assert len(reply) > 100_000
    chunks = html_chunks(reply)
    assert len(chunks) > 20
    texts = _visible(chunks)  # every chunk is well-formed on its own
    assert all(0 < utf16_len(t) <= MESSAGE_LIMIT for t in texts)
    whole = parse_html(to_telegram_html(reply)).text
    assert "".join(texts).replace("\n", "").replace(" ", "") == whole.replace("\n", "").replace(
        " ", ""
    )
    # Cuts fall between paragraphs or lines (each chunk after the first starts one).
    starts = [t.split(":", 1)[0] for t in texts[1:]]
    assert all(s.isdigit() or s.startswith("line ") for s in starts), starts


def test_cuts_prefer_paragraphs_then_lines() -> None:
    first = "a" * 3000
    second = "b" * 3000
    assert _visible(html_chunks(f"{first}\n\n{second}")) == [first, second]
    assert _visible(html_chunks(f"{first}\n{second}")) == [first, second]
    words = " ".join(["word"] * 2000)  # 9999 characters, no newline
    texts = _visible(html_chunks(words))
    assert all(t.startswith("word") and t.endswith("word") for t in texts)


def test_a_chunk_boundary_inside_formatting_reopens_it() -> None:
    reply = "**" + "x" * 5000 + "**"
    chunks = html_chunks(reply)
    assert len(chunks) == 2
    for chunk in chunks:
        assert chunk.startswith("<b>") and chunk.endswith("</b>")
        parsed = parse_html(chunk)
        assert parsed.entities == [{"type": "bold", "offset": 0, "length": len(parsed.text)}]
    code = "```py\n" + "\n".join("print(1 < 2)" for _ in range(600)) + "\n```"
    for chunk in html_chunks(code):
        assert parse_html(chunk).entities[0]["type"] == "pre"


def test_characters_outside_the_bmp_count_twice() -> None:
    reply = "😀" * 3000  # 6000 UTF-16 units
    texts = _visible(html_chunks(reply))
    assert [utf16_len(t) for t in texts] == [4096, 1904]
    assert "".join(texts) == reply  # never half a surrogate pair


def test_an_unbreakable_run_is_cut_hard() -> None:
    texts = _visible(html_chunks("y" * 9000))
    assert [len(t) for t in texts] == [4096, 4096, 808]


def test_a_cut_never_splits_an_emoji_sequence_or_a_flag() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one glyph, five code points
    for reply in ("x" + "\U0001f1e9\U0001f1ea" * 3000, family * 1000, "e\u0301" * 5000):
        texts = _visible(html_chunks(reply))
        assert len(texts) > 1
        assert "".join(texts) == reply
        for text in texts:
            assert not text.startswith(("\u200d", "\u0301")) and not text.endswith("\u200d")
        if "\U0001f1e9" in reply:  # every chunk after the first starts a flag
            assert all(t.startswith("\U0001f1e9") for t in texts[1:])


def test_a_very_long_line_is_shown_as_typed() -> None:
    line = "**b** _i_ " * (markup.MAX_FORMATTED_LINE // 10 + 1)
    texts = _visible(html_chunks(line))
    assert "".join(texts).replace(" ", "") == line.replace(" ", "")
    assert html_chunks("**b** _i_") == ["<b>b</b> <i>i</i>"]


class _CountingStr(str):
    """Counts the characters ``find`` scans over one line."""

    scanned = 0

    def find(self, sub: str, start: int | None = None, end: int | None = None) -> int:  # type: ignore[override]
        found = super().find(sub, start, end)
        begin = start or 0
        type(self).scanned += (found if found != -1 else len(self)) - begin
        return found


@pytest.mark.parametrize("unit", ["_a ", "**a ", "~~a ", '{"_id":1,', "`x "])
def test_span_matching_scans_each_line_a_bounded_number_of_times(unit: str) -> None:
    # Openers without a closer used to rescan the rest of the line each (quadratic: 110 s for
    # 100 KB); the closers are now found in one pass per marker.
    text = _CountingStr(unit * 2000)
    _CountingStr.scanned = 0
    markup._inline(text, ())
    assert _CountingStr.scanned <= 4 * len(text)
