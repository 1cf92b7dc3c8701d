"""Fixtures for the Slack plugin's tests (helpers in ``slack_testkit``): each module's folder and
its fake Slack. A module whose fake needs channels, users or faults defines its own ``fake``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from slack_testkit import slack_fake, stopped_clean

from iris_runtime.testing.fake_slack import FakeSlack


@pytest.fixture(scope="module")
def base(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's folder (its Iris's data and script), named for the module."""
    return tmp_path_factory.mktemp(request.module.__name__.removeprefix("test_").replace("_", "-"))


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeSlack]:
    yield from stopped_clean(slack_fake())
