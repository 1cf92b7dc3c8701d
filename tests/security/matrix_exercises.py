"""How each row of the token matrix is exercised: a request the route accepts, aimed at a
target of the cell's own (a session, a channel, a secret name, an event), so that a refused
request can be shown to have changed nothing and an allowed one to have done its work (which
proves the check can see a change)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.security.matrix_requests import Call
from tests.security.matrix_served import A_SECRET, NOBODYS, Served

FAR_FUTURE = "2099-01-01T00:00:00+00:00"  # a one-shot event that never fires by itself


@dataclass(frozen=True)
class Exercise:
    """How to send a route a request it accepts (setting up the cell's own target first), and
    whether that cell's request did what the route does (None: nothing to see, e.g. a read)."""

    call: Callable[[Served, str], Call]
    effect: Callable[[Served, str], bool] | None = None
    asynchronous: bool = False  # the work shows after the answer (a run, a fired event)


def log_entries(served: Served, channel: str) -> list[dict[str, Any]]:
    path = served.data / channel / "log.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def has_log(channel: Callable[[str], str]) -> Callable[[Served, str], bool]:
    return lambda served, caller: (served.data / channel(caller) / "log.jsonl").exists()


def secret_status(served: Served, name: str) -> int:
    return served.as_iris("GET", f"/secrets/{name}").status_code


def event_file(served: Served, name: str) -> Path:
    return served.data / "events" / f"{name}.json"


def add_event(served: Served, name: str, channel: str) -> None:
    body = {"name": name, "type": "one-shot", "channelId": channel, "text": "matrix"}
    added = served.as_iris("POST", "/events", json={**body, "at": FAR_FUTURE})
    assert added.status_code == 201, added.text


def web_sessions(served: Served) -> set[str]:
    return {p.name for p in served.data.glob("WEBUI-*")}


# Setting up a cell's target, before its request.


def reset_call(served: Served, caller: str) -> Call:
    turn = served.as_iris("POST", f"/sessions/reset-{caller}/inject-turn", json={"user": "hi"})
    assert turn.status_code == 200, turn.text
    return Call("POST", f"/sessions/reset-{caller}/reset", json={})


def put_secret_call(served: Served, caller: str) -> Call:
    return Call("PUT", f"/secrets/PUT_{caller}", json={"value": "v"})


def delete_secret_call(served: Served, caller: str) -> Call:
    stored = served.as_iris("PUT", f"/secrets/DEL_{caller}", json={"value": "v"})
    assert stored.status_code == 200, stored.text
    return Call("DELETE", f"/secrets/DEL_{caller}")


def add_event_call(served: Served, caller: str) -> Call:
    body = {"name": f"add-{caller}", "type": "one-shot", "channelId": f"evt-{caller}"}
    return Call("POST", "/events", json={**body, "text": "matrix", "at": FAR_FUTURE})


def delete_event_call(served: Served, caller: str) -> Call:
    add_event(served, f"del-{caller}", f"evt-{caller}")
    return Call("DELETE", f"/events/del-{caller}")


def fire_event_call(served: Served, caller: str) -> Call:
    add_event(served, f"fire-{caller}", f"fire-{caller}")
    return Call("POST", f"/events/fire-{caller}/fire", json={})


def fired(served: Served, caller: str) -> bool:
    """An immediate copy was written, or already ran on the event's channel."""
    copies = list((served.data / "events").glob(f"fire-{caller}.fired-*"))
    return bool(copies) or (served.data / f"fire-{caller}").exists()


def new_web_session_call(served: Served, caller: str) -> Call:
    served.baselines[f"sessions-{caller}"] = web_sessions(served)
    return Call("POST", "/api/sessions", json={})


def upload_call(served: Served, caller: str) -> Call:
    files = {"file": (f"up-{caller}.txt", b"matrix", "text/plain")}
    return Call("POST", f"/api/sessions/{served.web_session}/uploads", files=files)


def uploaded(served: Served, caller: str) -> bool:
    folder = served.data / f"WEBUI-{served.web_session}" / "attachments"
    return bool(list(folder.glob(f"*_up-{caller}.txt")))


def choose_model_call(served: Served, caller: str) -> Call:
    made = served.as_page("POST", "/api/sessions", json={})
    assert made.status_code == 201, made.text
    session = served.baselines[f"model-{caller}"] = made.json()["id"]
    return Call("POST", f"/api/sessions/{session}/agents/coder/model", json={"model": "deep"})


def model_chosen(served: Served, caller: str) -> bool:
    session = served.baselines[f"model-{caller}"]
    choice = served.as_page("GET", f"/api/sessions/{session}/agents/coder/model")
    assert choice.status_code == 200, choice.text
    return bool(choice.json()["model"] == "deep")


def fixed(method: str, path: str, **kwargs: Any) -> Callable[[Served, str], Call]:
    return lambda served, caller: Call(method, path, **kwargs)


def bridge_body(prefix: str) -> Callable[[Served, str], Call]:
    return lambda served, caller: Call(
        "POST", "/bridge", json={"text": "hello", "requestId": f"{prefix}-{caller}"}
    )


def web(path: str) -> Callable[[Served, str], Call]:
    """A GET of the Web UI on the page's own conversation (``{s}``) and file (``{f}``)."""
    return lambda served, caller: Call("GET", path.format(s=served.web_session, f=served.web_file))


EXERCISES: dict[str, Exercise] = {
    "api GET /health": Exercise(fixed("GET", "/health")),
    "api POST /sessions/{session_id}/message": Exercise(
        lambda s, c: Call("POST", f"/sessions/msg-{c}/message", json={"text": "hello"}),
        has_log(lambda c: f"SESSION-msg-{c}"),
    ),
    "api POST /sessions/{session_id}/attachments": Exercise(
        lambda s, c: Call(
            "POST", f"/sessions/att-{c}/attachments", data=b"bytes", headers={"X-Filename": "a"}
        ),
        lambda s, c: bool(list((s.data / f"SESSION-att-{c}" / "attachments").glob("*"))),
    ),
    # Nothing is running to stop: the decision is all there is to see.
    "api POST /sessions/{session_id}/stop": Exercise(
        lambda s, c: Call("POST", f"/sessions/stop-{c}/stop")
    ),
    "api GET /sessions/{session_id}/stream": Exercise(
        lambda s, c: Call("GET", f"/sessions/stream-{c}/stream", stream=True)
    ),
    "api GET /sessions/{session_id}/history": Exercise(fixed("GET", "/sessions/hist/history")),
    "api GET /sessions/{session_id}/subagents": Exercise(fixed("GET", "/sessions/hist/subagents")),
    "api POST /sessions/{session_id}/reset": Exercise(
        reset_call,
        lambda s, c: any(e.get("type") == "reset" for e in log_entries(s, f"SESSION-reset-{c}")),
    ),
    "api POST /sessions/{session_id}/inject-turn": Exercise(
        lambda s, c: Call("POST", f"/sessions/inject-{c}/inject-turn", json={"user": "hi"}),
        has_log(lambda c: f"SESSION-inject-{c}"),
    ),
    "api GET /channels": Exercise(fixed("GET", "/channels")),
    "api POST /channels/{channel_id}/events": Exercise(
        lambda s, c: Call("POST", f"/channels/chev-{c}/events", json={"text": "hello"}),
        has_log(lambda c: f"chev-{c}"),
        asynchronous=True,
    ),
    "api POST /escalate": Exercise(
        lambda s, c: Call("POST", "/escalate", json={"text": "help", "channel": f"esc-{c}"}),
        has_log(lambda c: f"esc-{c}"),
    ),
    "api GET /secrets": Exercise(fixed("GET", "/secrets")),
    "api GET /secrets/{name} (on A's allow-list)": Exercise(fixed("GET", f"/secrets/{A_SECRET}")),
    "api GET /secrets/{name} (on no allow-list)": Exercise(fixed("GET", f"/secrets/{NOBODYS}")),
    "api PUT /secrets/{name}": Exercise(
        put_secret_call, lambda s, c: secret_status(s, f"PUT_{c}") == 200
    ),
    "api DELETE /secrets/{name}": Exercise(
        delete_secret_call, lambda s, c: secret_status(s, f"DEL_{c}") == 404
    ),
    "api GET /events": Exercise(fixed("GET", "/events")),
    "api POST /events": Exercise(add_event_call, lambda s, c: event_file(s, f"add-{c}").exists()),
    "api DELETE /events/{name}": Exercise(
        delete_event_call, lambda s, c: not event_file(s, f"del-{c}").exists()
    ),
    "api POST /events/{name}/fire": Exercise(fire_event_call, fired, asynchronous=True),
    "api GET /custom-agents": Exercise(fixed("GET", "/custom-agents")),
    # A restart re-reads an unchanged file: nothing to see but the decision.
    "api POST /custom-agents/{kind}/restart": Exercise(
        fixed("POST", "/custom-agents/butler/restart", json={})
    ),
    "bridge POST /bridge": Exercise(
        bridge_body("bridge"),
        lambda s, c: (s.agent.server.data_dir / "bridge-jobs" / f"bridge-{c}.jsonl").exists(),
    ),
    "bridge GET /bridge/jobs/{request_id}": Exercise(
        lambda s, c: Call("GET", f"/bridge/jobs/{s.job_id}")
    ),
    "bridge GET /bridge/jobs/{request_id} (no such job)": Exercise(
        fixed("GET", "/bridge/jobs/no-such-job")
    ),
    "webui GET /": Exercise(fixed("GET", "/")),
    "webui GET /api/sessions": Exercise(fixed("GET", "/api/sessions")),
    "webui POST /api/sessions": Exercise(
        new_web_session_call, lambda s, c: web_sessions(s) != s.baselines[f"sessions-{c}"]
    ),
    "webui GET /api/sessions/{session}/history": Exercise(web("/api/sessions/{s}/history")),
    "webui GET /api/agents": Exercise(fixed("GET", "/api/agents")),
    "webui POST /api/sessions/{session}/uploads": Exercise(upload_call, uploaded),
    "webui GET /api/sessions/{session}/files/{relative}": Exercise(
        web("/api/sessions/{s}/files/{f}")
    ),
    "webui GET /api/sessions/{session}/agents/{kind}/model": Exercise(
        web("/api/sessions/{s}/agents/coder/model")
    ),
    "webui POST /api/sessions/{session}/agents/{kind}/model": Exercise(
        choose_model_call, model_chosen
    ),
    "webui GET /ws": Exercise(web("/ws?session={s}")),
    "bridge GET /health": Exercise(fixed("GET", "/health")),
    "bridge GET /secrets/{name} (on A's allow-list)": Exercise(
        fixed("GET", f"/secrets/{A_SECRET}")
    ),
    "api POST /bridge": Exercise(
        bridge_body("cross"),
        lambda s, c: (s.agent.server.data_dir / "bridge-jobs" / f"cross-{c}.jsonl").exists(),
    ),
    "api GET /api/sessions": Exercise(fixed("GET", "/api/sessions")),
    "webui GET /secrets/{name} (on A's allow-list)": Exercise(fixed("GET", f"/secrets/{A_SECRET}")),
}
