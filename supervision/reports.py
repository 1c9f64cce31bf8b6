"""Structured reports: one log line per event that matters.

Events: ``child_started``, ``child_exited`` (with reason), ``child_restarted``,
``start_error``, ``shutdown_error``, ``max_intensity`` (the supervisor gave
up), ``crash`` (an actor exited abnormally). Each line reads
``event key=value ...`` and the same fields travel in the record's
``report`` attribute for machine consumers. Normal and shutdown exits are
logged at DEBUG, errors at ERROR, the rest at INFO.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("supervision")


def _fmt(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    if not text or any(c.isspace() for c in text) or "=" in text:
        return repr(text) if isinstance(value, str) else text.replace("\n", " ")
    return text


def report(event: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one event as a single ``event k=v ...`` line with fields attached."""
    if not logger.isEnabledFor(level):
        return
    line = " ".join([event] + [f"{k}={_fmt(v)}" for k, v in fields.items()])
    logger.log(level, "%s", line, extra={"report": {"event": event, **{k: repr(v) for k, v in fields.items()}}})
