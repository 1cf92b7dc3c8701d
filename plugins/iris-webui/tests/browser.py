"""Playwright fixtures for the Web UI tests: Debian's Chromium against a real ``iris serve``.

Chromium is the system one (``/usr/bin/chromium``, apt package ``chromium``): the suite never
runs ``playwright install`` and never downloads a browser. A missing Chromium fails the tests
rather than skipping them: a skipped browser suite looks green while testing nothing.

``start_webui(rules, **env)`` starts an Iris with the Web UI on its own port and the scripted
provider, and reads the one-time login link ``iris serve`` prints on stderr. ``WebUI.login()``
follows that link in a fresh browser context, so the page holds a real session cookie.
Screenshots go to ``$IRIS_WEBUI_SCREENSHOTS`` when set (``docs/images`` refreshes the README's
pictures), else to the test's temporary folder.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Dialog,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from iris_runtime.testing.server import IrisServer, free_port

CHROMIUM = os.environ.get("IRIS_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
LOGIN_LINK = re.compile(r"Web UI: (http://\S+/login\?key=\S+)")
# Generous for slow CI machines; these are deadlines for something to appear, not timings.
EXPECT_TIMEOUT_MS = 20_000
DESKTOP = {"width": 1280, "height": 800}
MOBILE = {"width": 390, "height": 780}

expect.set_options(timeout=EXPECT_TIMEOUT_MS)


@dataclass
class WebUI:
    """A served Iris with the Web UI: its server, its UI URL and the login link it printed."""

    server: IrisServer
    port: int
    script: Path
    calls: Path
    browser: Browser
    login_link: str = ""
    contexts: list[BrowserContext] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rules(self, rules: list[dict[str, Any]]) -> None:
        """Rewrite the scripted provider's rules (re-read on every model call)."""
        self.script.write_text(json.dumps({"rules": rules}))

    def add_rules(self, *rules: dict[str, Any]) -> None:
        current = json.loads(self.script.read_text())["rules"]
        self.rules([*rules, *current])

    def provider_calls(self) -> list[dict[str, Any]]:
        if not self.calls.exists():
            return []
        return [json.loads(line) for line in self.calls.read_text().splitlines() if line]

    def context(self, viewport: dict[str, int] | None = None) -> BrowserContext:
        context = self.browser.new_context(viewport=viewport or DESKTOP)  # type: ignore[arg-type]
        context.set_default_timeout(EXPECT_TIMEOUT_MS)
        self.contexts.append(context)
        return context

    def login(self, viewport: dict[str, int] | None = None) -> Page:
        """Follow the one-time link in a fresh context; returns the chat page, signed in."""
        assert self.login_link, "the login link was already used"
        page = self.context(viewport).new_page()
        watch(page)
        page.goto(self.login_link)
        self.login_link = ""  # single use
        expect(page).to_have_url(re.compile(re.escape(self.url) + r"/(#.*)?$"))
        wait_connected(page)
        return page

    def close(self) -> None:
        for context in self.contexts:
            context.close()


def watch(page: Page) -> list[str]:
    """Record every JavaScript dialog (none may ever open: a dialog means injected script ran)
    and every page error; tests assert both lists stay empty."""
    seen: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        seen.append("dialog: " + dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.on("pageerror", lambda error: seen.append(f"page error: {error}"))
    page.problems = seen  # type: ignore[attr-defined]
    return seen


def problems(page: Page) -> list[str]:
    found: list[str] = page.problems  # type: ignore[attr-defined]
    return found


def page_key(page: Page) -> str:
    """The page key the chat page keeps in its origin's storage after signing in."""
    key = page.evaluate("localStorage.getItem('iris.pageKey')")
    assert isinstance(key, str) and key, "the page holds no page key"
    return key


def wait_connected(page: Page) -> None:
    """The conversation's socket said ``ready``."""
    expect(page.locator("#connection")).to_have_attribute("data-state", re.compile("open|agent"))


def session_id(page: Page) -> str:
    match = re.search(r"[#&]s=([A-Za-z0-9_-]+)", page.url)
    assert match, page.url
    return match.group(1)


def new_conversation(page: Page) -> str:
    """Start a fresh conversation with the sidebar button; returns its id."""
    before = page.url
    page.get_by_role("button", name="New conversation").click()
    expect(page).not_to_have_url(before)
    wait_connected(page)
    return session_id(page)


def send(page: Page, text: str) -> None:
    box = page.get_by_label("Message", exact=True)
    box.fill(text)
    expect(page.locator("#send")).to_be_enabled()
    box.press("Enter")
    expect(page.locator(".message--user .bubble").last).to_have_text(text)


def last_reply(page: Page) -> Any:
    return page.locator(".message--assistant").last


def wait_idle(page: Page) -> None:
    """The run ended: the Stop button is off and the status line is gone."""
    expect(page.locator("#stop")).to_be_disabled()
    expect(page.locator("#run-status")).to_have_attribute("data-active", "false")


def screenshot(page: Page, name: str, folder: Path) -> Path:
    target = Path(os.environ.get("IRIS_WEBUI_SCREENSHOTS") or folder)
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"webui-{name}.png"
    page.screenshot(path=str(path), animations="disabled")  # transitions done, not mid-way
    return path


def read_login_link(server: IrisServer, timeout: float = 20.0) -> str:
    """The one-time link from ``iris serve``'s output (stdout and stderr go to its log file)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.log_path is not None
        match = LOGIN_LINK.search(server.log_path.read_text(errors="replace"))
        if match:
            return match.group(1)
        time.sleep(0.05)
    raise AssertionError(f"no login link printed:\n{server.log_tail()}")


@pytest.fixture(scope="session")
def playwright_driver() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def chromium(playwright_driver: Playwright) -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium", pytrace=False)
    browser = playwright_driver.chromium.launch(
        executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
    )
    yield browser
    browser.close()


def _start(root: Path, browser: Browser, rules: list[dict[str, Any]] | None, **env: str) -> WebUI:
    root.mkdir(parents=True, exist_ok=True)
    script = root / "script.json"
    script.write_text(json.dumps({"rules": rules or []}))
    calls = root / "provider-calls.jsonl"
    port = free_port()
    server = IrisServer(
        root / "data",
        env={
            "IRIS_WEBUI_PORT": str(port),
            "IRIS_PROVIDER": "scripted",
            "IRIS_SCRIPT_FILE": str(script),
            "IRIS_SCRIPT_CALLS_FILE": str(calls),
            **env,
        },
    )
    server.start()
    try:
        link = read_login_link(server)
    except AssertionError:
        server.stop()
        raise
    return WebUI(server, port, script, calls, browser, link)


@pytest.fixture
def start_webui(tmp_path: Path, chromium: Browser) -> Iterator[Callable[..., WebUI]]:
    """``start(rules=None, **env)``: a served Iris with the Web UI (stopped at teardown)."""
    started: list[WebUI] = []

    def start(rules: list[dict[str, Any]] | None = None, **env: str) -> WebUI:
        started.append(_start(tmp_path / f"webui{len(started)}", chromium, rules, **env))
        return started[-1]

    yield start
    for webui in started:
        webui.close()
        webui.server.stop()


@pytest.fixture(scope="module")
def shared_webui(tmp_path_factory: pytest.TempPathFactory, chromium: Browser) -> Iterator[WebUI]:
    """One served Iris for a module whose tests each use a conversation of their own. Uploads
    are capped at 4 KiB so the refusal is cheap to provoke."""
    webui = _start(
        tmp_path_factory.mktemp("webui"), chromium, None, IRIS_WEBUI_MAX_UPLOAD_BYTES="4096"
    )
    yield webui
    webui.close()
    webui.server.stop()


@pytest.fixture(scope="module")
def shared_page(shared_webui: WebUI) -> Page:
    """The signed-in chat page of ``shared_webui`` (the login link works once)."""
    return shared_webui.login()


@pytest.fixture
def chat(shared_webui: WebUI, shared_page: Page) -> Page:
    """A page in a fresh conversation of its own, signed in (same browser context, new tab)."""
    page = shared_page.context.new_page()
    watch(page)
    page.goto(shared_webui.url + "/")
    wait_connected(page)
    new_conversation(page)
    return page
