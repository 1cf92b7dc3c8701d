"""The Markdown renderer in a real browser: formatting works, hostile input stays inert text.

These load ``markdown.js`` into an empty page (no server): the renderer must build nodes, so
what matters is the DOM Chromium ends up with and whether any script ran.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from browser import watch
from playwright.sync_api import Browser, Page

MARKDOWN_JS = Path(__file__).parents[1] / "iris_webui" / "static" / "markdown.js"

HOSTILE = [
    "<img src=x onerror=alert(1)>",
    "<script>alert(2)</script>",
    "[click](javascript:alert(3))",
    "[click](JaVaScRiPt:alert(4))",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCg1KTwvc2NyaXB0Pg==)",
    '<a href="javascript:alert(6)">x</a>',
    "<svg onload=alert(7)>",
    "<iframe src=javascript:alert(8)>",
    "**<img src=x onerror=alert(9)>**",
    "`<img src=x onerror=alert(10)>`",
    "```html\n<script>alert(11)</script>\n```",
    '[x](http://ok.example/" onmouseover="alert(12))',
    "- <b onmouseover=alert(13)>item</b>",
    "# <img src=x onerror=alert(14)>",
    "> <style>body{display:none}</style>",
]


@pytest.fixture
def md(chromium: Browser) -> Any:
    context = chromium.new_context()
    page = context.new_page()
    watch(page)
    page.set_content("<!doctype html><div id=out></div>")
    page.add_script_tag(path=str(MARKDOWN_JS))

    def render(source: str) -> Page:
        page.evaluate(
            "src => document.getElementById('out').replaceChildren(IrisMarkdown.render(src))",
            source,
        )
        return page

    yield render
    context.close()


def html(page: Page) -> str:
    return str(page.inner_html("#out"))


def test_formatting_builds_the_expected_elements(md: Any) -> None:
    page = md(
        "# Title\n\nSome **bold**, *italic*, ~~gone~~ and `code`.\nSecond line\n\n"
        "- one\n- two\n  - nested\n\n1. first\n2. second\n\n> quoted\n\n"
        "```python\nprint('<b>')\n```\n\nSee [docs](https://example.com/d) or http://example.org."
    )
    assert page.locator("#out h3").inner_text() == "Title"
    assert page.locator("#out strong").inner_text() == "bold"
    assert page.locator("#out em").inner_text() == "italic"
    assert page.locator("#out del").inner_text() == "gone"
    assert page.locator("#out p code").inner_text() == "code"
    assert page.locator("#out p br").count() == 1
    assert page.locator("#out > ul > li").count() == 2
    assert page.locator("#out ul ul > li").inner_text() == "nested"
    assert page.locator("#out ol > li").count() == 2
    assert page.locator("#out blockquote").inner_text() == "quoted"
    assert page.locator("#out pre code").inner_text() == "print('<b>')"
    assert page.locator("#out pre").get_attribute("data-lang") == "python"
    links = page.locator("#out a")
    assert links.count() == 2
    assert links.nth(0).get_attribute("href") == "https://example.com/d"
    assert links.nth(0).get_attribute("rel") == "noopener noreferrer"
    assert links.nth(0).get_attribute("target") == "_blank"
    assert links.nth(1).get_attribute("href") == "http://example.org/"
    assert links.nth(1).inner_text() == "http://example.org"  # the final dot is prose


def test_snake_case_and_lone_stars_stay_text(md: Any) -> None:
    page = md("call my_var_name with 2 * 3 * 4 and **unclosed")
    assert page.locator("#out em, #out strong").count() == 0
    assert page.inner_text("#out") == "call my_var_name with 2 * 3 * 4 and **unclosed"


@pytest.mark.parametrize("source", HOSTILE)
def test_hostile_input_renders_as_inert_text(md: Any, source: str) -> None:
    page = md(source)
    dangerous = "#out img, #out script, #out svg, #out iframe, #out style, #out b, #out [onerror]"
    assert page.locator(dangerous).count() == 0, html(page)
    for link in page.locator("#out a").all():
        assert (link.get_attribute("href") or "").startswith(("http://", "https://"))
    # Nothing of the payload was dropped: it is all there, as characters.
    text = page.inner_text("#out")
    assert any(mark in text for mark in ("alert(", "display:none", "data:text/html")), text
    assert page.problems == []  # type: ignore[attr-defined]


def test_a_hostile_link_keeps_its_text_and_gets_no_href(md: Any) -> None:
    page = md("[click me](javascript:alert(1)) then [ok](https://example.com)")
    assert page.locator("#out a").count() == 1
    assert page.inner_text("#out").startswith("[click me](javascript:alert(1)) then ")
