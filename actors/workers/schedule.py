"""Cron expressions of periodic job types (through ``croniter``, a well-kept cron library).

Five fields (minute hour day month weekday) or six, the sixth being
seconds, as croniter reads them. Times are seconds since the epoch, in UTC.
croniter (and dateutil under it) is imported at the first expression read,
not with this module: a host without periodic types never loads it (5 ms
of every worker host's start).
"""

from __future__ import annotations

import time
from typing import Any, Optional

from fdblayer.jobs.exceptions import InvalidArgument

__all__ = ["check_cron", "next_tick", "previous_tick"]

#: The longest cron expression accepted (it is stored with the type).
MAX_CRON = 200


def _croniter() -> Any:
    from croniter import croniter

    return croniter


def check_cron(cron: object) -> str:
    """Return ``cron`` if croniter can read it, it picks no random value,
    and it fires at least once from now on.

    Raises:
        InvalidArgument: not a str, too long, not a cron expression, with a
            random field (croniter's ``R``: each read, so each host, would
            pick its own tick), or never firing (February 30, a past year).
    """
    if not isinstance(cron, str):
        raise InvalidArgument(f"a cron schedule must be a str, not {type(cron).__name__}")
    cron = cron.strip()
    if not cron or len(cron) > MAX_CRON or not _croniter().is_valid(cron):
        raise InvalidArgument(f"not a cron schedule: {cron[:MAX_CRON]!r}")
    if any(part[:1] in ("r", "R") for field in cron.split() for part in field.split(",")):
        raise InvalidArgument(f"random cron fields (R) are not supported: every host would pick its own tick: {cron!r}")
    if next_tick(cron, time.time()) is None:
        raise InvalidArgument(f"cron schedule {cron!r} never fires")
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
