"""The model picker: an ACP agent that offers ``models`` gets a Model control next to the agent
picker, and choosing there is ``@kind /model ID`` (the next turn runs on it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from browser import WebUI, last_reply, new_conversation, problems, send, wait_connected, wait_idle
from playwright.sync_api import expect

from iris_runtime.testing import acp_agent


def test_the_model_picker_chooses_an_acp_agents_model(
    start_webui: Callable[..., WebUI], tmp_path: Path, socket_dir: Path
) -> None:
    acp_agent.install(
        tmp_path / "webui0" / "data" / "agents.d",
        tmp_path / "coder.jsonl",
        "coder",
        models=[{"id": "fast", "label": "Fast"}, {"id": "deep", "label": "Deep"}],
        modelEnv="TEST_AGENT_MODEL",
    )
    webui = start_webui(None, IRIS_REACH_SOCKET=str(socket_dir / "reach.sock"))
    page = webui.login()
    new_conversation(page)
    model = page.locator("#agent-model")
    expect(model).to_be_hidden()  # Iris itself offers no choice here

    page.get_by_label("Agent").select_option("coder")
    wait_connected(page)
    expect(model).to_be_visible()
    expect(model).to_be_enabled()
    expect(model).to_have_value("default")
    model.select_option("deep")
    expect(model).to_have_attribute("title", "Coder uses Deep from the next message.")

    send(page, "env")
    wait_idle(page)
    expect(last_reply(page)).to_contain_text("model=deep")

    page.reload()
    wait_connected(page)
    expect(page.locator("#agent-model")).to_have_value("deep")  # the conversation's choice
    assert problems(page) == []
    assert webui.provider_calls() == []  # Iris's model was never asked
