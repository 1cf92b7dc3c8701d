"""Parsing request bodies: JSON objects with known fields only, and clear 400s otherwise."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from flask import request

from iris_runtime.errors import InvalidInput


def json_object(
    *,
    required: Collection[str] = (),
    optional: Collection[str] = (),
    ignore_unknown: bool = False,
) -> dict[str, Any]:
    """The body as a JSON object with ``required`` present. Fields outside ``required`` and
    ``optional`` are a 400 unless ``ignore_unknown`` (a protocol that must accept what newer
    senders add); then they are dropped, so callers only ever see fields they know."""
    raw = request.get_data(cache=True)
    if not raw.strip():
        if required:
            raise InvalidInput("the request body must be a JSON object", code="malformed_json")
        return {}
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"malformed JSON: {exc}", code="malformed_json") from None
    except RecursionError:
        raise InvalidInput("malformed JSON: nested too deeply", code="malformed_json") from None
    if not isinstance(body, dict):
        raise InvalidInput("the request body must be a JSON object", code="malformed_json")
    unknown = sorted(set(body) - set(required) - set(optional))
    if unknown and ignore_unknown:
        body = {k: v for k, v in body.items() if k not in unknown}
    elif unknown:
        raise InvalidInput(f"unknown field(s): {', '.join(unknown)}", code="unknown_fields")
    missing = sorted(set(required) - set(body))
    if missing:
        raise InvalidInput(f"missing field(s): {', '.join(missing)}", code="missing_fields")
    return body


def string_field(body: dict[str, Any], name: str, *, allow_empty: bool = False) -> str:
    value = body.get(name)
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise InvalidInput(f"{name!r} must be a non-empty string", code="invalid_field")
    return value
