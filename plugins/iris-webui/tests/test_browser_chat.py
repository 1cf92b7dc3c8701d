"""The chat page in Chromium against a real ``iris serve`` (scripted provider): a conversation.

Replies streamed and rendered, tool cards, stop, reloads, a message sent during a run, events from
the API, and conversations or agents that do not exist.

One served Iris for the module (``shared_webui``), signed in once with its one-time link; every
test opens its own conversation in a new tab. Each scripted rule is keyed by a word of its own so
tests never answer each other's messages.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import (
    WebUI,
    last_reply,
    new_conversation,
    problems,
    screenshot,
    send,
    session_id,
    wait_connected,
    wait_idle,
)
from playwright.sync_api import Page, expect


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
