"""The sandbox of one tool call, and what a command in it gets: its view, cwd and environment."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from iris_runtime.engine.tools import ToolContext
from iris_runtime.errors import InvalidInput
from iris_runtime.secrets.run_tokens import RUN_TOKENS, RunGrant
from iris_runtime.tools.environment import tool_environment
from iris_runtime.tools.sandbox.base import (
    SANDBOX_PATH,
    Launch,
    RunSecrets,
    Sandbox,
    WorkspaceView,
)
from iris_runtime.tools.sandbox.select import WrappedSandbox
from iris_runtime.tools.sandbox.view import host_view

_GRANT_MARGIN_SECONDS = 60.0  # beyond the command's timeout, for the kill and cleanup


def sandbox_of(ctx: ToolContext) -> Sandbox | None:
    """The call's sandbox; None when its level is not available (the tool refuses to run)."""
    found: Any = ctx.sandboxes.get(ctx.sandbox)
    if found is not None and not hasattr(found, "launch") and hasattr(found, "wrap"):
        return WrappedSandbox(ctx.sandbox, found, ctx.workspace)  # a pre-view plugin object
    return found  # type: ignore[no-any-return]


def view_of(ctx: ToolContext) -> WorkspaceView:
    """The folders the file tools may touch: what a command at this level sees."""
    sandbox = sandbox_of(ctx)
    if sandbox is None and ctx.sandbox != "host":
        # As bash does: a level that is not available here never falls back to the host.
        raise InvalidInput(
            f"sandbox level {ctx.sandbox!r} is not available here; the file tools refuse",
            code="sandbox_unavailable",
        )
    if sandbox is None or not sandbox.isolated:
        return host_view(ctx.workspace)
    return sandbox.view


def launch_command(sandbox: Sandbox, argv: list[str], ctx: ToolContext) -> Launch:
    if not sandbox.isolated:
        env = {**tool_environment(os.environ), **ctx.env}
        if isinstance(sandbox, WrappedSandbox):  # unproven: never Iris's own token
            env.pop("IRIS_API_TOKEN", None)
        return sandbox.launch(argv, str(ctx.workspace), env)
    inside = sandbox.view.root.inside
    env = {**inside_environment(inside), **ctx.env}  # the run's own (the chat's id, say)
    run_secrets: RunSecrets | None = getattr(sandbox, "run_secrets", None)
    if run_secrets is None:
        return sandbox.launch(argv, inside, env)
    # Never Iris's own token: one that reads only the skills' secrets, revoked after the run.
    grant = RUN_TOKENS.issue(run_secrets.names(), ctx.timeout_seconds + _GRANT_MARGIN_SECONDS)
    env |= {"IRIS_API_TOKEN": grant.token, "IRIS_SECRET_BROKER_URL": run_secrets.broker_url}
    try:
        launch = sandbox.launch(argv, inside, env)
    except BaseException:
        RUN_TOKENS.revoke(grant)
        raise
    return replace(launch, cleanup=_then_revoke(launch.cleanup, grant))


def _then_revoke(cleanup: Callable[[], None] | None, grant: RunGrant) -> Callable[[], None]:
    def run() -> None:
        RUN_TOKENS.revoke(grant)
        if cleanup is not None:
            cleanup()

    return run


def inside_environment(home: str) -> dict[str, str]:
    """A sandboxed command's whole environment: nothing of Iris's own is passed in."""
    return {"PATH": SANDBOX_PATH, "HOME": home, "LANG": "C.UTF-8", "TERM": "dumb"}
