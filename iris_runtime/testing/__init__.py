"""Test helpers shipped with Iris so plugin authors can use them too.

- :mod:`iris_runtime.testing.scripted`: a provider that plays back a JSON script (text, thinking,
  tool calls, pauses, errors) — the stand-in for an LLM API in tests.
- :mod:`iris_runtime.testing.server`: start a real ``iris serve`` (gunicorn) on a free loopback
  port and talk to it.
- :mod:`iris_runtime.testing.fake_llm`: wire-level fakes of the Anthropic Messages and OpenAI
  Chat Completions APIs on loopback, scripted per test, for the real SDKs to talk to.
- :mod:`iris_runtime.testing.fixtures`: pytest fixtures over those (loaded automatically through
  the ``pytest11`` entry point).
"""
