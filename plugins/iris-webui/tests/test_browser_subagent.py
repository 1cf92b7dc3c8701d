"""``?agent=``: the picker routes a conversation to a real sub-agent runtime, live."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from browser import (
    WebUI,
    last_reply,
    new_conversation,
    problems,
    screenshot,
    send,
    wait_connected,
    wait_idle,
)
from playwright.sync_api import expect

from iris_runtime.testing.subagent import SubAgent, register


def test_the_picker_routes_to_a_sub_agent_and_shows_its_errors(
    start_webui: Callable[..., WebUI], start_subagent: Callable[..., SubAgent], tmp_path: Path
) -> None:
    helper = start_subagent(
        "researcher",
        [
            {
                "when": "findings",
                "turns": [
                    [
                        {
                            "tool": "bash",
                            "id": "call-sub",
                            "args": {"command": "echo 3 sources"},
                        }
                    ],
                    [{"text": "Three sources agree: **yes**.\n\n- one\n- two\n- three"}],
                ],
            }
        ],
    )
    webui = start_webui([{"when": "findings", "turns": [[{"text": "Iris answered instead"}]]}])
    register(webui.server, helper.name, helper.bridge_url, token=helper.token)
    page = webui.login()
    new_conversation(page)

    picker = page.get_by_label("Agent")
    expect(picker.locator("option[value='researcher']")).to_have_count(1)
    picker.select_option("researcher")
    expect(page).to_have_url(re.compile(r"[#&]agent=researcher"))
    wait_connected(page)
    expect(page.locator("#connection")).to_contain_text("researcher")
    expect(page.get_by_label("Message", exact=True)).to_have_attribute(
        "placeholder", "Message researcher…"
    )

    send(page, "what are the findings?")
    expect(last_reply(page).locator(".bubble")).to_contain_text("Three sources agree: yes.")
    wait_idle(page)
    # Deterministic routing: Iris's own model was never asked.
    assert webui.provider_calls() == []
    screenshot(page, "subagent", tmp_path)

    # A reload keeps both the conversation and the chosen agent.
    page.reload()
    wait_connected(page)
    expect(picker).to_have_value("researcher")
    expect(last_reply(page).locator(".bubble")).to_contain_text("Three sources agree")

    # The sub-agent dies: the bridge's explicit error shows, not an endless spinner.
    helper.server.stop()
    send(page, "any more findings?")
    error = last_reply(page).locator(".notice--error")
    expect(error).to_contain_text("researcher is unreachable")  # the bridge's own words
    wait_idle(page)
    screenshot(page, "subagent-unreachable", tmp_path)
    assert problems(page) == []
