"""The chat page's defences in Chromium against a real ``iris serve``: hostile markup stays
text, a socket from another origin is refused, and the session cookie alone opens nothing.

One served Iris for the module (``shared_webui``); every test opens its own conversation in a new
tab. Each scripted rule is keyed by a word of its own.
"""

from __future__ import annotations

import json
import re

from browser import (
    WebUI,
    last_reply,
    problems,
    send,
    session_id,
    wait_connected,
    wait_idle,
    watch,
)
from playwright.sync_api import Page, expect

XSS = '<img src=x onerror=alert("xss")><script>alert(2)</script> [click](javascript:alert(3))'


def test_hostile_markup_stays_inert_in_user_text_and_replies(
    shared_webui: WebUI, chat: Page
) -> None:
    shared_webui.add_rules({"when": "hostile", "turns": [[{"text": "hostile reply " + XSS}]]})
    send(chat, "hostile " + XSS)
    reply = last_reply(chat).locator(".bubble")
    expect(reply).to_contain_text("hostile reply <img src=x onerror=")
    wait_idle(chat)
    messages = chat.locator("#messages")
    expect(messages.locator(".bubble img, .bubble script, .bubble [onerror]")).to_have_count(0)
    expect(messages.locator("a[href^='javascript' i]")).to_have_count(0)
    expect(chat.locator(".message--user .bubble")).to_have_text("hostile " + XSS)
    # Reloaded from the durable log, it is still only text.
    chat.reload()
    wait_connected(chat)
    expect(chat.locator(".message--user .bubble")).to_have_text("hostile " + XSS)
    expect(chat.locator(".bubble img, .bubble script")).to_have_count(0)
    assert problems(chat) == []


def test_a_socket_from_another_origin_is_refused(shared_webui: WebUI, chat: Page) -> None:
    session = session_id(chat)
    socket_url = f"ws://127.0.0.1:{shared_webui.port}/ws?session={session}"
    probe = """url => new Promise(resolve => {
        const ws = new WebSocket(url);
        ws.onopen = () => ws.send(JSON.stringify(
            {type: "hello", page_key: localStorage.getItem("iris.pageKey") || "none"}));
        ws.onmessage = event => { resolve("frame: " + event.data); ws.close(); };
        ws.onclose = () => resolve("closed");
    })"""
    # Same origin, same cookie: accepted (the first frame is `ready`).
    assert json.loads(chat.evaluate(probe, socket_url).removeprefix("frame: "))["type"] == "ready"
    # A page from another origin (same site, so the browser does send the cookie): refused.
    evil = chat.context.new_page()
    evil_origin = "http://127.0.0.1:9"
    evil.route(
        f"{evil_origin}/evil.html",
        lambda route: route.fulfill(content_type="text/html", body="<!doctype html><p>evil"),
    )
    evil.goto(f"{evil_origin}/evil.html")
    assert evil.evaluate(probe, socket_url) == "closed"
    evil.close()


def test_the_cookie_alone_opens_neither_history_nor_chat(shared_webui: WebUI, chat: Page) -> None:
    """Browsers send 127.0.0.1's cookies to every port: a page of another local server gets the
    cookie but not the page key, and with the cookie alone nothing opens."""
    session = session_id(chat)
    shared_webui.add_rules({"when": "cookie", "turns": [[{"text": "cookie reply"}]]})
    send(chat, "cookie check")
    expect(last_reply(chat).locator(".bubble")).to_have_text("cookie reply")
    wait_idle(chat)
    stranger = shared_webui.context()
    stranger.add_cookies(chat.context.cookies())  # type: ignore[arg-type]
    page = stranger.new_page()
    watch(page)
    page.goto(f"{shared_webui.url}/#s={session}")
    expect(page).to_have_url(re.compile(r"/login\?error=page_key_required"))
    expect(page.locator("#login-error")).to_contain_text("not signed in")
    history = page.request.get(f"{shared_webui.url}/api/sessions/{session}/history")
    assert history.status == 401
    assert history.json()["code"] == "page_key_required"
    assert "cookie reply" not in history.text()
    wrong = page.request.get(
        f"{shared_webui.url}/api/sessions/{session}/history",
        headers={"X-Iris-Page-Key": "not-the-key"},
    )
    assert wrong.status == 401
    # The socket: a hello without the key (or any other first frame) gets no `ready`.
    probe = """([url, first]) => new Promise(resolve => {
        const frames = [];
        const ws = new WebSocket(url);
        ws.onopen = () => ws.send(JSON.stringify(first));
        ws.onmessage = event => frames.push(JSON.parse(event.data));
        ws.onclose = event => resolve({frames, code: event.code});
    })"""
    url = f"ws://127.0.0.1:{shared_webui.port}/ws?session={session}"
    for first in (
        {"type": "hello", "page_key": "not-the-key"},
        {"type": "message", "text": "cookie only", "files": []},
    ):
        answer = page.evaluate(probe, [url, first])
        assert [f["type"] for f in answer["frames"]] == ["error"], answer
        assert answer["frames"][0]["code"] == "page_key_required"
        assert answer["code"] == 1008
    # The real page, with its key, still works.
    expect(chat.locator(".message--assistant .bubble")).to_have_text(["cookie reply"])
    assert problems(page) == []
    assert problems(chat) == []
