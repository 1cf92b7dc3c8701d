"""The chat page without a mouse and on a narrow screen (Chromium, a real ``iris serve``).

One served Iris for the module (``shared_webui``); every test opens its own conversation in a new
tab. Each scripted rule is keyed by a word of its own.
"""

from __future__ import annotations

from pathlib import Path

from browser import (
    MOBILE,
    WebUI,
    last_reply,
    new_conversation,
    screenshot,
    send,
    wait_connected,
    wait_idle,
)
from playwright.sync_api import Page, expect


def test_keyboard_only_send_and_navigation(shared_webui: WebUI, chat: Page) -> None:
    shared_webui.add_rules({"when": "keyboard", "turns": [[{"text": "typed without a mouse"}]]})
    chat.reload()  # a freshly loaded page: the keyboard starts at the top
    wait_connected(chat)
    chat.keyboard.press("Tab")
    expect(chat.locator(".skip-link")).to_be_focused()
    chat.keyboard.press("Enter")
    box = chat.get_by_label("Message", exact=True)
    expect(box).to_be_focused()
    chat.keyboard.type("keyboard line one")
    chat.keyboard.press("Shift+Enter")
    chat.keyboard.type("line two")
    expect(box).to_have_value("keyboard line one\nline two")
    chat.keyboard.press("Enter")
    expect(chat.locator(".message--user .bubble").last).to_have_text("keyboard line one\nline two")
    expect(last_reply(chat).locator(".bubble")).to_have_text("typed without a mouse")
    expect(box).to_have_value("")
    # The URL still names the conversation (the skip link did not touch the hash).
    assert "s=" in chat.url


def test_narrow_screens_collapse_the_sidebar(
    shared_webui: WebUI, shared_page: Page, tmp_path: Path
) -> None:
    shared_webui.add_rules(
        {
            "when": "phone",
            "turns": [
                [
                    {
                        "tool": "bash",
                        "id": "call-phone",
                        "args": {"command": "uname -s"},
                    }
                ],
                [{"text": "Fits on a **phone**:\n\n1. sidebar folds away\n2. cards stay readable"}],
            ],
        }
    )
    page = shared_page.context.new_page()
    page.set_viewport_size(MOBILE)
    page.goto(shared_webui.url + "/")
    wait_connected(page)
    sidebar = page.locator("#sidebar")
    menu = page.get_by_role("button", name="Show conversations")
    expect(sidebar).not_to_be_visible()
    menu.click()
    new_conversation(page)  # the drawer's button; choosing closes the drawer
    expect(sidebar).not_to_be_visible()
    send(page, "does it work on a phone")
    expect(last_reply(page).locator(".bubble")).to_contain_text("cards stay readable")
    wait_idle(page)
    screenshot(page, "mobile", tmp_path)
    menu.click()
    expect(sidebar).to_be_visible()
    expect(menu).to_have_attribute("aria-expanded", "true")
    screenshot(page, "mobile-sidebar", tmp_path)
    page.keyboard.press("Escape")
    expect(sidebar).not_to_be_visible()
    page.close()
