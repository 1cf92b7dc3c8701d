"""Background sub-agents in the browser: a live card per sub-agent (label, agent, status badge,
runtime, a Log button), updated in place by ``Engine.notify`` events, and the announce shown
once, live and after a reload.

A real ``iris serve`` with the Web UI and Debian's Chromium; the engine's side is reached
through the test-only hook plugin (``notify_hook``). Nothing here waits on a clock: the runtime
of a running card is checked by its shape, a finished one by its exact value."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from browser import WebUI, new_conversation, problems, screenshot, wait_connected, wait_idle
from notify_hook import announce, notify, notify_env, subagent_event
from playwright.sync_api import Page, expect

ANNOUNCE = "**Status**: success\n\n**Result**: three sources agree\n\nruntime 5m12s"


def test_a_card_follows_its_sub_agent_and_its_log_button_asks_for_the_log(
    start_webui: Callable[..., WebUI], tmp_path: Path
) -> None:
    webui = start_webui(
        [
            {"when": "research", "turns": [[{"text": "I started a sub-agent."}]]},
            {"when": "/subagents log", "turns": [[{"text": "(the log)"}]]},
        ],
        **notify_env(),
    )
    page = webui.login()
    session = new_conversation(page)
    channel = f"WEBUI-{session}"
    box = page.get_by_label("Message", exact=True)
    box.fill("research the sources")
    box.press("Enter")
    expect(page.locator(".message--assistant .bubble").last).to_have_text("I started a sub-agent.")
    wait_idle(page)

    notify(webui.server, channel, subagent_event("spawned", "queued"))
    card = page.locator(".subagent")
    expect(card).to_have_count(1)
    expect(card).to_have_attribute("data-status", "queued")
    expect(card.locator(".subagent__title")).to_have_text("find sources")
    expect(card.locator(".subagent__agent")).to_have_text("agent main")
    expect(card.locator(".subagent__status")).to_have_text("Queued")

    # Started a minute ago (on the server's clock): the runtime counts from there.
    started = time.time() - 65
    notify(webui.server, channel, subagent_event("started", "running", startedAt=started))
    expect(card).to_have_count(1)  # the same card, updated in place
    expect(card).to_have_attribute("data-status", "running")
    expect(card.locator(".subagent__status")).to_have_text("Running")
    expect(card.locator(".subagent__runtime")).to_have_text(re.compile(r"^1m\d\ds$"))
    expect(card).to_have_attribute("data-ticking", "true")
    screenshot(page, "subagent-running", tmp_path)

    times = {"startedAt": started, "endedAt": started + 312, "runtimeSeconds": 312}
    notify(webui.server, channel, subagent_event("finished", "success", **times))
    expect(card).to_have_attribute("data-status", "success")
    expect(card.locator(".subagent__status")).to_have_text("Succeeded")
    expect(card.locator(".subagent__runtime")).to_have_text("5m12s")
    expect(card).to_have_attribute("data-ticking", "false")

    # The announce: logged by the engine, shown once by the transport, named for the agent.
    announce(webui.server, channel, ANNOUNCE, key="announce-run-1")
    shown = page.locator('[data-post-id="logged-announce-run-1"]')
    expect(shown.locator(".bubble")).to_contain_text("Result: three sources agree")
    expect(shown.locator(".message__who")).to_have_text("Sub-agent main")
    expect(shown.locator(".message__note")).to_have_count(0)  # no "ended with an error"

    # Log asks through the composer's own path: the socket, echoed as the person's message.
    card.get_by_role("button", name="Read the log of find sources").click()
    expect(page.locator(".message--user .bubble").last).to_have_text("/subagents log 1")
    wait_idle(page)

    notify(webui.server, channel, subagent_event("archived", "success", **times))
    expect(card).to_have_attribute("data-archived", "true")
    expect(card.locator(".subagent__archived")).to_be_visible()

    # A second sub-agent, unlabelled, in a state this page does not know.
    notify(
        webui.server,
        channel,
        subagent_event("paused", "paused", runId="run-2", index=2, label="", agentId="ops"),
    )
    other = page.locator('.subagent[data-run-id="run-2"]')
    expect(other.locator(".subagent__title")).to_have_text("sub-agent #2")
    expect(other.locator(".subagent__status")).to_have_text("paused")
    expect(other).to_have_attribute("data-status", "other")
    screenshot(page, "subagent-cards", tmp_path)

    # A reload draws the same cards and the announce, once, from the history.
    page.reload()
    wait_connected(page)
    expect(page.locator(".subagent")).to_have_count(2)
    again = page.locator('.subagent[data-run-id="run-1"]')
    expect(again).to_have_attribute("data-status", "success")
    expect(again).to_have_attribute("data-archived", "true")
    expect(again.locator(".subagent__runtime")).to_have_text("5m12s")
    expect(page.locator('[data-post-id="logged-announce-run-1"]')).to_have_count(1)
    expect(page.locator('[data-post-id="logged-announce-run-1"] .message__who')).to_have_text(
        "Sub-agent main"
    )
    expect(page.locator(".message__note")).to_have_count(0)
    assert problems(page) == []


def order(page: Page) -> list[str]:
    """The conversation's items, top to bottom: user, assistant or subagent."""
    found: list[str] = page.evaluate(
        """() => Array.from(document.querySelectorAll('#messages > li:not([hidden])'))
             .map(li => li.classList.contains('subagent') ? 'subagent'
               : li.classList.contains('message--user') ? 'user' : 'assistant')"""
    )
    return found


def test_a_card_spawned_during_a_run_follows_that_runs_turn_live_and_after_a_reload(
    start_webui: Callable[..., WebUI],
) -> None:
    webui = start_webui(
        [{"when": "spawn slowly", "turns": [[{"text": "Spawning."}, {"sleep": 60}]]}],
        **notify_env(),
    )
    page = webui.login()
    session = new_conversation(page)
    box = page.get_by_label("Message", exact=True)
    box.fill("spawn slowly")
    box.press("Enter")
    expect(page.locator(".message--assistant .bubble").last).to_have_text("Spawning.")
    expect(page.locator("#stop")).to_be_enabled()  # the run goes on

    notify(webui.server, f"WEBUI-{session}", subagent_event("spawned", "queued"))
    expect(page.locator(".subagent")).to_have_count(1)
    assert order(page) == ["user", "assistant", "subagent"]
    page.locator("#stop").click()
    wait_idle(page)
    expect(page.locator(".message__note--stopped")).to_have_count(1)
    assert order(page) == ["user", "assistant", "subagent"]

    page.reload()
    wait_connected(page)
    expect(page.locator(".subagent")).to_have_count(1)
    expect(page.locator(".message__note--stopped")).to_have_count(1)
    assert order(page) == ["user", "assistant", "subagent"]
    assert problems(page) == []
