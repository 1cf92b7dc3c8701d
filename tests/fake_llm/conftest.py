"""Fixtures for the fake-server tests: real SDK clients pointed at the shipped fakes, and a check
that no fake leaves a thread behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import anthropic
import openai
import pytest

from iris_runtime.testing.fake_llm import (
    FAKE_API_KEY,
    FakeAnthropic,
    FakeOpenAI,
)

KEY = FAKE_API_KEY
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    leaked = [
        t.name
        for t in threading.enumerate()
        if t not in before and t.name.startswith(("FakeAnthropic", "FakeOpenAI"))
    ]
    assert not leaked


@pytest.fixture
def claude(fake_anthropic: FakeAnthropic) -> Iterator[anthropic.Anthropic]:
    client = anthropic.Anthropic(api_key=KEY, base_url=fake_anthropic.base_url, max_retries=0)
    yield client
    client.close()


@pytest.fixture
def gpt(fake_openai: FakeOpenAI) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(api_key=KEY, base_url=fake_openai.base_url, max_retries=0)
    yield client
    client.close()
