"""Signing in: the one-time link ``iris serve`` prints (or the password), and nothing without."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from browser import WebUI, last_reply, screenshot, send, wait_connected, wait_idle, watch
from playwright.sync_api import expect


def test_the_login_link_signs_in_once(start_webui: Callable[..., WebUI], tmp_path: Path) -> None:
    webui = start_webui(IRIS_WEBUI_PASSWORD="correct horse battery")  # noqa: S106 (a test one)
    link = webui.login_link
    assert link.startswith(webui.url + "/login?key=")

    # Not signed in: the chat page sends us to the login page.
    stranger = webui.context().new_page()
    watch(stranger)
    stranger.goto(webui.url + "/")
    expect(stranger).to_have_url(re.compile(r"/login"))
    expect(stranger.get_by_role("heading", name="Sign in to Iris")).to_be_visible()
    password = stranger.get_by_label("Password")
    expect(password).to_be_visible()  # the server has a password: the form is offered
    screenshot(stranger, "login", tmp_path)

    # A wrong password: back on the login page, told so.
    password.fill("wrong guess")
    password.press("Enter")
    expect(stranger.locator("#login-error")).to_have_text("Wrong password.")

    # The link signs in and lands on the chat page, connected.
    page = webui.login()
    wait_connected(page)
    expect(page.get_by_role("button", name="New conversation")).to_be_visible()
    expect(page.get_by_label("Agent")).to_have_value("")

    # Used once, the same link signs nobody else in.
    stranger.goto(link)
    expect(stranger).to_have_url(re.compile(r"/login"))
    expect(stranger.locator("#login-error")).to_be_visible()
    stranger.goto(webui.url + "/")
    expect(stranger).to_have_url(re.compile(r"/login"))
    assert stranger.problems == []  # type: ignore[attr-defined]
    assert page.problems == []  # type: ignore[attr-defined]


def test_a_lost_connection_shows_and_reconnects_by_itself(
    start_webui: Callable[..., WebUI],
) -> None:
    webui = start_webui([{"when": "again", "turns": [[{"text": "back again"}]]}])
    page = webui.login()
    banner = page.locator("#banner")
    expect(banner).to_be_hidden()
    webui.server.stop()
    expect(banner).to_contain_text("Connection to Iris lost")
    expect(page.locator("#connection")).to_have_attribute("data-state", "closed")
    expect(page.locator("#send")).to_be_disabled()
    # The sign-in survives the restart (sessions are kept on disk); the page retries with
    # backoff and carries on by itself.
    webui.server.start()
    wait_connected(page)
    expect(banner).to_be_hidden()
    send(page, "try again")
    expect(last_reply(page).locator(".bubble")).to_have_text("back again")
    wait_idle(page)
    assert page.problems == []  # type: ignore[attr-defined]
