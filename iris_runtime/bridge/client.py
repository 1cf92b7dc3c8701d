"""Calling a sub-agent: ``call_agent_bridge`` streams a request and never drops its reply.

It asks for the NDJSON stream but branches on what actually comes back (an older sub-agent
answers one JSON body). When the stream breaks it polls the agent's job log from the last event
it saw, until the reply arrives, no new event arrives for the idle timeout, or the overall
deadline passes. A disconnect is not a failure; silence is.

Every request carries the call's token as ``Authorization: Bearer``; an agent from before bridge
authentication ignores the header. Because of that token, an agent on another host is called over
TLS, its certificate verified (``cacert``, else the system's CAs); plain HTTP goes only to
loopback unless the call is explicitly ``insecure`` (see :mod:`iris_runtime.tls`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from iris_runtime.bridge.protocol import NDJSON, bearer_header
from iris_runtime.errors import IrisError
from iris_runtime.tls import cacert_problem, plain_http_refusal, verify_setting

if TYPE_CHECKING:
    # Imported where a call is made: a serving agent that never delegates does not load it.
    import requests

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0
POLL_INTERVAL = 0.5
MAX_POLL_INTERVAL = 5.0
# Bounds on an agent's Retry-After: not a busy loop, and a look again at least this often.
MIN_CAPACITY_WAIT = 0.5
MAX_CAPACITY_WAIT = 30.0


class BridgeError(IrisError):
    """The agent answered with an error, or could not be reached in time."""

    code = "bridge_error"
    status = 502

    def __init__(self, message: str, *, code: str | None = None, request_id: str = "") -> None:
        super().__init__(message, code=code)
        self.request_id = request_id


@dataclass(frozen=True)
class BridgeReply:
    text: str
    request_id: str
    status: str  # done | stopped | failed (as the agent reported it) | aborted (we stopped)
    usage: dict[str, Any] = field(default_factory=dict)  # the agent's own usage, if it sent it
    silent: bool = False  # the agent chose to say nothing ([SILENT]); text is then empty


@dataclass(frozen=True)
class BridgeCall:
    """One call's parameters; ``on_status`` receives progress lines."""

    bridge_url: str
    text: str
    conversation_key: str | None = None
    request_id: str | None = None
    origin: str | None = None
    idle_timeout: float = 300.0
    deadline: float = 4 * 3600.0
    on_status: Callable[[str], None] | None = None
    abort: threading.Event | None = None
    agent: str = "agent"
    token: str | None = field(default=None, repr=False)  # the agent's bridge token
    cacert: str | None = None  # CA bundle for an https bridge_url; None: the system's CAs
    insecure: bool = False  # allow plain HTTP to a host other than loopback


def _auth(call: BridgeCall) -> dict[str, str]:
    return bearer_header(call.token)


class _Progress:
    """The last event seen and when anything last arrived (silence is what times out)."""

    def __init__(self, call: BridgeCall, request_id: str) -> None:
        self.call = call
        self.request_id = request_id
        self.seq = 0
        self.last_event = time.monotonic()
        self.started = time.monotonic()

    def saw(self, event: dict[str, Any]) -> None:
        self.last_event = time.monotonic()
        self.seq = max(self.seq, int(event.get("seq") or 0))
        if event.get("type") == "status" and self.call.on_status is not None:
            self.call.on_status(str(event.get("text", "")))

    def alive(self) -> None:
        self.last_event = time.monotonic()

    def past_deadline(self) -> bool:
        return time.monotonic() - self.started > self.call.deadline

    def expired(self) -> str | None:
        now = time.monotonic()
        if now - self.started > self.call.deadline:
            return f"the overall deadline of {self.call.deadline:.0f}s passed"
        if now - self.last_event > self.call.idle_timeout:
            return f"no progress for {self.call.idle_timeout:.0f}s"
        return None

    def aborted(self) -> bool:
        return self.call.abort is not None and self.call.abort.is_set()


def _terminal(event: dict[str, Any], request_id: str, call: BridgeCall) -> BridgeReply:
    if event["type"] == "error":
        raise BridgeError(
            f"{call.agent} failed request {request_id}: {event.get('error', 'unknown error')}",
            code=str(event.get("code") or "bridge_error"),
            request_id=request_id,
        )
    usage = event.get("usage")
    return BridgeReply(
        str(event.get("text", "")),
        request_id,
        str(event.get("status") or "done"),
        usage if isinstance(usage, dict) else {},
        silent=event.get("silent") is True,
    )


def _lines(response: requests.Response, progress: _Progress) -> Iterator[dict[str, Any]]:
    """Parsed lines of a live stream. Heartbeats count as life here (a long tool call may
    report nothing for a while); only the overall deadline ends a stream that keeps beating."""
    for raw in response.iter_lines(chunk_size=65536):
        if progress.aborted():
            return
        progress.alive()
        if progress.past_deadline():
            call, request_id = progress.call, progress.request_id
            raise BridgeError(
                f"gave up waiting for {call.agent} (request {request_id}): the overall deadline "
                f"of {call.deadline:.0f}s passed. The reply may still arrive in the agent's job "
                f"log: `iris bridge recover {call.agent} {request_id}`",
                code="bridge_timeout",
                request_id=request_id,
            )
        if not raw:
            continue
        try:
            event = json.loads(raw)
        except ValueError:
            log.warning("ignoring a malformed bridge line from %s", progress.call.agent)
            continue
        if isinstance(event, dict):
            yield event


def _read_stream(
    response: requests.Response, request_id: str, progress: _Progress
) -> BridgeReply | None:
    """The reply, or None when the stream ended before its terminal line."""
    for event in _lines(response, progress):
        kind = event.get("type")
        if kind in {"status", "final", "error"}:
            progress.saw(event)
        if kind in {"final", "error"}:
            return _terminal(event, request_id, progress.call)
        # accepted, heartbeat and types from newer agents need nothing more
    return None


def _poll(session: requests.Session, request_id: str, progress: _Progress) -> BridgeReply:
    import requests

    call = progress.call
    url = f"{call.bridge_url.rstrip('/')}/bridge/jobs/{request_id}"
    interval = POLL_INTERVAL
    while not progress.aborted():
        try:
            response = session.get(
                url,
                params={"since": progress.seq},
                headers=_auth(call),
                timeout=(CONNECT_TIMEOUT, call.idle_timeout),
                verify=verify_setting(call.cacert),
            )
            if response.status_code == 200:
                body = response.json()
                for event in body.get("events", []):
                    progress.saw(event)
                    if event.get("type") in {"final", "error"}:
                        return _terminal(event, request_id, call)
                interval = (
                    POLL_INTERVAL if body.get("events") else min(interval * 1.5, MAX_POLL_INTERVAL)
                )
            elif response.status_code == 401:  # polling on cannot help: say so now
                raise BridgeError(
                    f"{call.agent} refused to show the job log of request {request_id} "
                    "(HTTP 401): the token Iris holds for it is no longer its API token (was it "
                    "restarted with a new one?). Fetch the reply with `iris bridge recover "
                    f"{call.agent} {request_id}` once agents.json has its current token.",
                    code="unauthorized",
                    request_id=request_id,
                )
            elif response.status_code != 404:  # 404: the job may not be logged yet
                log.warning(
                    "polling %s for %s: HTTP %s", call.agent, request_id, response.status_code
                )
        except (requests.RequestException, ValueError) as exc:
            log.info("polling %s for %s failed: %s", call.agent, request_id, exc)
        reason = progress.expired()
        if reason:
            raise BridgeError(
                f"gave up waiting for {call.agent} (request {request_id}): {reason}. The reply may "
                f"still arrive in the agent's job log: `iris bridge recover {call.agent} "
                f"{request_id}` or GET {url}",
                code="bridge_timeout",
                request_id=request_id,
            )
        (call.abort or threading.Event()).wait(interval)
    return BridgeReply("", request_id, "aborted")


def call_agent_bridge(call: BridgeCall, session: requests.Session | None = None) -> BridgeReply:
    import requests

    request_id = call.request_id or f"req-{uuid.uuid4().hex}"
    body = {"text": call.text, "requestId": request_id}
    if call.conversation_key:
        body["conversationKey"] = call.conversation_key
    if call.origin:
        body["origin"] = call.origin
    refusal = plain_http_refusal(
        call.bridge_url, f"{call.agent}'s bridge_url", insecure=call.insecure
    )
    if refusal:
        raise BridgeError(refusal, code="insecure_bridge_url", request_id=request_id)
    problem = cacert_problem(call.cacert) if call.bridge_url.startswith("https:") else None
    if problem:
        raise BridgeError(
            f"cannot verify {call.agent} at {call.bridge_url}: {problem}",
            code="agent_tls_failed",
            request_id=request_id,
        )
    http = session or requests.Session()
    progress = _Progress(call, request_id)
    try:
        admitted = _post_until_admitted(http, body, progress)
    except requests.exceptions.SSLError:
        raise BridgeError(
            f"{call.agent} at {call.bridge_url} failed TLS verification: its certificate is not "
            "signed by a CA Iris trusts (IRIS_TLS_CACERT) or does not name that host",
            code="agent_tls_failed",
            request_id=request_id,
        ) from None
    except requests.ConnectionError as exc:
        raise BridgeError(
            f"{call.agent} is unreachable at {call.bridge_url}: {exc}",
            code="agent_unreachable",
            request_id=request_id,
        ) from None
    except requests.Timeout:
        return _poll(http, request_id, progress)  # sent, but no answer yet: the log knows
    if admitted is None:  # stopped while the agent was busy: nothing was sent
        return BridgeReply("", request_id, "aborted")
    response = admitted
    with response, _closed_on_abort(response, call.abort):
        kind = response.headers.get("Content-Type", "")
        if response.status_code != 200:
            raise _http_error(response, call, request_id)
        try:
            if kind.startswith(NDJSON):
                reply = _read_stream(response, request_id, progress)
            else:  # an older agent: one JSON body
                return _plain_reply(response.json(), request_id)
        except Exception as exc:
            broke = isinstance(exc, (requests.RequestException, ValueError))
            if not (broke or progress.aborted()):
                raise
            if not progress.aborted():
                log.info(
                    "stream from %s broke (%s); recovering %s from its job log",
                    call.agent,
                    exc,
                    request_id,
                )
            reply = None
    if reply is not None:
        return reply
    if progress.aborted():
        return BridgeReply("", request_id, "aborted")
    return _poll(http, request_id, progress)


def _post_until_admitted(
    http: requests.Session, body: dict[str, Any], progress: _Progress
) -> requests.Response | None:
    """``POST /bridge``, sent again while the agent answers ``503 at_capacity``: that refusal
    comes before any job exists, so the same request (same id) can be repeated without ever
    running twice. Waits as ``Retry-After`` says, within the idle timeout, and says so; None
    when the caller stopped meanwhile."""
    call = progress.call
    while True:
        response = http.post(
            f"{call.bridge_url.rstrip('/')}/bridge",
            json=body,
            headers={"Accept": NDJSON, **_auth(call)},
            stream=True,
            timeout=(CONNECT_TIMEOUT, call.idle_timeout),
            # Per request: REQUESTS_CA_BUNDLE in the environment would override a session's.
            verify=verify_setting(call.cacert),
        )
        wait = _retry_after_capacity(response)
        if wait is None:
            progress.alive()  # admitted: the idle timeout counts from here
            return response
        response.close()
        left = call.idle_timeout - (time.monotonic() - progress.last_event)
        if left <= 0 or progress.past_deadline():
            raise BridgeError(
                f"{call.agent} stayed busy for {call.idle_timeout:.0f}s (all its streams are "
                f"open, IRIS_MAX_STREAMS); request {progress.request_id} was not sent",
                code="at_capacity",
                request_id=progress.request_id,
            )
        wait = min(wait, left)
        if call.on_status is not None:
            call.on_status(
                f"{call.agent} is busy (all its streams are open); retrying in {wait:.0f}s"
            )
        if (call.abort or threading.Event()).wait(wait):
            return None


def _retry_after_capacity(response: requests.Response) -> float | None:
    """Seconds to wait when ``response`` is the agent's ``503 at_capacity``, else None."""
    if response.status_code != 503:
        return None
    try:
        code = response.json().get("code")
        seconds = float(response.headers.get("Retry-After", ""))
    except (ValueError, AttributeError):
        return None
    if code != "at_capacity" or not math.isfinite(seconds):
        return None
    return min(max(seconds, MIN_CAPACITY_WAIT), MAX_CAPACITY_WAIT)


def _plain_reply(body: dict[str, Any], request_id: str) -> BridgeReply:
    silent = body.get("silent") is True
    return BridgeReply(str(body.get("text", "")), request_id, "done", silent=silent)


@contextlib.contextmanager
def _closed_on_abort(response: requests.Response, abort: threading.Event | None) -> Iterator[None]:
    """Close the stream as soon as the caller stops, instead of at the next heartbeat."""
    if abort is None:
        yield
        return
    finished = threading.Event()

    def watch() -> None:
        while not finished.is_set():
            if abort.wait(0.2):
                # close() alone does not wake a read blocked in another thread; shutdown does.
                with contextlib.suppress(Exception):
                    response.raw.shutdown()
                response.close()
                return

    threading.Thread(target=watch, name="iris-bridge-abort", daemon=True).start()
    try:
        yield
    finally:
        finished.set()


def _http_error(response: requests.Response, call: BridgeCall, request_id: str) -> BridgeError:
    try:
        body = response.json()
        message, code = str(body.get("error")), str(body.get("code") or "bridge_error")
    except ValueError:
        message, code = response.text[:200], "bridge_error"
    return BridgeError(
        f"{call.agent} refused request {request_id} (HTTP {response.status_code}): {message}",
        code=code,
        request_id=request_id,
    )
