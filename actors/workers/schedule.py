"""Cron expressions of periodic job types (through ``croniter``, a well-kept cron library).

Five fields (minute hour day month weekday) or six, the sixth being
seconds, as croniter reads them. Times are seconds since the epoch, in UTC.
croniter (and dateutil under it) is imported at the first expression read,
not with this module: a host without periodic types never loads it (5 ms
of every worker host's start).
"""

from __future__ import annotations

from typing import Any, Optional

from fdblayer.jobs.exceptions import InvalidArgument

__all__ = ["check_cron", "next_tick", "previous_tick"]

#: The longest cron expression accepted (it is stored with the type).
MAX_CRON = 200


def _croniter() -> Any:
    from croniter import croniter

    return croniter


def check_cron(cron: object) -> str:
    """Return ``cron`` if croniter can read it.

    Raises:
        InvalidArgument: not a str, too long, or not a cron expression.
    """
    if not isinstance(cron, str):
        raise InvalidArgument(f"a cron schedule must be a str, not {type(cron).__name__}")
    cron = cron.strip()
    if not cron or len(cron) > MAX_CRON or not _croniter().is_valid(cron):
        raise InvalidArgument(f"not a cron schedule: {cron[:MAX_CRON]!r}")
    return cron


def next_tick(cron: str, now: float) -> Optional[int]:
    """The first tick strictly after ``now`` (whole seconds), None if unreadable."""
    try:
        return int(_croniter()(cron, now).get_next(float))
    except Exception:  # noqa: BLE001 - a bad stored schedule is skipped, never fatal
        return None


def previous_tick(cron: str, now: float) -> Optional[int]:
    """The last tick at or before ``now`` (whole seconds), None if unreadable."""
    try:
        it = _croniter()(cron, now + 0.001)
        return int(it.get_prev(float))
    except Exception:  # noqa: BLE001
        return None
