"""Bearer-token authentication for the internal API (constant-time comparison).

The shared ``IRIS_API_TOKEN`` is the unrestricted caller ``iris``. A sub-agent that presents the
token registered for it in ``agents.json`` is identified as that agent — from the token, never
from anything it says about itself — and may only use the routes meant for agents.
"""

from __future__ import annotations

import hmac

from flask import Flask, Response, g, request

from iris_runtime.agents.registry import AgentRegistry
from iris_runtime.errors import IrisError
from iris_runtime.secrets.broker import IRIS_CALLER
from iris_runtime.secrets.run_tokens import RUN_CALLER_PREFIX, RUN_TOKENS
from iris_runtime.web.errors import error_response

PUBLIC_ENDPOINTS = frozenset({"health.health"})
# The secrets routes are open to every token Iris knows (an agent's, a sandboxed run's) so that
# a refusal comes from the broker, which audits it; the broker lets such a caller read the
# names on its allow-list (or its run's grant) and nothing else.
SECRETS_ENDPOINTS = frozenset(
    {
        "secrets.list_secrets",
        "secrets.read_secret",
        "secrets.put_secret",
        "secrets.delete_secret",
    }
)
# Routes a sub-agent may call with its own token.
AGENT_ENDPOINTS = SECRETS_ENDPOINTS | {"escalate.escalate"}


def token_matches(presented: str, expected: str) -> bool:
    return bool(expected) and hmac.compare_digest(presented.encode(), expected.encode())


def identify(presented: str, shared: str, registry: AgentRegistry) -> str | None:
    """``iris`` for the shared token, an agent's name for its own token, else None."""
    if token_matches(presented, shared):
        return IRIS_CALLER
    run_caller = RUN_TOKENS.identify(presented)  # a sandboxed run's short-lived token
    if run_caller is not None:
        return run_caller
    try:
        entry = registry.find_by_token(presented)
    except IrisError:
        return None  # an unreadable registry grants nothing
    return entry.name if entry else None


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None. The scheme is
    case-insensitive and may be followed by several spaces (RFC 9110 §11.4); a token has none."""
    scheme, _, rest = header.partition(" ")
    token = rest.lstrip(" ")
    if scheme.lower() != "bearer" or not token or any(ch.isspace() for ch in token):
        return None
    return token


def require_bearer_token(app: Flask, expected: str, registry: AgentRegistry) -> None:
    @app.before_request
    def _check_token() -> Response | None:
        if request.endpoint in PUBLIC_ENDPOINTS or request.endpoint is None:
            return None
        presented = bearer_token(request.headers.get("Authorization", ""))
        if presented is None:
            return error_response(
                "missing bearer token (Authorization: Bearer …)", "unauthorized", 401
            )
        caller = identify(presented, expected, registry)
        if caller is None:
            return error_response("invalid API token", "unauthorized", 401)
        if caller.startswith(RUN_CALLER_PREFIX) and request.endpoint not in SECRETS_ENDPOINTS:
            return error_response("a sandboxed run's token only reads secrets", "forbidden", 403)
        if caller != IRIS_CALLER and request.endpoint not in AGENT_ENDPOINTS:
            return error_response(f"agent {caller!r} may not call this route", "forbidden", 403)
        g.caller = caller
        return None
