"""Files in the chat page (Chromium, a real ``iris serve``): an upload the agent reads and
attaches back, downloads with the page key, and an upload over the cap refused visibly.

One served Iris for the module (``shared_webui``, uploads capped at 4 KiB); every test opens its
own conversation in a new tab.
"""

from __future__ import annotations

import re
from pathlib import Path

from browser import (
    WebUI,
    last_reply,
    page_key,
    problems,
    send,
    session_id,
    wait_connected,
    wait_idle,
)
from playwright.sync_api import Page, expect


def test_an_uploaded_file_is_read_by_the_agent(shared_webui: WebUI, chat: Page) -> None:
    session = session_id(chat)
    with chat.expect_response(re.compile(r"/uploads$")) as uploaded:
        chat.locator("#file-input").set_input_files(
            files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"secret-sauce-7"}]
        )
    stored = uploaded.value.json()
    assert stored["name"] == "notes.txt"
    chip = chat.locator("#pending-files .chip")
    expect(chip).to_contain_text("notes.txt")
    expect(chip.locator(".spinner")).to_have_count(0)
    # The read tool works relative to the data dir; the upload's path is relative to the
    # conversation's channel folder.
    path = f"WEBUI-{session}/{stored['path']}"
    shared_webui.add_rules(
        {
            "when": "summarise",
            "turns": [
                [{"tool": "read", "id": "call-read-upload", "args": {"path": path}}],
                [{"tool": "attach", "id": "call-attach", "args": {"path": path}}],
                [{"text": "Read it, and here it is back."}],
            ],
        }
    )
    send(chat, "summarise the file")
    expect(chat.locator(".message--user .chip")).to_contain_text("notes.txt")
    expect(chat.locator("#pending-files .chip")).to_have_count(0)
    card = chat.locator(".tool[data-call-id='call-read-upload']")
    expect(card).to_have_attribute("data-kind", "read")
    expect(card).to_have_attribute("data-state", "done")
    card.locator(".tool__head").click()
    expect(card.locator(".tool__result")).to_contain_text("secret-sauce-7")
    # The user's file chip downloads the very file.
    href = chat.locator(".message--user a.chip").get_attribute("href")
    assert href is not None
    # (The API wants the page key with the cookie; the page sends it, a bare link cannot.)
    assert chat.request.get(href).status == 401
    body = chat.request.get(href, headers={"X-Iris-Page-Key": page_key(chat)})
    assert body.status == 200
    assert body.body() == b"secret-sauce-7"
    # The agent attached it back: a download chip on the reply, from a `file` frame...
    offered = last_reply(chat).locator("a.chip")
    expect(offered).to_contain_text("notes.txt")
    wait_idle(chat)
    with chat.expect_download() as download:
        offered.click()
    assert Path(download.value.path()).read_bytes() == b"secret-sauce-7"
    # ...and from the history after a reload.
    chat.reload()
    wait_connected(chat)
    expect(last_reply(chat).locator("a.chip")).to_contain_text("notes.txt")
    assert problems(chat) == []


def test_an_oversized_upload_is_refused_visibly(chat: Page) -> None:
    chat.locator("#file-input").set_input_files(
        files=[{"name": "big.bin", "mimeType": "application/octet-stream", "buffer": b"x" * 5000}]
    )
    chip = chat.locator("#pending-files .chip--error")
    expect(chip).to_contain_text("big.bin")
    expect(chat.locator(".notice--error")).to_contain_text("big.bin")
    # The refused file is not sent: removing it leaves nothing attached.
    chip.get_by_role("button", name="Remove big.bin").click()
    expect(chat.locator("#pending-files .chip")).to_have_count(0)
