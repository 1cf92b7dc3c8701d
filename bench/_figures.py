"""How a bench reports: every figure is one JSON line on stdout,
``{"bench", "metric", "value", "unit", "baseline", "ratio"}``, ``ratio`` always value / baseline.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile (0-100) with linear interpolation between closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ratio(value: float, baseline: float | None) -> float | None:
    if baseline is None or baseline == 0 or math.isnan(baseline) or math.isnan(value):
        return None
    return value / baseline


def _rounded(value: float | None, digits: int = 3) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(value, digits)


def emit(bench: str, metric: str, value: float, unit: str, baseline: float | None = None) -> None:
    """Print one figure as a JSON line, with its ratio to ``baseline``."""
    line = {
        "bench": bench,
        "metric": metric,
        "value": _rounded(value),
        "unit": unit,
        "baseline": _rounded(baseline),
        "ratio": _rounded(ratio(value, baseline)),
    }
    print(json.dumps(line), flush=True)


def emit_percentiles(
    bench: str,
    prefix: str,
    latencies_ms: Sequence[float],
    baseline_ms: Sequence[float],
    pcts: Sequence[float] = (50.0, 99.0),
) -> None:
    """``<prefix>_p50_ms`` and ``<prefix>_p99_ms`` (``p50_ms``... without a prefix), each
    against the same percentile of the baseline's latencies."""
    for pct in pcts:
        metric = f"{prefix}_p{pct:.0f}_ms" if prefix else f"p{pct:.0f}_ms"
        emit(bench, metric, percentile(latencies_ms, pct), "ms", percentile(baseline_ms, pct))


def p50_within(latencies_ms: Sequence[float], baseline_ms: Sequence[float], most: float) -> bool:
    """Whether the p50 of ``latencies_ms`` is at most ``most`` times the baseline's p50."""
    found = ratio(percentile(latencies_ms, 50), percentile(baseline_ms, 50))
    return found is not None and found <= most
