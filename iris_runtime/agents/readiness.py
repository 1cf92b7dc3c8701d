"""Is a freshly started agent answering? ``/health`` on its API port, then one bridge round trip.

The bridge port serves only ``POST /bridge`` and ``GET /bridge/jobs/<id>`` (404 for anything
else, ``/health`` included), so health is asked of the API port (bridge port + 100) and the bridge
is checked with a lookup of a job that cannot exist: an Iris bridge answers ``404 unknown_job``.
That proves the bridge listener is up, and that it takes the token Iris holds for the agent (a
wrong one is a 401), without spending a model turn.

An agent host's bridge listens on that host's address over TLS: it is checked as Iris will call
it, certificate verified against ``cacert`` (IRIS_TLS_CACERT, else the system's CAs).

Requests go straight to the agent: proxy settings in the environment are ignored, or a host with
``http_proxy`` set would send them to the proxy and report a healthy agent as dead.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from iris_runtime.bridge.protocol import bearer_header
from iris_runtime.errors import ProvisionError
from iris_runtime.provision.launch import AgentLaunch, Progress
from iris_runtime.tls import cacert_problem

POLL_SECONDS = 0.2
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def wait_until_ready(
    launch: AgentLaunch,
    manager: str,
    timeout: float,
    progress: Progress,
    *,
    token: str,
    cacert: str | None = None,
) -> None:
    """``token`` is what Iris presents to the agent's bridge (its own, else the shared one)."""
    progress(f"waiting for {launch.health_url}")
    deadline = time.monotonic() + timeout
    while not healthy(launch.health_url):
        if time.monotonic() > deadline:
            raise ProvisionError(
                f"{launch.name} did not become healthy within {timeout:.0f} s "
                f"({launch.health_url})" + log_hint(launch, manager)
            )
        time.sleep(POLL_SECONDS)
    problem = bridge_problem(launch.bridge_url, token, cacert)
    if problem:
        raise ProvisionError(f"{launch.name}'s bridge at {launch.bridge_url}: {problem}")
    progress(f"bridge round trip to {launch.bridge_url} ok")


def healthy(url: str) -> bool:
    try:
        with _DIRECT.open(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):
        return False


def bridge_problem(bridge_url: str, token: str, cacert: str | None = None) -> str | None:
    probe = urllib.request.Request(  # noqa: S310 (the agent's own http(s) URL)
        f"{bridge_url}/bridge/jobs/{uuid.uuid4()}", headers=bearer_header(token)
    )
    opener = _DIRECT
    if bridge_url.startswith("https:"):
        try:
            context = ssl.create_default_context(cafile=cacert)
        except (ssl.SSLError, OSError):
            return cacert_problem(cacert) or f"IRIS_TLS_CACERT {cacert} cannot be used"
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )
    try:
        with opener.open(probe, timeout=5) as response:
            return f"expected 404 for an unknown job, got {response.status}"
    except urllib.error.HTTPError as exc:
        try:
            code = json.loads(exc.read() or b"{}").get("code")
        except ValueError:
            code = None
        if exc.code == 404 and code == "unknown_job":
            return None
        if exc.code == 401:
            return "it refused Iris's token for it (its agents.json token, else IRIS_API_TOKEN)"
        return f"unexpected answer {exc.code} ({code or 'not JSON'})"
    except OSError as exc:
        return f"not reachable: {exc}"


def log_hint(launch: AgentLaunch, manager: str) -> str:
    """Where to look next, with the agent's last log lines when they are at hand."""
    if manager == "systemd":
        return f"; see `journalctl -u {launch.unit_name}`"
    if manager == "docker":
        return f"; see `docker logs iris-agent-{launch.name}`"
    log_file = Path(launch.home) / "logs" / "agent.log"
    try:
        tail = log_file.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
    except OSError:
        return ""
    return f"; last lines of {log_file}:\n" + "\n".join(tail)
