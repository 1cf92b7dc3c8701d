"""Wire-level fakes of the Anthropic Messages API and the OpenAI Chat Completions API.

Each fake is a real HTTP server on a free 127.0.0.1 port that speaks what the real API speaks
(status codes, JSON error bodies, SSE event shapes, ``retry-after`` headers), so a test can point
the *real* ``anthropic`` / ``openai`` SDK at it through ``base_url`` and exercise streaming, tool
calls, usage accounting, retries, authentication failures, mid-stream errors, dropped connections
and stalls. What each reply contains is scripted with the types of
:mod:`iris_runtime.testing.fake_llm.script`::

    from iris_runtime.testing.fake_llm import FakeAnthropic, Fail, Reply, Text, ToolCall

    with FakeAnthropic(api_key="k") as fake:
        fake.enqueue(
            Fail(529, "overloaded_error", "Overloaded", retry_after=1),
            Reply([Text("Let me look."), ToolCall("ls", {"path": "."})]),
        )
        client = anthropic.Anthropic(api_key="k", base_url=fake.base_url)
        ...
        assert len(fake.requests) == 2

Neither SDK is a dependency of the fakes: they only use the standard library.
"""

from iris_runtime.testing.fake_llm.anthropic import FakeAnthropic
from iris_runtime.testing.fake_llm.openai import FakeOpenAI
from iris_runtime.testing.fake_llm.script import (
    Disconnect,
    Fail,
    MidStreamError,
    Reply,
    Stall,
    Step,
    Text,
    Thinking,
    ToolCall,
    Usage,
)
from iris_runtime.testing.fake_llm.server import FAKE_API_KEY, FakeLLMServer

__all__ = [
    "FAKE_API_KEY",
    "Disconnect",
    "Fail",
    "FakeAnthropic",
    "FakeLLMServer",
    "FakeOpenAI",
    "MidStreamError",
    "Reply",
    "Stall",
    "Step",
    "Text",
    "Thinking",
    "ToolCall",
    "Usage",
]
