"""``iris doctor``'s sandbox checks: the level is installed and can run here, and with
``--sandbox`` what the boundary probe sees inside it."""

from __future__ import annotations

import os

from iris_runtime.config import Settings
from iris_runtime.custom_agents.acp_sandbox import OPT_OUT, unsandboxed_refusal
from iris_runtime.plugins import PluginHost
from iris_runtime.tools.sandbox import SandboxUnavailable, open_sandbox
from iris_runtime.tools.sandbox.probe import ProbeReport, problems, run_probe


def sandbox_checks(
    settings: Settings, host: PluginHost, *, probe: bool
) -> tuple[list[tuple[str, str, str]], ProbeReport | None]:
    """(name, status, detail) rows, and the probe's report when it ran."""
    levels = ", ".join(sorted(host.sandboxes()))
    try:
        sandbox = open_sandbox(settings.sandbox, host.sandboxes(), settings.data_dir, settings.env)
    except SandboxUnavailable as exc:
        return [
            ("sandbox", "fail", f"{settings.sandbox}: {exc.message} (installed: {levels})"),
            *_acp_rows(settings),
        ], None
    rows = [("sandbox", "ok", f"{settings.sandbox} (installed: {levels})"), *_acp_rows(settings)]
    if getattr(sandbox, "unproven", False):
        detail = (
            f"{settings.sandbox}: unproven (IRIS_SANDBOX_UNPROVEN=1): a wrap-only plugin level, "
            f"no view and no probe; commands reach the whole data dir (installed: {levels})"
        )
        rows = [("sandbox", "warn", detail), *_acp_rows(settings)]
    if not probe:
        return rows, None
    if not settings.data_dir.is_dir():
        return [*rows, ("sandbox_probe", "warn", "no data dir yet: nothing to probe")], None
    try:
        report = run_probe(sandbox, settings.data_dir)
    except SandboxUnavailable as exc:
        return [*rows, ("sandbox_probe", "fail", exc.message)], None
    found = problems(report, sandbox, os.geteuid())
    if found:
        detail = f"shows the host: {'; '.join(found)} ({report.summary()})"
        return [*rows, ("sandbox_probe", "fail", detail)], report
    return [*rows, ("sandbox_probe", "ok", report.summary())], report


def _acp_rows(settings: Settings) -> list[tuple[str, str, str]]:
    """Custom ACP agents run on the host whatever the level: refused, or warned about."""
    if settings.sandbox.partition(":")[0] == "host":
        return []
    if unsandboxed_refusal({**settings.env, "IRIS_SANDBOX": settings.sandbox}) is None:
        return [("acp_agents", "warn", f"{OPT_OUT}=1: ACP agents run on the host, unsandboxed")]
    return [("acp_agents", "ok", f"not started at this level ({OPT_OUT}=1 would allow them)")]
