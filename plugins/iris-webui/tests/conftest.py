"""Fixtures for the Web UI tests: the Playwright ones live in ``browser``."""

from __future__ import annotations

from browser import (  # noqa: F401 (fixtures, found by pytest through this module)
    chat,
    chromium,
    playwright_driver,
    shared_page,
    shared_webui,
    start_webui,
)
from server_harness import (  # noqa: F401 (fixtures of the server tests)
    start_web_iris,
)
