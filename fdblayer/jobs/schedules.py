"""Periodic schedules of the worker pools' job types, and the exactly-once tick.

Data model (beside the couch_jobs rows)::

    (P, SCHEDULES, type) = {"c": cron expression, "d": encoded data, "l": last tick}

Principle: a schedule lives in the store, not in a host: any host serving
the type fires it, and :func:`fire_tick` is one serializable transaction,
so of several hosts firing the same tick exactly one enqueues its job
(:func:`fdblayer.jobs.work.enqueue`). A stored schedule that cannot be
decoded is logged and skipped, never fatal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Optional

import fdb.tuple
import msgpack

from fdblayer.interface import Transaction, transactional
from fdblayer.jobs.codec import encode_data, report_bad_row
from fdblayer.jobs.exceptions import NoTypeTimeout
from fdblayer.jobs.keys import SCHEDULES, JobType, Layout
from fdblayer.jobs.work import enqueue

__all__ = [
    "Schedule",
    "set_schedule",
    "clear_schedule",
    "get_schedules",
    "fire_tick",
    "FIRED",
    "SEEN",
    "CHANGED",
]

#: What :func:`fire_tick` did: added the tick's job; found it (or a later
#: tick) added already; found the schedule changed or removed.
FIRED, SEEN, CHANGED = "fired", "seen", "changed"

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Schedule:
    """A type's periodic schedule: a cron expression, the data of each tick's
    job, and the last tick enqueued (seconds since the epoch, or None)."""

    cron: str
    data: bytes
    last: Optional[int] = None

    def pack(self) -> bytes:
        return bytes(msgpack.packb({"c": self.cron, "d": self.data, "l": self.last}, use_bin_type=True))

    @classmethod
    def unpack(cls, raw: bytes, where: Any = None) -> Optional["Schedule"]:
        """Decode a stored schedule; an undecodable one is logged and read as None."""
        try:
            d = msgpack.unpackb(raw, raw=False)
            last = d.get("l")
            last = last if isinstance(last, int) and not isinstance(last, bool) else None
            return cls(str(d["c"]), bytes(d["d"]), last)
        except Exception as exc:  # noqa: BLE001 - a bad stored value is skipped, never fatal
            logger.warning("schedule_unreadable type=%r error=%r", where, exc)
            return None


@transactional
def set_schedule(
    tr: Transaction, layout: Layout, job_type: JobType, cron: str, data: Optional[bytes], now: int
) -> None:
    """Give ``job_type`` a periodic schedule; ticks up to ``now`` count as done
    (a schedule that existed keeps its last tick). ``data`` None keeps the
    data of a schedule that existed (none: an empty dict's).

    Raises:
        NoTypeTimeout: ``job_type`` has no type timeout.
    """
    if tr.get(layout.activity_timeout_key(job_type)) is None:
        raise NoTypeTimeout(f"job type {job_type!r} has no type timeout; set one first", job_type=job_type)
    key = layout.schedule_key(job_type)
    raw = tr.get(key)
    old = None if raw is None else Schedule.unpack(raw, job_type)
    if data is None:
        data = old.data if old else encode_data({})
    tr.set(key, Schedule(cron, data, old.last if old else now).pack())


@transactional
def clear_schedule(tr: Transaction, layout: Layout, job_type: JobType) -> None:
    """Remove ``job_type``'s periodic schedule (its jobs stay)."""
    tr.clear(layout.schedule_key(job_type))


@transactional
def get_schedules(tr: Transaction, layout: Layout) -> dict[Any, Schedule]:
    """Every readable schedule, by job type."""
    prefix = layout.subspace(SCHEDULES)
    out = {}
    for key, raw in tr.get_range_startswith(prefix):
        try:
            (job_type,) = fdb.tuple.unpack(key, len(prefix))
        except Exception as exc:  # noqa: BLE001 - a corrupt key is skipped
            report_bad_row("schedule_key", key, repr(exc)[:80])
            continue
        schedule = Schedule.unpack(raw, job_type)
        if schedule is not None:
            out[job_type] = schedule
    return out


@transactional
def fire_tick(tr: Transaction, layout: Layout, job_type: JobType, tick: int, job_id: str, cron: str) -> str:
    """Enqueue the job of one tick of the schedule ``cron`` unless this tick
    (or a later one) was enqueued.

    Serializable, so of several hosts firing the same tick exactly one adds
    its job.

    Returns:
        :data:`FIRED` for the host that added it; :data:`CHANGED` when the
        type's schedule is no longer ``cron`` (changed or removed since the
        host armed the tick: nothing is added, the host should read the
        schedules again); :data:`SEEN` otherwise (this tick or a later one
        was enqueued, or the type has no type timeout).
    """
    key = layout.schedule_key(job_type)
    raw = tr.get(key)
    schedule = None if raw is None else Schedule.unpack(raw, job_type)
    if schedule is None or schedule.cron != cron:
        return CHANGED
    if schedule.last is not None and schedule.last >= tick:
        return SEEN
    tr.set(key, replace(schedule, last=tick).pack())
    try:
        enqueue(tr, layout, job_type, job_id, schedule.data, 0, None)
    except NoTypeTimeout:
        return SEEN
    return FIRED
