"""Token usage and cost: how it is written to logs, summed, and shown to people."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from iris_runtime.engine.provider import Usage

_FIELDS = {
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
    "cacheReadTokens": "cache_read_tokens",
    "cacheWriteTokens": "cache_write_tokens",
}


def usage_to_json(usage: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {key: getattr(usage, attr) for key, attr in _FIELDS.items()}
    out["totalTokens"] = (
        usage.input_tokens
        + usage.output_tokens
        + usage.cache_read_tokens
        + (usage.cache_write_tokens)
    )
    out["costUsd"] = round(usage.cost_usd, 6)
    return out


def usage_from_json(raw: Any) -> Usage:
    """Tolerant: a missing or odd field counts as zero (logs are read back, never trusted)."""
    if not isinstance(raw, dict):
        return Usage()

    def number(key: str) -> int:
        value = raw.get(key, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    cost = raw.get("costUsd", 0.0)
    if not isinstance(cost, int | float) or isinstance(cost, bool):
        cost = 0.0
    return Usage(
        input_tokens=number("inputTokens"),
        output_tokens=number("outputTokens"),
        cache_read_tokens=number("cacheReadTokens"),
        cache_write_tokens=number("cacheWriteTokens"),
        cost_usd=float(cost),
    )


def total(usages: Iterable[Usage]) -> Usage:
    result = Usage()
    for usage in usages:
        result = result + usage
    return result


def summary_line(usage: Usage) -> str:
    """One line for people, e.g. ``Usage: 1,234 in · 567 out · 200 cache read · $0.0123``."""
    parts = [f"{usage.input_tokens:,} in", f"{usage.output_tokens:,} out"]
    if usage.cache_read_tokens:
        parts.append(f"{usage.cache_read_tokens:,} cache read")
    if usage.cache_write_tokens:
        parts.append(f"{usage.cache_write_tokens:,} cache write")
    parts.append(f"${usage.cost_usd:.4f}")
    return "Usage: " + " · ".join(parts)
