"""The chat page in Chromium against a real ``iris serve`` (scripted provider).

One served Iris for the module (``shared_webui``), signed in once with its one-time link; every
test opens its own conversation in a new tab. Each scripted rule is keyed by a word of its own so
tests never answer each other's messages.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from browser import (
    MOBILE,
    WebUI,
    last_reply,
    new_conversation,
    page_key,
    problems,
    screenshot,
    send,
    session_id,
    wait_connected,
    wait_idle,
    watch,
)
from playwright.sync_api import Page, expect

XSS = '<img src=x onerror=alert("xss")><script>alert(2)</script> [click](javascript:alert(3))'


def test_a_message_gets_a_streamed_reply_rendered_as_markdown(
    shared_webui: WebUI, chat: Page, tmp_path: Path
) -> None:
    shared_webui.add_rules({"when": "greet", "turns": [[{"text": "Hello, **friend**!"}]]})
    send(chat, "greet me")
    reply = last_reply(chat)
    expect(reply.locator(".bubble")).to_have_text("Hello, friend!")
    expect(reply.locator(".bubble strong")).to_have_text("friend")
    wait_idle(chat)
    # The first message names the conversation, in the sidebar and the header.
    expect(chat.locator(".session[aria-current='page'] .session__title")).to_have_text("greet me")
    expect(chat.locator("#chat-title")).to_have_text("greet me")
    assert problems(chat) == []


def test_a_tool_call_shows_a_card_that_then_shows_its_result(
    shared_webui: WebUI, chat: Page, tmp_path: Path
) -> None:
    shared_webui.add_rules(
        {
            "when": "inventory",
            "turns": [
                [
                    {"text": "Let me look."},
                    {
                        "tool": "bash",
                        "id": "call-inventory",
                        "args": {"command": "echo tool-output-42"},
                    },
                ],
                [{"text": "There are **42** things.\n\n- counted with `echo`\n- done"}],
            ],
        }
    )
    send(chat, "take the inventory")
    card = chat.locator(".tool[data-call-id='call-inventory']")
    expect(card).to_have_attribute("data-kind", "execute")
    expect(card.locator(".tool__label")).to_have_text("Run")
    expect(card.locator(".tool__subtitle")).to_have_text("echo tool-output-42")
    expect(card).to_have_attribute("data-state", "done")
    expect(chat.locator(".tool")).to_have_count(1)  # one card per call id, updated in place
    head = card.locator(".tool__head")
    expect(head).to_have_attribute("aria-expanded", "false")
    head.click()
    expect(head).to_have_attribute("aria-expanded", "true")
    expect(card.locator(".tool__result")).to_contain_text("tool-output-42")
    expect(card.locator(".tool__input")).to_contain_text('"command": "echo tool-output-42"')
    expect(last_reply(chat).locator(".bubble")).to_contain_text("There are 42 things.")
    wait_idle(chat)
    screenshot(chat, "conversation", tmp_path)
    chat.emulate_media(color_scheme="dark")
    screenshot(chat, "conversation-dark", tmp_path)
    chat.emulate_media(color_scheme="light")
    assert problems(chat) == []


def test_stop_ends_a_run_mid_way(shared_webui: WebUI, chat: Page) -> None:
    shared_webui.add_rules(
        {
            "when": "marathon",
            "turns": [
                [
                    {"text": "Warming up."},
                    {"tool": "bash", "id": "call-marathon", "args": {"command": "echo lap"}},
                ],
                [{"sleep": 60}, {"text": "finished the marathon"}],
            ],
        }
    )
    stop = chat.get_by_role("button", name="Stop")
    expect(stop).to_be_disabled()
    send(chat, "run the marathon")
    # The first turn's text and card show while the run goes on; Stop is on only now.
    reply = last_reply(chat)
    expect(reply.locator(".bubble")).to_have_text("Warming up.")
    expect(reply.locator(".bubble")).to_have_class(re.compile("bubble--streaming"))
    expect(reply.locator(".tool")).to_have_attribute("data-state", "done")
    expect(chat.locator("#run-status")).to_have_attribute("data-active", "true")
    expect(stop).to_be_enabled()
    # A reload mid-run: the page learns a run is going (Stop on) and shows its card so far.
    chat.reload()
    wait_connected(chat)
    expect(stop).to_be_enabled()
    reply = last_reply(chat)
    expect(reply.locator(".tool")).to_have_attribute("data-state", "done")
    stop.click()
    expect(reply.locator(".message__note")).to_have_text("Stopped")
    expect(chat.locator(".message--assistant")).to_have_count(1)  # the same turn, continued
    wait_idle(chat)
    expect(reply.locator(".bubble")).not_to_contain_text("finished")
    assert problems(chat) == []


def test_reload_restores_the_conversation(shared_webui: WebUI, chat: Page) -> None:
    shared_webui.add_rules(
        {
            "when": "remember",
            "turns": [
                [{"tool": "bash", "id": "call-remember", "args": {"command": "echo kept"}}],
                [{"text": "I will *remember* this."}],
            ],
        }
    )
    session = session_id(chat)
    send(chat, "remember the milk")
    expect(last_reply(chat).locator(".bubble")).to_have_text("I will remember this.")
    wait_idle(chat)
    chat.reload()
    wait_connected(chat)
    assert session_id(chat) == session
    expect(chat.locator(".message--user .bubble")).to_have_text(["remember the milk"])
    expect(last_reply(chat).locator(".bubble em")).to_have_text("remember")
    card = chat.locator(".tool")
    expect(card).to_have_count(1)
    expect(card).to_have_attribute("data-state", "done")
    expect(card).to_have_attribute("data-kind", "execute")
    # Another conversation, then back through the sidebar: the URL follows the choice.
    new_conversation(chat)
    expect(chat.locator(".message")).to_have_count(0)
    chat.locator(f".session[data-session='{session}']").click()
    expect(chat).to_have_url(re.compile(f"#s={session}"))
    expect(chat.locator(".message--user .bubble")).to_have_text(["remember the milk"])


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


def test_an_unknown_agent_shows_a_clear_error(shared_webui: WebUI, chat: Page) -> None:
    session = session_id(chat)
    chat.goto(f"{shared_webui.url}/#s={session}&agent=nobody-here")
    banner = chat.get_by_role("alert").filter(has_text="nobody-here")
    expect(banner).to_contain_text("No sub-agent named")
    expect(chat.locator("#send")).to_be_disabled()
    # Back to Iris from the banner: messages flow again.
    banner.get_by_role("button", name="Talk to Iris").click()
    wait_connected(chat)
    expect(chat.locator("#agent-select")).to_have_value("")
    expect(chat.locator("#send")).to_be_enabled()


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


def test_an_api_event_for_the_conversation_shows_live(shared_webui: WebUI, chat: Page) -> None:
    """A channel-addressed API event for ``WEBUI-<id>`` reaches the open page: the Web UI
    transport claims its channels ahead of the headless bridge."""
    shared_webui.add_rules({"when": "nightly", "turns": [[{"text": "Nightly report: all green."}]]})
    session = session_id(chat)
    answer = shared_webui.server.post(
        f"/channels/WEBUI-{session}/events", json_body={"text": "nightly check"}
    )
    assert answer.status == 202, answer.body
    event = chat.locator(".message--event")
    expect(event.locator(".bubble")).to_have_text("nightly check")
    expect(event.locator(".message__who")).to_have_text("Event")
    expect(last_reply(chat).locator(".bubble")).to_have_text("Nightly report: all green.")
    wait_idle(chat)
    assert problems(chat) == []


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


@pytest.mark.parametrize("reload", [False, True], ids=["live", "reloaded-mid-run"])
def test_a_message_sent_during_a_run_waits_and_both_replies_keep_their_place(
    shared_webui: WebUI, chat: Page, tmp_path: Path, reload: bool
) -> None:
    """Turns are keyed by run id: the second message shows as queued, the first run's remaining
    output (its late final reply included) stays under the first message, and each reply shows
    once, also when the page was reloaded mid-run and after a reload at the end."""
    gate = tmp_path / "gate"
    shared_webui.add_rules(
        {
            "when": "alpha",
            "turns": [
                [
                    {"text": "Alpha is waiting."},
                    {
                        "tool": "bash",
                        "id": "call-alpha-gate",
                        # Holds the run until the test opens the gate (no timing involved).
                        "args": {
                            "command": f"while [ ! -e {gate} ]; do sleep 0.05; done; echo open"
                        },
                    },
                ],
                [{"text": "Alpha done."}],
            ],
        },
        {"when": "beta", "turns": [[{"text": "Beta done."}]]},
    )
    send(chat, "alpha first")
    card = chat.locator(".tool[data-call-id='call-alpha-gate']")
    expect(card).to_have_attribute("data-state", "running")
    if reload:
        # A reload while the run goes on: it carries on in a turn before later messages.
        chat.reload()
        wait_connected(chat)
        expect(chat.locator("#stop")).to_be_enabled()
    send(chat, "beta second")
    queued = chat.locator(".message--queued")
    expect(queued.locator(".bubble")).to_have_text("beta second")
    expect(queued.locator(".message__queued")).to_have_text("Queued")
    # The first run goes on (its card, begun before the reload, shows when it ends).
    expect(chat.locator("#stop")).to_be_enabled()
    expect(chat.get_by_text("Beta done.")).to_have_count(0)
    gate.touch()
    replies = chat.locator(".message--assistant .bubble")
    expect(replies).to_have_count(2)
    expect(replies.first).to_contain_text("Alpha done.")
    expect(replies.last).to_have_text("Beta done.")
    expect(queued).to_have_count(0)
    wait_idle(chat)
    order = """() => [...document.querySelectorAll('#messages > li:not([hidden])')].map(
        li => (li.classList.contains('message--user') ? 'user: ' : 'iris: ') +
              li.querySelector('.bubble').textContent)"""
    shown = chat.evaluate(order)
    assert len(shown) == 4, shown
    assert shown[0] == "user: alpha first"
    assert shown[1].startswith("iris: ") and "Alpha done." in shown[1]
    assert shown[2:] == ["user: beta second", "iris: Beta done."]
    assert "Alpha done." not in shown[3]
    # The card stayed with the first reply.
    expect(chat.locator(".message--assistant").first.locator(".tool")).to_have_count(1)
    chat.reload()
    wait_connected(chat)
    expect(chat.locator(".message--assistant .bubble")).to_have_count(2)
    after = chat.evaluate(order)
    assert [line.split(":")[0] for line in after] == ["user", "iris", "user", "iris"]
    assert after[3] == "iris: Beta done."
    assert problems(chat) == []


def test_a_conversation_that_no_longer_exists_offers_a_new_one(
    shared_webui: WebUI, chat: Page
) -> None:
    """A socket refused before ``ready`` is not retried forever: the page asks the API why, and
    a conversation that is gone says so once, with a way on."""
    chat.goto(f"{shared_webui.url}/#s=gone-for-good")
    banner = chat.locator("#banner")
    expect(banner).to_contain_text("This conversation no longer exists")
    expect(chat.locator("#connection")).to_have_attribute("data-state", "closed")
    expect(chat.locator("#send")).to_be_disabled()
    banner.get_by_role("button", name="Start a new conversation").click()
    wait_connected(chat)
    expect(banner).to_be_hidden()
    assert session_id(chat) != "gone-for-good"
    assert problems(chat) == []
