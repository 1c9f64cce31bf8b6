"""What a handler can say besides returning or failing, and the options it carries.

Principle: a handler steers its own job by raising, as in RQ, Huey and
Celery, and declares its defaults where it is written, as Oban and Celery
workers do:

* ``raise Retry(in_seconds=S)``: this attempt failed; run again after
  ``S`` seconds instead of the backoff (the attempt counts: with none
  left the job fails for good);
* ``raise Snooze(S)``: not now; run again after ``S`` seconds, the attempt
  not counted and no error kept;
* ``raise Cancel(reason)``: fail for good at once, whatever attempts are
  left;
* ``@handler(max_attempts=5, timeout=60, backoff=(2, 600), priority=3)``
  on the callable: the defaults of its type on every host that serves it
  (the priority through the store, for producers anywhere); a job's own
  ``enqueue`` arguments override them, the host's flags come under both.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

from fdblayer.jobs.exceptions import InvalidArgument

__all__ = ["Retry", "Snooze", "Cancel", "handler", "handler_options", "MAX_DELAY"]

#: The longest delay a handler may ask for (a year, in seconds).
MAX_DELAY = 366 * 86400.0
_OPTIONS = "__otpjobs_options__"


def _delay(value: Any, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= MAX_DELAY
    ):
        raise InvalidArgument(f"{name} must be a number of seconds from 0 to {MAX_DELAY:.0f}, not {value!r:.80}")
    return float(value)


class Retry(Exception):
    """Raised by a handler: fail this attempt and run again after ``in_seconds``."""

    def __init__(self, in_seconds: float = 0.0, message: str = "") -> None:
        self.in_seconds = _delay(in_seconds, "Retry(in_seconds)")
        super().__init__(message or f"retry in {self.in_seconds:g}s")


class Snooze(Exception):
    """Raised by a handler: run again after ``seconds``, this attempt not counted."""

    def __init__(self, seconds: float) -> None:
        self.seconds = _delay(seconds, "Snooze(seconds)")
        super().__init__(f"snoozed for {self.seconds:g}s")


class Cancel(Exception):
    """Raised by a handler: the job fails for good now, with ``reason``."""

    def __init__(self, reason: str = "cancelled by its handler") -> None:
        self.reason = str(reason)
        super().__init__(self.reason)


def handler(
    *,
    max_attempts: Optional[int] = None,
    timeout: Optional[float] = None,
    backoff: Optional[tuple] = None,
    priority: Optional[int] = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a handler's defaults (see the module docstring); checked here,
    so a bad value fails at import, before any host starts.

    Args:
        max_attempts: attempts before the job fails for good (1 to 1000).
        timeout: seconds a run may take; past it the handler sees
            ``ctx.stopping``, then is stopped after the host's grace.
        backoff: ``(base, cap)`` seconds of the retry backoff.
        priority: 0 (first) to 9: the priority of the type's jobs enqueued
            without one (a host serving the type records it in the store,
            where producers read it).

    Raises:
        InvalidArgument: a value out of its range.
    """
    options: dict[str, Any] = {}
    if max_attempts is not None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not 1 <= max_attempts <= 1000:
            raise InvalidArgument(f"max_attempts must be an int from 1 to 1000, not {max_attempts!r:.80}")
        options["max_attempts"] = max_attempts
    if timeout is not None:
        options["timeout"] = _delay(timeout, "timeout")
        if options["timeout"] <= 0:
            raise InvalidArgument("timeout must be more than 0 seconds")
    if backoff is not None:
        if not isinstance(backoff, (tuple, list)) or len(backoff) != 2:
            raise InvalidArgument(f"backoff must be (base, cap) in seconds, not {backoff!r:.80}")
        base, cap = _delay(backoff[0], "backoff base"), _delay(backoff[1], "backoff cap")
        options["backoff"] = (base, max(base, cap))
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
            raise InvalidArgument(f"priority must be an int from 0 (first) to 9, not {priority!r:.80}")
        options["priority"] = priority

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        setattr(fn, _OPTIONS, dict(options))
        return fn

    return mark


def handler_options(fn: Any) -> dict:
    """The options :func:`handler` gave ``fn`` (empty when none)."""
    options = getattr(fn, _OPTIONS, None)
    return dict(options) if isinstance(options, dict) else {}
