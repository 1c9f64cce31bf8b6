"""Values read from the store made fit for JSON.

A stored value another writer left with bytes (msgpack keeps them, as
keys or values) or a non-finite number cannot be written as JSON; the
HTTP views and the command line show the nearest JSON instead of failing
the whole page or command.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["dumps", "jsonable"]


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps(value, **options)`` (never ``NaN`` or ``Infinity``), or,
    only when that fails, the same of :func:`jsonable` of ``value``: one
    bad stored row must not make its page, or its type's listing, an error."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except (TypeError, ValueError):
        return json.dumps(jsonable(value), allow_nan=False, **options)


def jsonable(value: Any) -> Any:
    """``value`` with bytes as text (escaped where not UTF-8), non-finite
    numbers as None, other objects as their ``str``; dict keys alike."""
    if isinstance(value, dict):
        return {_key(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _key(key: Any) -> str:
    """A dict key as JSON keeps it: text (so that keys sort together)."""
    if isinstance(key, (bytes, bytearray)):
        return bytes(key).decode("utf-8", "backslashreplace")
    return key if isinstance(key, str) else str(key)
