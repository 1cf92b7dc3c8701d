"""The relay contract v1, Iris's side of the HTTP: one POST per turn, one best-effort stop.

The reply to a turn travels over the reach socket, never in the POST's response, so the POST
only has to be accepted: any 2xx. Its body may carry ``{"session": "…"}``, recorded with the
chat; anything else in it is ignored (the contract only ever grows).
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import mimetypes
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iris_runtime.engine.transport import Attachment

if TYPE_CHECKING:
    import requests

log = logging.getLogger(__name__)

CONTRACT_VERSION = 1
MAX_IMAGE_BYTES = 10 * 1024 * 1024  # an image bigger than this is named in the text only


@functools.cache
def _http() -> requests.Session:
    """One pooled client, made on first use (a serving Iris that never relays loads none)."""
    import requests

    session = requests.Session()
    # The relay is on loopback: a proxy from the environment must never see the turn, and a
    # redirect must never lead the POST off this machine.
    session.trust_env = False
    return session


class RelayError(Exception):
    """The relay did not accept the turn; the message says why, for the chat."""


def message_body(
    chat_id: str,
    turn_id: str,
    text: str,
    attachments: Sequence[Attachment],
    data_dir: Path,
    cwd: Path,
    origin: str,
) -> dict[str, Any]:
    """The ``message`` POST: attachments are named in the text, images also sent inline."""
    images = [{"mime": mime, "data_b64": data} for mime, data in images_of(attachments, data_dir)]
    if attachments:
        text = f"{text}\n\nAttached: {', '.join(a.name for a in attachments)}"
    return {
        "v": CONTRACT_VERSION,
        "type": "message",
        "chat_id": chat_id,
        "turn_id": turn_id,
        "text": text,
        "images": images,
        "cwd": str(cwd),
        "origin": origin,
    }


def images_of(attachments: Sequence[Attachment], data_dir: Path) -> list[tuple[str, str]]:
    """The image attachments as (mime type, base64 data), for both shapes of custom agent."""
    images = []
    for attachment in attachments:
        mime = mimetypes.guess_type(attachment.name)[0] or ""
        path = data_dir / attachment.local
        if mime.startswith("image/") and path.is_file() and path.stat().st_size <= MAX_IMAGE_BYTES:
            images.append((mime, base64.b64encode(path.read_bytes()).decode()))
    return images


def post_turn(url: str, body: dict[str, Any], timeout: float) -> str | None:
    """POST the turn; returns the session the relay asked to record, if any."""
    import requests

    try:
        response = _http().post(
            url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            timeout=timeout,
            allow_redirects=False,
        )
    except requests.ConnectionError:
        raise RelayError(f"the relay at {url} refused the connection (is it running?)") from None
    except requests.Timeout:
        raise RelayError(
            f"the relay at {url} did not accept the turn within {timeout:g} s"
        ) from None
    except requests.RequestException as exc:
        raise RelayError(f"the relay at {url} could not be reached: {exc}") from None
    with response:
        if not 200 <= response.status_code < 300:
            raise RelayError(f"the relay at {url} refused the turn: HTTP {response.status_code}")
        return _session_of(response.content)


def _session_of(content: bytes) -> str | None:
    if not content.strip():
        return None
    try:
        answer = json.loads(content)
    except (ValueError, RecursionError):
        return None  # a body is optional; one that is not JSON means nothing
    session = answer.get("session") if isinstance(answer, dict) else None
    return session if isinstance(session, str) and session else None


def send_stop(url: str, chat_id: str, turn_id: str, timeout: float) -> None:
    """Tell the relay once that the turn was stopped; nothing waits for it or retries it."""
    body = {"v": CONTRACT_VERSION, "type": "stop", "chat_id": chat_id, "turn_id": turn_id}

    def send() -> None:
        import requests

        try:
            _http().post(url, json=body, timeout=timeout, allow_redirects=False).close()
        except requests.RequestException as exc:
            log.info("the stop for turn %s did not reach %s: %s", turn_id, url, exc)

    threading.Thread(target=send, name=f"relay stop {turn_id}", daemon=True).start()
