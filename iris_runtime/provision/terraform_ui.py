"""Terraform's machine-readable UI (``-json``): one JSON object per line, typed (apply_start,
apply_complete, diagnostic, change_summary...). Here each becomes what a person reads: a short
progress line, or a :class:`Diagnostic` whose text ends with what went wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_LONGEST_LINE = 300
_DETAIL_LINES = 12


@dataclass(frozen=True)
class Diagnostic:
    severity: str  # "error" | "warning"
    summary: str
    detail: str = ""
    address: str = ""

    def __str__(self) -> str:
        where = f"{self.address}: " if self.address else ""
        # A failed provisioner's detail is its whole output: its end says what went wrong.
        lines = [line.rstrip() for line in self.detail.strip().splitlines() if line.strip()]
        if len(lines) > _DETAIL_LINES:
            lines = ["…", *lines[-_DETAIL_LINES:]]
        detail = ": " + "\n".join(lines) if lines else ""
        return f"{where}{self.summary}{detail}"


def diagnostic_of(raw: Mapping[str, Any]) -> Diagnostic:
    return Diagnostic(
        severity=str(raw.get("severity", "error")),
        summary=str(raw.get("summary", "")).strip(),
        detail=str(raw.get("detail", "") or ""),
        address=str(raw.get("address", "") or ""),
    )


def shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _LONGEST_LINE else text[: _LONGEST_LINE - 1] + "…"


def describe(message: Mapping[str, Any]) -> str | None:
    """One short human line for a ``-json`` UI message, or None when it is not worth showing."""
    kind = message.get("type")
    hook = message.get("hook") or {}
    resource = (hook.get("resource") or {}).get("addr", "")
    if kind == "apply_start":
        return f"{resource}: {hook.get('action', 'apply')}…"
    if kind == "apply_progress":
        return f"{resource}: still working ({hook.get('elapsed_seconds', 0)}s)"
    if kind == "apply_complete":
        return f"{resource}: {hook.get('action', 'apply')} done ({hook.get('elapsed_seconds', 0)}s)"
    if kind == "apply_errored":
        return f"{resource}: {hook.get('action', 'apply')} failed"
    if kind == "provision_progress":
        output = str(hook.get("output", "")).strip()
        return f"{resource}: {shorten(output)}" if output else None
    if kind == "provision_errored":
        return f"{resource}: {hook.get('provisioner', 'provisioner')} failed"
    if kind == "planned_change":
        change = message.get("change") or {}
        addr = (change.get("resource") or {}).get("addr", "")
        return f"plan: {change.get('action', 'change')} {addr}"
    if kind == "change_summary":
        return str(message.get("@message", "")) or None
    if kind == "diagnostic":
        diagnostic = diagnostic_of(message.get("diagnostic") or {})
        if diagnostic.severity == "warning":
            return f"warning: {shorten(str(diagnostic))}"
    return None


def parse_line(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
